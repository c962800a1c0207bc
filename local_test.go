package geminiguard_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/fakeopenai"
	"github.com/geminiguard/geminiguard/openaicompat"
)

// localEntry is the cascade entry of a local model behind an
// OpenAI-compatible server.
const localEntry = "local/gemma3"

// newLocal starts a fake OpenAI-compatible server and its Backend.
func newLocal(t *testing.T, steps ...fakeopenai.Step) (*fakeopenai.Server, geminiguard.Backend) {
	t.Helper()
	srv := fakeopenai.New(steps...)
	t.Cleanup(srv.Close)
	return srv, openaicompat.New(fakeopenai.URL, openaicompat.WithHTTPClient(srv.HTTPClient()))
}

// TestLocalTierAnswersWhenGeminiIsDown: a cascade Pro → Flash → local model
// → answer cache → default text. With both Gemini models down (503), the
// local model answers in 30s, within its own 60s attempt timeout though the
// Gemini attempt timeout is 10s; the startup check does not look for it in
// Google's list. When the local model fails too, the answer cache answers
// what it holds, and the default text the rest. Without its own timeout,
// the local tier is cut at 10s and the call falls to the default text.
func TestLocalTierAnswersWhenGeminiIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := geminitest.Step{Fault: geminitest.Overloaded}
		gem := geminitest.New(always(pro, down), always(flash, down))
		local, backend := newLocal(t, fakeopenai.Step{Delay: 30 * time.Second, Text: "a local answer"},
			fakeopenai.Step{Status: 503, Body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`})
		opts := []geminiguard.Option{
			geminiguard.WithCascade(pro, flash, localEntry),
			geminiguard.WithBackend(localEntry, "gemma3:4b", backend),
			geminiguard.WithTimeouts(10*time.Second, 2*time.Minute),
			geminiguard.WithLimits(localEntry, geminiguard.Limits{RPM: 30}),
			geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(100, time.Hour)),
			geminiguard.WithFallback(geminiguard.TextFallback("Try again later.")),
		}
		c := newClient(t, gem, nil, append(opts, geminiguard.WithModelTimeout(localEntry, time.Minute))...)
		assert.Equal(t, 1, gem.Hits("", geminitest.VerbList), "New's check listed Google's models once")
		report, err := c.CheckCascade(t.Context())
		require.NoError(t, err, "the local entry is not looked for in Google's list")
		require.Len(t, report.Models, 3)
		assert.Equal(t, geminiguard.ModelReport{Model: localEntry, Exists: true, Verdict: "ok"}, report.Models[2])

		start := time.Now()
		resp, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, "a local answer", resp.Text())
		assert.Equal(t, localEntry, rec.Model)
		assert.False(t, geminiguard.IsFallback(resp))
		assert.Equal(t, 30*time.Second, time.Since(start), "both Gemini models fail at once; the local model takes its 30s")
		assert.Equal(t, 1, local.Hits())
		assert.Positive(t, gem.Total(pro))
		assert.Positive(t, gem.Total(flash))
		assert.Equal(t, int64(7), rec.Tokens.Input, "usage of the local answer")

		resp, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.True(t, geminiguard.IsFallback(resp), "the local model fails (503): the answer cache answers")
		assert.Equal(t, "a local answer", resp.Text())
		assert.Greater(t, local.Hits(), 1)
		assert.Contains(t, attemptModels(rec), localEntry)

		resp, err = c.GenerateContent(t.Context(), "", genai.Text("Something new"), nil)
		require.NoError(t, err)
		assert.True(t, geminiguard.IsFallback(resp))
		assert.Equal(t, "Try again later.", resp.Text(), "nothing cached for it: the default text")

		slow, backend := newLocal(t, fakeopenai.Step{Delay: 30 * time.Second})
		c = newClient(t, gem, nil, append(opts, geminiguard.WithBackend(localEntry, "gemma3:4b", backend))...)
		resp, err = c.GenerateContent(t.Context(), "", genai.Text("Something else"), nil)
		require.NoError(t, err)
		assert.Equal(t, "Try again later.", resp.Text(), "without its own timeout the local tier is cut at the Gemini attempt timeout")
		assert.Positive(t, slow.Hits())
	})
}

// TestBackendEntryServesGenerationOnly: a stream goes to the local tier
// as a unary call does; embeddings on a Backend entry are refused before
// anything is sent, as the caller's error; New rejects a bad
// WithModelTimeout or WithBackend.
func TestBackendEntryServesGenerationOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gem := geminitest.New(always(flash, geminitest.Step{Fault: geminitest.Overloaded}))
		local, backend := newLocal(t, fakeopenai.Step{Text: "streamed locally", Chunks: 3})
		c := newClient(t, gem, nil, geminiguard.WithCascade(flash, localEntry), geminiguard.WithBackend(localEntry, "gemma3:4b", backend))
		var text string
		for r, err := range c.GenerateContentStream(t.Context(), "", genai.Text("Say hi"), nil) {
			require.NoError(t, err)
			text += r.Text()
		}
		assert.Equal(t, "streamed locally", text)
		assert.Equal(t, 1, local.Hits())

		_, err := c.EmbedContent(t.Context(), localEntry, genai.Text("a"), nil)
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, "%v", err)
		assert.Contains(t, err.Error(), `EmbedContent on "local/gemma3" is not served`)
		assert.Equal(t, 1, local.Hits())
	})
	_, err := newOffline(t, geminiguard.WithTimeouts(10*time.Second, time.Minute), geminiguard.WithModelTimeout(localEntry, time.Minute),
		geminiguard.WithBackend(localEntry, "", nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `geminiguard: WithModelTimeout("local/gemma3", 1m0s): the attempt timeout must be positive and shorter than the call timeout (1m0s)`)
	assert.Contains(t, err.Error(), `geminiguard: WithBackend("local/gemma3", ""): give the cascade entry's name and the model it sends`)
}

// attemptModels returns the models of a record's attempts, in order.
func attemptModels(rec geminiguard.CallRecord) []string {
	var out []string
	for _, a := range rec.Attempts {
		out = append(out, a.Model)
	}
	return out
}
