package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	os.Unsetenv("GEMINI_API_KEY")
	os.Unsetenv("GOOGLE_API_KEY")
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// shortScript is the outage in about 1.5 s of real time.
var shortScript = script{healthy: 300 * time.Millisecond, outage: 800 * time.Millisecond, both: 400 * time.Millisecond,
	recovery: 300 * time.Millisecond, every: 50 * time.Millisecond}

// scrape plays the short outage in fake time (a testing/synctest bubble:
// the demo's pacing and the fake's latencies take no real time) and returns
// /metrics, read in process, and the spans printed.
func scrape(t *testing.T) (metrics, spans string) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		d, err := newDemo(t.Context(), &out, shortScript, false)
		require.NoError(t, err)
		defer d.close()
		require.NoError(t, d.play(t.Context(), &out))
		rec := httptest.NewRecorder()
		d.metrics.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		require.Equal(t, http.StatusOK, rec.Code)
		metrics, spans = rec.Body.String(), out.String()
	})
	return metrics, spans
}

func TestOutageShowsInPrometheusMetrics(t *testing.T) {
	metrics, spans := scrape(t)

	assert.Contains(t, metrics, "# TYPE gen_ai_client_operation_duration_seconds histogram")
	assert.Regexp(t, `gen_ai_client_operation_duration_seconds_bucket\{[^}]*error_type="blocked"`, metrics, "the blocked prompts fail the call")
	assert.Regexp(t, `gen_ai_client_operation_duration_seconds_count\{[^}]*gen_ai_response_model="gemini-2.5-flash-lite"`, metrics, "the secondary answers during the outage")
	assert.Contains(t, metrics, "# TYPE gen_ai_client_token_usage histogram")
	assert.Regexp(t, `gen_ai_client_token_usage_sum\{[^}]*gen_ai_token_type="output"[^}]*\} [1-9]`, metrics)
	assert.Regexp(t, `geminiguard_attempts_total\{geminiguard_class="overloaded",gen_ai_request_model="gemini-2.5-flash"\} [1-9]`, metrics, "the primary's 503s")
	assert.Regexp(t, `geminiguard_attempts_total\{geminiguard_class="none",gen_ai_request_model="gemini-2.5-flash"\} [1-9]`, metrics, "the primary's answers")
	assert.Regexp(t, `geminiguard_breaker_state\{geminiguard_endpoint="generate",gen_ai_request_model="gemini-2.5-flash"\} [012]`, metrics)
	assert.Regexp(t, `geminiguard_cost_total\{[^}]*gen_ai_request_model="gemini-2.5-flash"\} [1-9]`, metrics)

	assert.Regexp(t, `generate_content gemini-2.5-flash  ok    gemini-2.5-flash-lite +attempts: gemini-2.5-flash:overloaded\(\w+\) gemini-2.5-flash-lite:none\(closed\)`, spans,
		"a span line per call, with its attempts")
	assert.Contains(t, spans, "ERROR blocked")
}

// TestDashboardQueriesExistingSeries checks that the dashboard is valid JSON
// and that every metric its queries read is one the exporter serves after
// the outage.
func TestDashboardQueriesExistingSeries(t *testing.T) {
	raw, err := os.ReadFile("grafana-dashboard.json")
	require.NoError(t, err)
	var dash struct {
		SchemaVersion int
		Panels        []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(raw, &dash))
	assert.GreaterOrEqual(t, dash.SchemaVersion, 39)
	require.Len(t, dash.Panels, 9)

	metrics, _ := scrape(t)
	metric := regexp.MustCompile(`\b((?:gen_ai|geminiguard)_[a-z_]+)[{\[]`) // a series selector, not a label
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, p.Title)
		for _, tg := range p.Targets {
			names := metric.FindAllStringSubmatch(tg.Expr, -1)
			require.NotEmpty(t, names, "panel %q: %s", p.Title, tg.Expr)
			for _, m := range names {
				assert.Regexp(t, `(?m)^`+m[1]+`[{ ]`, metrics, "panel %q reads %s", p.Title, m[1])
			}
		}
	}
}

func TestOnlyLoopbackAddresses(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:9464", "[::1]:9464", "localhost:0"} {
		assert.NoError(t, checkLoopback(addr), addr)
	}
	for _, addr := range []string{":9464", "0.0.0.0:9464", "192.168.1.2:9464", "example.com:80", "9464"} {
		assert.Error(t, checkLoopback(addr), addr)
	}
}
