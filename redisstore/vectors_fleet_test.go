package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

const embedder = "gemini-embedding-001"

// The prompts of the shared semantic cache's story: the paraphrase is at
// cosine similarity 0.97 to the first, the other at 0.90.
const (
	asked      = "How is the weather in Paris today?"
	paraphrase = "What's the weather like in Paris today?"
	further    = "How is the weather in Rome today?"
)

func weatherVectors(text string, _ int) []float32 {
	switch {
	case strings.Contains(text, asked):
		return []float32{1, 0, 0, 0}
	case strings.Contains(text, paraphrase):
		return []float32{0.97, 0.2431, 0, 0}
	case strings.Contains(text, further):
		return []float32{0.9, 0, 0.4359, 0}
	}
	return []float32{0, 0, 0, 1}
}

// TestRedisSemanticCacheSharedByTheFleet: replica A answers a prompt; with
// every model down, replica B is served A's answer from Redis for a
// paraphrase above the threshold and not below it. Redis holds no prompt
// text, nor its template, in any key or value; the entries expire.
func TestRedisSemanticCacheSharedByTheFleet(t *testing.T) {
	rdb := redisClient(t, redisserver.Start(t))
	store := redisstore.New(rdb, redisstore.WithPrefix(t.Name()), redisstore.WithTimeouts(time.Second, 2*time.Second)) // a loaded -race run
	srv := geminitest.New(geminitest.Model{Name: flash, Text: "Sunny, 24 degrees."}, geminitest.Model{Name: embedder, Embed: weatherVectors})
	a, b := semanticReplica(t, srv, store), semanticReplica(t, srv, store)

	text, rec, _, err := askWith(t.Context(), a, asked, nil)
	require.NoError(t, err)
	assert.Equal(t, "Sunny, 24 degrees.", text)
	assert.Equal(t, flash, rec.Model)

	srv.SetModel(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
	var brec geminiguard.CallRecord
	resp, err := b.GenerateContent(geminiguard.RecordCall(t.Context(), &brec), "", genai.Text(paraphrase), nil)
	require.NoError(t, err)
	assert.Equal(t, "Sunny, 24 degrees.", resp.Text(), "B is served A's answer for the paraphrase")
	assert.True(t, geminiguard.IsFallback(resp))
	assert.True(t, brec.Fallback)
	assert.Equal(t, geminiguard.CacheSemantic, brec.Cache.Kind)
	assert.InDelta(t, 0.97, brec.Cache.Similarity, 1e-3)

	text, rec, _, err = askWith(t.Context(), b, further, nil)
	require.NoError(t, err)
	assert.Equal(t, "Busy, try later.", text, "another template, and at 0.90 below the threshold: the Fallback's answer")
	assert.Zero(t, rec.Cache)

	keys, err := rdb.Keys(t.Context(), t.Name()+":*:vec:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "one scope: the family and config")
	ttl, err := rdb.PTTL(t.Context(), keys[0]).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 59*time.Minute, "the entries expire with the cache's TTL")

	all := everything(t, rdb, t.Name()+":*")
	for _, secret := range []string{"weather", "Paris", "{city}", "(template)", geminitest.Key} {
		assert.NotContains(t, all, secret, "Redis holds no prompt text, template or key")
	}
	assert.Contains(t, all, "Sunny, 24 degrees.", "the answer is there")
}

// semanticReplica returns a replica of flash alone sharing store, with a
// Fallback and a SemanticCache of its own (a template too: its text must
// not reach the store either).
func semanticReplica(t *testing.T, srv *geminitest.Server, store *redisstore.Store) *geminiguard.Client {
	city := strings.NewReplacer("Paris", "{city}")
	return newFleet(t, srv, 1, store, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
		geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later.")),
		geminiguard.WithAnswerCache(geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{
			EmbeddingModel: embedder, TTL: time.Hour,
			Template: func(s string) string { return city.Replace(s) + " (template)" },
		})))[0]
}

// TestRedisSemanticCacheRedisDownFailsNoCall: with Redis gone after A
// answered, no call fails: B gets its Fallback's answer, A its own entry.
func TestRedisSemanticCacheRedisDownFailsNoCall(t *testing.T) {
	redisSrv := redisserver.Start(t)
	store := redisstore.New(redisClient(t, redisSrv), redisstore.WithPrefix(t.Name()))
	srv := geminitest.New(geminitest.Model{Name: flash, Text: "Sunny, 24 degrees."}, geminitest.Model{Name: embedder, Embed: weatherVectors})
	a, b := semanticReplica(t, srv, store), semanticReplica(t, srv, store)
	_, _, _, err := askWith(t.Context(), a, asked, nil)
	require.NoError(t, err)

	redisSrv.Stop()
	srv.SetModel(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
	text, rec, _, err := askWith(t.Context(), b, paraphrase, nil)
	require.NoError(t, err)
	assert.Equal(t, "Busy, try later.", text)
	assert.Zero(t, rec.Cache)
	text, rec, _, err = askWith(t.Context(), a, paraphrase, nil)
	require.NoError(t, err)
	assert.Equal(t, "Sunny, 24 degrees.", text, "A still has its own entry")
	assert.Equal(t, geminiguard.CacheSemantic, rec.Cache.Kind)
}

// everything returns every key matching pattern and its value, whatever
// its type, as text.
func everything(t *testing.T, rdb *redis.Client, pattern string) string {
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, pattern).Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	var b strings.Builder
	for _, k := range keys {
		typ, err := rdb.Type(ctx, k).Result()
		require.NoError(t, err)
		var v any
		switch typ {
		case "string":
			v, err = rdb.Get(ctx, k).Result()
		case "hash":
			v, err = rdb.HGetAll(ctx, k).Result()
		case "zset":
			v, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "set":
			v, err = rdb.SMembers(ctx, k).Result()
		case "list":
			v, err = rdb.LRange(ctx, k, 0, -1).Result()
		case "stream":
			v, err = rdb.XRange(ctx, k, "-", "+").Result()
		default:
			t.Fatalf("key %s of type %s", k, typ)
		}
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s %s %v\n", k, typ, v)
	}
	return b.String()
}
