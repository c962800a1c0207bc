package geminiguard_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// answering answers every generateContent request to one model with a fixed
// error body, as the API answered it in a public issue, and passes the rest
// to the fake.
type answering struct {
	base   http.RoundTripper
	model  string
	status int
	body   string
	hits   atomic.Int32
}

func (a *answering) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.Contains(req.URL.Path, "models/"+a.model+":") {
		return a.base.RoundTrip(req)
	}
	a.hits.Add(1)
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
	return &http.Response{
		StatusCode: a.status, Status: http.StatusText(a.status), Request: req,
		Header: http.Header{"Content-Type": {"application/json; charset=UTF-8"}},
		Body:   io.NopCloser(strings.NewReader(a.body)),
	}, nil
}

// TestScopeRulesInTheCascade: what the scope rules of issue 21 change for a
// caller, through the real SDK.
func TestScopeRulesInTheCascade(t *testing.T) {
	t.Run("a feature the primary lacks moves the cascade on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
			// https://github.com/Kilo-Org/kilocode/issues/12063
			tr := &answering{base: srv.Transport(), model: pro, status: 400,
				body: "{\n  \"error\": {\n    \"code\": 400,\n    \"message\": \"Thinking level is not supported for this model.\",\n    \"status\": \"INVALID_ARGUMENT\"\n  }\n}\n"}
			logs := &logBuffer{}
			c := newClient(t, srv, logs, geminiguard.WithCascade(pro, flash), geminiguard.WithHTTPClient(&http.Client{Transport: tr}))

			resp, rec, err := ask(t.Context(), c, "")

			require.NoError(t, err, "the next model serves what the primary does not support")
			assert.Equal(t, flash, rec.Model)
			assert.Equal(t, int32(1), tr.hits.Load(), "the primary is not asked again")
			assert.NotEmpty(t, resp.Text())
			assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State)
			assert.Contains(t, logs.String(), `"rule":"unsupported_feature"`, "the attempt's log line says which rule decided")
		})
	})
	t.Run("a 499 the caller's side caused is retried and not counted", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: flash})
			// https://github.com/NoeFabris/opencode-antigravity-auth/issues/508
			tr := &answering{base: srv.Transport(), model: flash, status: 499,
				body: `{"error":{"code":499,"message":"The operation was cancelled.","status":"CANCELLED"}}`}
			c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithHTTPClient(&http.Client{Transport: tr}),
				geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 1, OpenFor: time.Minute}),
				geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 2}))

			_, _, err := ask(t.Context(), c, "")

			require.Error(t, err)
			v := geminiguard.Classify(err)
			assert.Equal(t, "cancelled", v.Rule)
			assert.Equal(t, int32(2), tr.hits.Load(), "retried")
			assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State, "the model's breaker did not count it")
		})
	})
}
