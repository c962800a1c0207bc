package openaicompat_test

import (
	"errors"
	"io"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/internal/fakeopenai"
	"github.com/geminiguard/geminiguard/openaicompat"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// newFake starts a fake server with steps and an adapter on it.
func newFake(t *testing.T, steps ...fakeopenai.Step) (*fakeopenai.Server, *openaicompat.Client) {
	t.Helper()
	srv := fakeopenai.New(steps...)
	t.Cleanup(srv.Close)
	return srv, openaicompat.New(fakeopenai.URL, openaicompat.WithHTTPClient(srv.HTTPClient()), openaicompat.WithAPIKey("k"))
}

// TestRequestAndAnswerMapping: contents, the system instruction and the
// sampling settings reach the server as chat messages and fields; the
// answer comes back as a candidate with FinishReason and usage.
func TestRequestAndAnswerMapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newFake(t, fakeopenai.Step{Text: "hello there", Finish: "length"})
		contents := []*genai.Content{
			genai.NewContentFromText("Say hi", genai.RoleUser),
			genai.NewContentFromText("Hi!", genai.RoleModel),
			genai.NewContentFromText("Again", genai.RoleUser),
		}
		cfg := &genai.GenerateContentConfig{
			SystemInstruction: genai.NewContentFromText("Be brief.", ""),
			Temperature:       genai.Ptr[float32](0.5), MaxOutputTokens: 64, StopSequences: []string{"END"},
		}
		resp, err := c.GenerateContent(t.Context(), "gemma3:4b", contents, cfg)
		require.NoError(t, err)
		assert.Equal(t, "hello there", resp.Text())
		assert.Equal(t, genai.FinishReasonMaxTokens, resp.Candidates[0].FinishReason)
		assert.Equal(t, &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 7, CandidatesTokenCount: 2, TotalTokenCount: 9}, resp.UsageMetadata)
		assert.Equal(t, "gemma3:4b", resp.ModelVersion)

		req := srv.Requests()[0]
		assert.Equal(t, []any{
			map[string]any{"role": "system", "content": "Be brief."},
			map[string]any{"role": "user", "content": "Say hi"},
			map[string]any{"role": "assistant", "content": "Hi!"},
			map[string]any{"role": "user", "content": "Again"},
		}, req["messages"])
		assert.Equal(t, "gemma3:4b", req["model"])
		assert.Equal(t, 0.5, req["temperature"])
		assert.Equal(t, 64.0, req["max_tokens"])
		assert.Equal(t, []any{"END"}, req["stop"])
		assert.Equal(t, false, req["stream"])
	})
}

// TestStreamMapping: a streamed answer arrives as text chunks, the last
// with its FinishReason and the usage the server sent after it.
func TestStreamMapping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newFake(t, fakeopenai.Step{Text: "one two three", Chunks: 3})
		var text string
		var last *genai.GenerateContentResponse
		n := 0
		for r, err := range c.GenerateContentStream(t.Context(), "gemma3:4b", genai.Text("Say hi"), nil) {
			require.NoError(t, err)
			text += r.Text()
			last = r
			n++
		}
		assert.Equal(t, "one two three", text)
		assert.Equal(t, 4, n, "three text chunks and the finish chunk, no empty role-only chunk")
		assert.Equal(t, genai.FinishReasonStop, last.Candidates[0].FinishReason)
		assert.Equal(t, int32(3), last.UsageMetadata.CandidatesTokenCount)
		assert.Equal(t, true, srv.Requests()[0]["stream"])
		assert.Equal(t, map[string]any{"include_usage": true}, srv.Requests()[0]["stream_options"])
	})
}

// TestErrorsReadAsGeminis: the server's failures read to Classify as
// Gemini's of the same meaning.
func TestErrorsReadAsGeminis(t *testing.T) {
	for _, tc := range []struct {
		name      string
		step      fakeopenai.Step
		class     geminiguard.Class
		scope     geminiguard.Scope
		retryable bool
		after     time.Duration
	}{
		{"429 with Retry-After", fakeopenai.Step{Status: 429, Body: `{"error":{"message":"too many requests","type":"rate_limit_error"}}`, RetryAfter: "3"}, geminiguard.ClassRateLimit, geminiguard.ScopeModel, true, 3 * time.Second},
		{"503 loading (llama.cpp)", fakeopenai.Step{Status: 503, Body: `{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}`}, geminiguard.ClassOverloaded, geminiguard.ScopeModel, true, 0},
		{"500 (Ollama)", fakeopenai.Step{Status: 500, Body: `{"error":"llama runner process has terminated"}`}, geminiguard.ClassServerError, geminiguard.ScopeModel, true, 0},
		{"400 (vLLM)", fakeopenai.Step{Status: 400, Body: `{"object":"error","message":"maximum context length is 8192 tokens","type":"BadRequestError","param":null,"code":400}`}, geminiguard.ClassBadRequest, geminiguard.ScopeRequest, false, 0},
		{"404 model not pulled", fakeopenai.Step{Status: 404, Body: `{"error":{"message":"model \"gemma3:4b\" not found, try pulling it first","type":"api_error"}}`}, geminiguard.ClassNotFound, geminiguard.ScopeModel, false, 0},
		{"cut stream", fakeopenai.Step{Finish: "-"}, geminiguard.ClassStreamCut, geminiguard.ScopeModel, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				_, c := newFake(t, tc.step)
				var err error
				if tc.step.Finish == "-" {
					for _, err = range c.GenerateContentStream(t.Context(), "m", genai.Text("x"), nil) {
					}
					require.ErrorIs(t, err, io.ErrUnexpectedEOF)
				} else {
					_, err = c.GenerateContent(t.Context(), "m", genai.Text("x"), nil)
					require.Error(t, err)
					var ae genai.APIError
					require.True(t, errors.As(err, &ae), "%T", err)
					assert.Equal(t, tc.step.Status, ae.Code)
				}
				v := geminiguard.Classify(err)
				assert.Equal(t, tc.class, v.Class, "%v: %s", err, v.Rule)
				assert.Equal(t, tc.scope, v.Scope)
				assert.Equal(t, tc.retryable, v.Retryable)
				assert.Equal(t, tc.after, v.RetryAfter)
			})
		})
	}
}

// TestConnectionRefusedIsNetwork: a server that is not running is a
// network failure of the model: retryable, not the caller's.
func TestConnectionRefusedIsNetwork(t *testing.T) {
	down := httptest.NewServer(nil)
	url := down.URL
	down.Close()
	_, err := openaicompat.New(url).GenerateContent(t.Context(), "m", genai.Text("x"), nil)
	require.Error(t, err)
	v := geminiguard.Classify(err)
	assert.Equal(t, geminiguard.ClassNetwork, v.Class, "%v", err)
	assert.Equal(t, geminiguard.ScopeModel, v.Scope)
	assert.True(t, v.Retryable)
}

// TestUnsupportedPartsAreModelScoped: an image part fails before sending
// with a 400 that Classify scopes to this model, so the cascade goes on.
func TestUnsupportedPartsAreModelScoped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := newFake(t)
		contents := []*genai.Content{{Role: genai.RoleUser, Parts: []*genai.Part{genai.NewPartFromBytes([]byte{1}, "image/png")}}}
		_, err := c.GenerateContent(t.Context(), "m", contents, nil)
		v := geminiguard.Classify(err)
		assert.Equal(t, geminiguard.ClassBadRequest, v.Class)
		assert.Equal(t, geminiguard.ScopeModel, v.Scope)
		assert.Equal(t, 0, srv.Hits())
	})
}
