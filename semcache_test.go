package geminiguard_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

const embedder = "gemini-embedding-001"

// weatherVectors is the fake embedder's Embed for the weather prompts: the
// paraphrase of the Paris prompt is at cosine similarity 0.97 to it, the
// Rome prompt at 0.90; any other text gets a vector of its own.
func weatherVectors(text string, _ int) []float32 {
	switch {
	case strings.Contains(text, "How is the weather in Paris today?"):
		return []float32{1, 0, 0, 0}
	case strings.Contains(text, "What's the weather like in Paris today?"):
		return []float32{0.97, 0.2431, 0, 0} // |v| = 1, v·paris = 0.97
	case strings.Contains(text, "How is the weather in Rome today?"):
		return []float32{0.9, 0, 0.4359, 0} // v·paris = 0.90
	}
	return []float32{0, 0, 0, 1}
}

// semanticClient returns a fake whose flash answers "Sunny in Paris." and
// whose embedder embeds with weatherVectors, and a Client of flash alone
// with cache as its answer cache and a Fallback.
func semanticClient(t *testing.T, cache *geminiguard.SemanticCache) (*geminitest.Server, *geminiguard.Client) {
	srv := geminitest.New(geminitest.Model{Name: flash, Text: "Sunny in Paris."}, geminitest.Model{Name: embedder, Embed: weatherVectors})
	c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
		geminiguard.WithAnswerCache(cache), geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later.")))
	return srv, c
}

func TestSemanticCacheServesAParaphraseAboveTheThreshold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := semanticClient(t, geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{EmbeddingModel: embedder, TTL: time.Hour}))
		_, rec, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		assert.Zero(t, rec.Cache)
		assert.Equal(t, 1, srv.Hits(embedder, geminitest.VerbEmbed), "the answered request's text is embedded once, through the chain")

		assertParaphraseServed(t, srv, c, "the Paris answer")

		embeds := srv.Hits(embedder, geminitest.VerbEmbed)
		_, rec, err = send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		assert.Equal(t, geminiguard.CacheHit{Kind: geminiguard.CacheExact, Entry: rec.Cache.Entry, Similarity: 1}, rec.Cache, "the same request matches exactly")
		assert.Equal(t, embeds, srv.Hits(embedder, geminitest.VerbEmbed), "an exact match embeds nothing")

		assert.Equal(t, geminiguard.CacheStats{Exact: 1, Semantic: 1, Misses: 1}, c.Stats().Cache)
	})
}

func TestSemanticCacheMatchesWithinTheFamilyAndConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := semanticClient(t, geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{EmbeddingModel: embedder, Threshold: 0.85}))
		_, _, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		down(srv, flash)

		var rec geminiguard.CallRecord
		resp, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("What's the weather like in Paris today?"), &genai.GenerateContentConfig{Temperature: genai.Ptr[float32](0)})
		require.NoError(t, err)
		assert.Equal(t, "Busy, try later.", resp.Text(), "another config: no match")
		assert.Zero(t, rec.Cache)

		_, rec, err = send(t.Context(), c, "How is the weather in Rome today?")
		require.NoError(t, err)
		assert.Equal(t, geminiguard.CacheSemantic, rec.Cache.Kind, "a threshold of 0.85 serves Rome at 0.90")
	})
}

func TestSemanticCacheTemplate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		city := strings.NewReplacer("Paris", "{city}", "Rome", "{city}")
		srv, c := semanticClient(t, geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{Template: city.Replace}))
		_, _, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		assert.Zero(t, srv.Hits(embedder, geminitest.VerbEmbed), "no embedding model: nothing embedded")
		down(srv, flash)

		resp, rec, err := send(t.Context(), c, "How is the weather in Rome today?")
		require.NoError(t, err)
		assert.Equal(t, "Sunny in Paris.", resp.Text())
		assert.Equal(t, geminiguard.CacheTemplate, rec.Cache.Kind)
		assert.Equal(t, geminiguard.CacheStats{Template: 1}, c.Stats().Cache)
	})
}

func TestSemanticCacheAnswersAStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := semanticClient(t, geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{EmbeddingModel: embedder}))
		_, _, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		down(srv, flash)

		var rec geminiguard.CallRecord
		var chunks []string
		for chunk, err := range c.GenerateContentStream(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("What's the weather like in Paris today?"), nil) {
			require.NoError(t, err)
			chunks = append(chunks, chunk.Text())
		}
		assert.Equal(t, []string{"Sunny in Paris."}, chunks)
		assert.True(t, rec.Fallback)
		assert.Equal(t, geminiguard.CacheSemantic, rec.Cache.Kind, "the stream's record names the entry too")
	})
}

// TestSemanticCacheTemplatePanicLeavesTheCacheUsable: a Template that
// panics on a lookup reaches the caller and leaves the cache serving the
// next call (it runs outside the cache's lock).
func TestSemanticCacheTemplatePanicLeavesTheCacheUsable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		city := strings.NewReplacer("Paris", "{city}", "Rome", "{city}")
		template := func(text string) string {
			if strings.Contains(text, "Oslo") {
				panic("the user's template")
			}
			return city.Replace(text)
		}
		srv, c := semanticClient(t, geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{Template: template}))
		_, _, err := send(t.Context(), c, "How is the weather in Paris today?")
		require.NoError(t, err)
		down(srv, flash)

		assert.PanicsWithValue(t, "the user's template", func() { _, _, _ = send(t.Context(), c, "How is the weather in Oslo today?") })
		resp, rec, err := send(t.Context(), c, "How is the weather in Rome today?")
		require.NoError(t, err)
		assert.Equal(t, "Sunny in Paris.", resp.Text())
		assert.Equal(t, geminiguard.CacheTemplate, rec.Cache.Kind)
	})
}

// assertParaphraseServed takes flash down and checks that c serves the
// Paris answer for its paraphrase (at 0.97: a semantic hit, marked as a
// fallback, naming its entry) and the Fallback's answer for Rome (at
// 0.90, below the threshold); whose says whose answer the Paris one is.
func assertParaphraseServed(t *testing.T, srv *geminitest.Server, c *geminiguard.Client, whose string) {
	t.Helper()
	down(srv, flash)
	resp, rec, err := send(t.Context(), c, "What's the weather like in Paris today?")
	require.NoError(t, err)
	assert.Equal(t, "Sunny in Paris.", resp.Text(), "%s for the paraphrase, at 0.97", whose)
	assert.True(t, geminiguard.IsFallback(resp))
	assert.True(t, rec.Fallback)
	assert.Equal(t, geminiguard.CacheSemantic, rec.Cache.Kind)
	assert.InDelta(t, 0.97, rec.Cache.Similarity, 1e-3)
	assert.True(t, strings.HasPrefix(rec.Cache.Entry, flash+":"), "the entry's exact key: %q", rec.Cache.Entry)

	resp, rec, err = send(t.Context(), c, "How is the weather in Rome today?")
	require.NoError(t, err)
	assert.Equal(t, "Busy, try later.", resp.Text(), "Rome, at 0.90, is below the threshold: the Fallback's answer")
	assert.Zero(t, rec.Cache)
}
