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
		tr := &failingCounts{base: srv.Transport(), fail: 1}
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

// failingCounts answers the first fail countTokens requests with a 503 in
// the API's body, then passes them to base. Not safe for concurrent use.
type failingCounts struct {
	base   http.RoundTripper
	fail   int
	failed int
}

func (f *failingCounts) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, ":countTokens") && f.failed < f.fail {
		f.failed++
		return &http.Response{StatusCode: 503, Status: "503 Service Unavailable", Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`)), Request: req}, nil
	}
	return f.base.RoundTrip(req)
}
