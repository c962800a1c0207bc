package geminiguard_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

// semanticReplicas returns a fake as semanticClient's and two replicas of
// one project sharing store, each with a SemanticCache of its own made by
// cfg.
func semanticReplicas(t *testing.T, store fleet.SharedState, cfg geminiguard.SemanticCacheConfig) (*geminitest.Server, *geminiguard.Client, *geminiguard.Client) {
	srv := geminitest.New(geminitest.Model{Name: flash, Text: "Sunny in Paris."}, geminitest.Model{Name: embedder, Embed: weatherVectors})
	replica := func() *geminiguard.Client {
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithStartupCheck(false), geminiguard.WithSharedState(store),
			geminiguard.WithAnswerCache(geminiguard.NewSemanticCache(cfg)), geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later.")))
		t.Cleanup(func() { c.Close() })
		return c
	}
	return srv, replica(), replica()
}

// TestSemanticCacheFleetSharesEntries: replica A answers a prompt; with
// every model down, replica B, whose own cache never saw it, is served A's
// answer for a paraphrase above the threshold, not for a prompt below it,
// and for the same prompt exactly.
func TestSemanticCacheFleetSharesEntries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, a, b := semanticReplicas(t, fleet.NewMemoryState(), geminiguard.SemanticCacheConfig{EmbeddingModel: embedder, TTL: time.Hour})
		_, rec, err := send(t.Context(), a, "How is the weather in Paris today?")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)

		assertParaphraseServed(t, srv, b, "B is served A's answer")

		_, rec, err = send(t.Context(), b, "How is the weather in Paris today?")
		require.NoError(t, err)
		assert.Equal(t, geminiguard.CacheExact, rec.Cache.Kind, "A's prompt itself matches exactly on B")
		assert.Equal(t, geminiguard.CacheStats{Exact: 1, Semantic: 1, Misses: 1}, b.Stats().Cache)
	})
}

// TestSemanticCacheFleetSharesTemplates: a template match is shared too,
// by a digest of the template.
func TestSemanticCacheFleetSharesTemplates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		city := strings.NewReplacer("Paris", "{city}", "Rome", "{city}")
		srv, a, b := semanticReplicas(t, fleet.NewMemoryState(), geminiguard.SemanticCacheConfig{Template: city.Replace})
		_, _, err := send(t.Context(), a, "How is the weather in Paris today?")
		require.NoError(t, err)
		down(srv, flash)

		resp, rec, err := send(t.Context(), b, "How is the weather in Rome today?")
		require.NoError(t, err)
		assert.Equal(t, "Sunny in Paris.", resp.Text())
		assert.Equal(t, geminiguard.CacheTemplate, rec.Cache.Kind)
	})
}

// vectorsDown is a working SharedState whose vectors fail at once or,
// when hang is set, hang until the caller gives up.
type vectorsDown struct {
	fleet.SharedState
	hang bool
}

func (v vectorsDown) fail(ctx context.Context) error {
	if v.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("connection refused")
}

func (v vectorsDown) AddVector(ctx context.Context, _, _ string, _ fleet.VectorEntry, _ time.Duration) error {
	return v.fail(ctx)
}

func (v vectorsDown) Vectors(ctx context.Context, _, _, _ string) ([]fleet.VectorEntry, string, error) {
	return nil, "", v.fail(ctx)
}

// TestSemanticCacheFleetStoreDownFailsNoCall: a store whose vectors fail
// or hang fails no call and holds none beyond the store's bound: A answers
// and caches for itself, B falls back to its Fallback, A to its own entry.
func TestSemanticCacheFleetStoreDownFailsNoCall(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "fails", true: "hangs"}[hang], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv, a, b := semanticReplicas(t, vectorsDown{fleet.NewMemoryState(), hang}, geminiguard.SemanticCacheConfig{EmbeddingModel: embedder, TTL: time.Hour})
				start := time.Now()
				_, rec, err := send(t.Context(), a, "How is the weather in Paris today?")
				require.NoError(t, err)
				assert.Equal(t, flash, rec.Model)

				down(srv, flash)
				resp, rec, err := send(t.Context(), b, "What's the weather like in Paris today?")
				require.NoError(t, err)
				assert.Equal(t, "Busy, try later.", resp.Text(), "nothing shared: B's Fallback")
				assert.Zero(t, rec.Cache)

				resp, rec, err = send(t.Context(), a, "What's the weather like in Paris today?")
				require.NoError(t, err)
				assert.Equal(t, "Sunny in Paris.", resp.Text(), "A still has its own entry")
				assert.Equal(t, geminiguard.CacheSemantic, rec.Cache.Kind)
				assert.Less(t, time.Since(start), time.Second, "each round trip to the store is bounded")
			})
		})
	}
}
