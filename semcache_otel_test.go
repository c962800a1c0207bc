package geminiguard_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

func TestOTelCacheLookups(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Sunny in Paris."}, geminitest.Model{Name: embedder, Embed: weatherVectors})
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithAnswerCache(geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{EmbeddingModel: embedder})))...)
		_, _, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		down(srv, flash)
		for _, q := range []string{"How is the weather in Paris today?", "What's the weather like in Paris today?", "How is the weather in Rome today?"} {
			_, _, _ = send(t.Context(), c, q)
		}
		assert.Equal(t, map[string]int64{"exact": 1, "template": 0, "semantic": 1, "miss": 1},
			counts(t, tel.metrics(t), "geminiguard.cache.lookups", "{lookup}", "geminiguard.cache.result"))
	})
}

func TestOTelFallbackAnswersByKind(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Sunny in Paris."}, geminitest.Model{Name: embedder, Embed: weatherVectors})
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithAnswerCache(geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{EmbeddingModel: embedder})),
			geminiguard.WithFallback(geminiguard.TextFallback("Try again later.")))...)
		_, _, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		down(srv, flash)
		for _, q := range []string{"How is the weather in Paris today?", "What's the weather like in Paris today?", "How is the weather in Rome today?", "Is it raining in Oslo?"} {
			_, _, err := send(t.Context(), c, q)
			require.NoError(t, err)
		}
		assert.Equal(t, map[string]int64{"exact": 1, "template": 0, "semantic": 1, "default": 2},
			counts(t, tel.metrics(t), "geminiguard.cache.hits", "{call}", "geminiguard.cache.kind"),
			"the answers given when every model failed, by what gave them: the cache's entries or the Fallback's default")

		tel = newTelemetry()
		c = newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithFallback(geminiguard.TextFallback("Try again later.")))...)
		_, _, err = send(t.Context(), c, "Is it raining in Oslo?")
		require.NoError(t, err)
		assert.Equal(t, map[string]int64{"default": 1}, counts(t, tel.metrics(t), "geminiguard.cache.hits", "{call}", "geminiguard.cache.kind"),
			"without an answer cache, the Fallback's answers alone")
	})
}
