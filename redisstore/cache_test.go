package redisstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

const (
	flash = "gemini-2.5-flash"
	pro   = "gemini-2.5-pro"
)

// patientCache lengthens the cache's timeout for the test: under -race on
// two cores a loopback round trip can outlast 30 ms, and the test is of
// sharing, not of a slow Redis.
func patientCache(t *testing.T) {
	old := *redisstore.CacheTimeout
	*redisstore.CacheTimeout = time.Second
	t.Cleanup(func() { *redisstore.CacheTimeout = old })
}

// replica returns a Client of srv (flash, then pro; one attempt each) whose
// answer cache is cache, closed by t's cleanup.
func replica(t *testing.T, srv *geminitest.Server, cache geminiguard.AnswerCache, opts ...geminiguard.Option) *geminiguard.Client {
	c, err := geminiguard.New(t.Context(), append([]geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key),
		geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(srv.HTTPClient()),
		geminiguard.WithStartupCheck(false),
		geminiguard.WithCascade(flash, pro),
		geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
		geminiguard.WithAnswerCache(cache),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// downAll makes every request to flash and pro fail with 503 overloaded.
func downAll(srv *geminitest.Server) {
	for _, m := range []string{flash, pro} {
		srv.SetModel(geminitest.Model{Name: m, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
	}
}

// send sends text and returns the answer, the call record and the error.
func send(c *geminiguard.Client, ctx context.Context, text string) (*genai.GenerateContentResponse, geminiguard.CallRecord, error) {
	var rec geminiguard.CallRecord
	resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(text), nil)
	return resp, rec, err
}

// TestAnswerCacheServesAnotherReplicasAnswer: replica A answers; with every
// model down, replica B (another process: a cache of its own on the same
// Redis) serves A's answer, recognisable as a Fallback's.
func TestAnswerCacheServesAnotherReplicasAnswer(t *testing.T) {
	patientCache(t)
	rdb := client(t, redisserver.Start(t))
	srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here."}, geminitest.Model{Name: pro})
	fallback := geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later."))
	a := replica(t, srv, redisstore.NewAnswerCache(rdb, time.Hour, redisstore.WithPrefix(t.Name())), fallback)
	b := replica(t, srv, redisstore.NewAnswerCache(rdb, time.Hour, redisstore.WithPrefix(t.Name())), fallback)

	resp, rec, err := send(a, t.Context(), "Say hi")
	require.NoError(t, err)
	assert.Equal(t, flash, rec.Model)
	assert.False(t, geminiguard.IsFallback(resp))

	downAll(srv)
	before := srv.Total(flash) + srv.Total(pro)
	resp, rec, err = send(b, t.Context(), "Say hi")
	require.NoError(t, err)
	assert.Equal(t, "Model here.", resp.Text(), "A's answer, from Redis")
	assert.True(t, geminiguard.IsFallback(resp), "a cached answer is recognisable")
	assert.True(t, rec.Fallback)
	assert.Len(t, rec.Attempts, 2)
	assert.Equal(t, 2, srv.Total(flash)+srv.Total(pro)-before, "the failed attempts only: the cache sends nothing")

	resp, _, err = send(b, t.Context(), "Say hello")
	require.NoError(t, err)
	assert.Equal(t, "Busy, try later.", resp.Text(), "a different prompt: no cached answer, the Fallback's")

	keys, err := rdb.Keys(t.Context(), "*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1, "one answer; neither the Fallback's nor a failure is cached")
	assert.Regexp(t, `^`+t.Name()+`:cache:gemini-2\.5-flash:[0-9a-f]{64}$`, keys[0], "a digest: no prompt, no API key")
	assert.False(t, strings.Contains(keys[0], geminitest.Key))
}

// TestAnswerCacheExpires: each answer expires its TTL after it was stored
// (PX: a TTL below a second holds); no TTL means 10 minutes.
func TestAnswerCacheExpires(t *testing.T) {
	patientCache(t)
	rdb := client(t, redisserver.Start(t))
	resp := &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{Content: genai.NewContentFromText("hi", genai.RoleModel)}}}
	for _, tc := range []struct {
		ttl      time.Duration
		min, max time.Duration
	}{
		{ttl: 250 * time.Millisecond, min: time.Millisecond, max: 250 * time.Millisecond},
		{ttl: 0, min: 9 * time.Minute, max: 10 * time.Minute},
	} {
		t.Run(fmt.Sprint(tc.ttl), func(t *testing.T) {
			cache := redisstore.NewAnswerCache(rdb, tc.ttl, redisstore.WithPrefix(t.Name()))
			cache.Put(t.Context(), "k", resp)
			ttl, err := rdb.PTTL(t.Context(), t.Name()+":cache:k").Result()
			require.NoError(t, err)
			assert.GreaterOrEqual(t, ttl, tc.min)
			assert.LessOrEqual(t, ttl, tc.max)
			got, ok := cache.Get(t.Context(), "k")
			require.True(t, ok)
			assert.Equal(t, "hi", got.Text())
		})
	}
	_, ok := redisstore.NewAnswerCache(rdb, time.Minute).Get(t.Context(), "missing")
	assert.False(t, ok)
}

// TestAnswerCacheRedisDown: with Redis killed, or paused so that its round
// trips hang, a call whose every model failed gets the Fallback's answer
// (or the CascadeError without one) as it would without a cache, at once
// (killed) or after one bounded wait (paused), and later calls do not wait
// on Redis at all.
func TestAnswerCacheRedisDown(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprint("ContextTimeoutEnabled=", ctxTimeouts), func(t *testing.T) {
			redisSrv := redisserver.Start(t)
			rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: ctxTimeouts})
			defer rdb.Close()
			srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here."}, geminitest.Model{Name: pro})
			cache := redisstore.NewAnswerCache(rdb, time.Hour, redisstore.WithPrefix(t.Name()))
			withFallback := replica(t, srv, cache, geminiguard.WithFallback(geminiguard.TextFallback("Busy.")))
			bare := replica(t, srv, cache)
			_, _, err := send(withFallback, t.Context(), "Say hi")
			require.NoError(t, err)
			downAll(srv)

			admin := redis.NewClient(&redis.Options{Addr: redisSrv.Addr()})
			defer admin.Close()
			// The pause ends by itself: a paused server refuses new
			// connections' handshakes, an UNPAUSE among them.
			require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", "2000", "ALL").Err())
			start := time.Now()
			resp, rec, err := send(withFallback, t.Context(), "Say hi")
			require.NoError(t, err)
			assert.Equal(t, "Busy.", resp.Text(), "Redis paused: the Fallback's answer")
			assert.True(t, rec.Fallback)
			_, _, err = send(bare, t.Context(), "Say hi")
			var cerr *geminiguard.CascadeError
			require.ErrorAs(t, err, &cerr, "no Fallback: the error, as without a cache")
			assert.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
			t.Logf("two calls with Redis paused took %v", time.Since(start))
			// The calls did not wait for Redis: it is still paused.
			probe := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
			defer probe.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
			defer cancel()
			assert.Error(t, probe.Ping(ctx).Err(), "Redis is still paused: the calls returned without waiting for it")
		})
	}
	t.Run("killed", func(t *testing.T) {
		redisSrv := redisserver.Start(t)
		rdb := client(t, redisSrv)
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here."}, geminitest.Model{Name: pro})
		c := replica(t, srv, redisstore.NewAnswerCache(rdb, time.Hour, redisstore.WithPrefix(t.Name())),
			geminiguard.WithFallback(geminiguard.TextFallback("Busy.")))
		_, _, err := send(c, t.Context(), "Say hi")
		require.NoError(t, err)
		redisSrv.Kill()
		downAll(srv)
		resp, rec, err := send(c, t.Context(), "Say hi")
		require.NoError(t, err)
		assert.Equal(t, "Busy.", resp.Text(), "Redis down: the Fallback's answer")
		assert.True(t, rec.Fallback)
	})
}

