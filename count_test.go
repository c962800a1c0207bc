package geminiguard_test

import (
	"io"
	"net/http"
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

func TestCountTokensGoesThroughRetryAndItsOwnBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second})
		tr := &failingCounts{base: srv.Transport(), verb: geminitest.VerbCountTokens, fail: 1}
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithHTTPClient(&http.Client{Transport: tr}),
			geminiguard.WithLimits(flash, geminiguard.Limits{RPM: 1}), geminiguard.WithHeadroom(1))
		_, _, err := ask(t.Context(), c, "") // the one request a minute RPM allows
		require.NoError(t, err)

		start := time.Now()
		resp, err := c.CountTokens(t.Context(), flash, genai.Text("How many tokens is this?"), nil)

		require.NoError(t, err, "a 503, then a retry that answers")
		assert.Positive(t, resp.TotalTokens)
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbCountTokens)+tr.failed, "one failed count, one answered")
		assert.Less(t, time.Since(start), 30*time.Second, "free of quota: the RPM limit, spent, does not hold it back")
		st := c.Stats().Models[0]
		assert.Equal(t, geminiguard.StateClosed, st.State, "the generation breaker saw nothing")

		_, err = c.CountTokens(t.Context(), "", genai.Text("x"), nil)
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, "a count needs its model")
	})
}

// TestComputeTokensOnVertexGoesThroughRetry: on Vertex AI, ComputeTokens
// answers each content's tokens after a 503 retried, on the countTokens
// breaker, as does a WithModelBackend entry on Vertex AI of a Client on the
// Gemini API.
func TestComputeTokensOnVertexGoesThroughRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.NewVertex("my-project", "us-central1", geminitest.Model{Name: flash})
		cfg := srv.ClientConfig()
		tr := &failingCounts{base: cfg.HTTPClient.Transport, verb: geminitest.VerbComputeTokens, fail: 1}
		cfg.HTTPClient.Transport = tr
		sdk, err := genai.NewClient(t.Context(), cfg)
		require.NoError(t, err)
		c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false))
		require.NoError(t, err)
		var rec geminiguard.CallRecord

		resp, err := c.ComputeTokens(geminiguard.RecordCall(t.Context(), &rec), flash, genai.Text("How many tokens?"), nil)

		require.NoError(t, err, "a 503, then a retry that answers")
		require.Len(t, resp.TokensInfo, 1)
		assert.Equal(t, genai.RoleUser, resp.TokensInfo[0].Role)
		assert.Len(t, resp.TokensInfo[0].Tokens, 4, "16 characters, in the fake's 4-character tokens")
		assert.Len(t, resp.TokensInfo[0].TokenIDs, 4)
		assert.Equal(t, 1, tr.failed, "one failed request")
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbComputeTokens), "then one answered")
		assert.Equal(t, flash, rec.Model)
		assert.Len(t, rec.Attempts, 2)
		assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State, "the generation breaker saw nothing")

		gemini := geminitest.New(geminitest.Model{Name: flash})
		mixed := newClient(t, gemini, nil, geminiguard.WithCascade(flash, vertexFlash),
			geminiguard.WithModelBackend(vertexFlash, flash, sdk), geminiguard.WithStartupCheck(false))
		resp, err = mixed.ComputeTokens(t.Context(), vertexFlash, genai.Text("Hi"), nil)
		require.NoError(t, err, "the entry's requests go to Vertex AI")
		assert.Equal(t, [][]byte{[]byte("Hi")}, resp.TokensInfo[0].Tokens)
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbComputeTokens))
	})
}

// TestComputeTokensRefusedOnTheGeminiAPI: the Gemini API has no
// computeTokens; the call is refused before any request, pointing to
// CountTokens.
func TestComputeTokensRefusedOnTheGeminiAPI(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		tr := &failingCounts{base: srv.Transport(), verb: geminitest.VerbComputeTokens}
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithHTTPClient(&http.Client{Transport: tr}),
			geminiguard.WithStartupCheck(false))

		resp, err := c.ComputeTokens(t.Context(), flash, genai.Text("How many tokens?"), nil)

		require.Error(t, err)
		assert.Nil(t, resp)
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
		assert.Contains(t, err.Error(), "Vertex AI only")
		assert.Contains(t, err.Error(), "CountTokens")
		assert.Zero(t, tr.seen, "nothing sent")
		assert.Zero(t, c.Stats().Calls)
	})
}

func TestGenAIIsTheClientCalledThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

		page, err := c.GenAI().Models.List(t.Context(), nil)

		require.NoError(t, err)
		assert.NotEmpty(t, page.Items, "the raw SDK client reaches the same API")
		assert.Zero(t, c.Stats().Calls, "and bypasses the chain")
	})
}

// failingCounts answers the first fail requests of verb with a 503 in the
// API's body, then passes them to base; it counts every request it sees.
// Not safe for concurrent use.
type failingCounts struct {
	base   http.RoundTripper
	verb   geminitest.Verb
	fail   int
	failed int
	seen   int
}

func (f *failingCounts) RoundTrip(req *http.Request) (*http.Response, error) {
	f.seen++
	if strings.HasSuffix(req.URL.Path, ":"+string(f.verb)) && f.failed < f.fail {
		f.failed++
		return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`)), Request: req}, nil
	}
	return f.base.RoundTrip(req)
}