// TestAnswerCacheScopedByProject: two Clients naming different projects
// (WithProject) share one Redis and one prefix but no answers, and a
// cached answer's key is not the digest of the request alone: it cannot be
// computed, nor an answer planted under it, without the project's hash.
func TestAnswerCacheScopedByProject(t *testing.T) {
	patientCache(t)
	rdb := client(t, redisserver.Start(t))
	srv := geminitest.New(geminitest.Model{Name: flash, Text: "Project A's answer."}, geminitest.Model{Name: pro})
	fallback := geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later."))
	a := replica(t, srv, redisstore.NewAnswerCache(rdb, time.Hour, redisstore.WithPrefix(t.Name())), fallback, geminiguard.WithProject("project-a"))
	b := replica(t, srv, redisstore.NewAnswerCache(rdb, time.Hour, redisstore.WithPrefix(t.Name())), fallback, geminiguard.WithProject("project-b"))

	_, rec, err := send(a, t.Context(), "Say hi")
	require.NoError(t, err)
	require.Equal(t, flash, rec.Model)

	downAll(srv)
	resp, _, err := send(b, t.Context(), "Say hi")
	require.NoError(t, err)
	assert.Equal(t, "Busy, try later.", resp.Text(), "another project's answer is not served")
	resp, _, err = send(a, t.Context(), "Say hi")
	require.NoError(t, err)
	assert.Equal(t, "Project A's answer.", resp.Text(), "the project's own answer is")

	keys, err := rdb.Keys(t.Context(), t.Name()+":cache:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
	family := "gemini-2.5-flash"
	h := sha256.New()
	enc := json.NewEncoder(h) // the request's digest as the Client computed it before projects scoped it
	for _, v := range []any{family, genai.Text("Say hi"), (*genai.GenerateContentConfig)(nil)} {
		require.NoError(t, enc.Encode(v))
	}
	assert.NotEqual(t, t.Name()+":cache:"+family+":"+hex.EncodeToString(h.Sum(nil)), keys[0], "the key is not computable from the request alone")
}
