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
)

// TestClientBeatsTheRawSDK runs the same flaky model (30% of answers are
// 503 overloaded, seeded) through the raw SDK and through the Client, and
// prints success rate and upstream requests per call side by side.
func TestClientBeatsTheRawSDK(t *testing.T) {
	const calls = 300
	flaky := geminitest.Model{Name: flash, Latency: 800 * time.Millisecond, Seed: 42,
		Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 0.3}}}

	type result struct {
		ok       int
		requests int
		elapsed  time.Duration
	}
	var raw, guarded result
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(flaky)
		sdk, err := genai.NewClient(t.Context(), srv.ClientConfig())
		require.NoError(t, err)
		start := time.Now()
		for range calls {
			if _, err := sdk.Models.GenerateContent(t.Context(), flash, genai.Text("hi"), nil); err == nil {
				raw.ok++
			}
		}
		raw.requests, raw.elapsed = srv.Total(flash), time.Since(start)
	})
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(flaky)
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		start := time.Now()
		for range calls {
			if _, err := c.GenerateContent(t.Context(), "", genai.Text("hi"), nil); err == nil {
				guarded.ok++
			}
		}
		guarded.requests, guarded.elapsed = srv.Total(flash), time.Since(start)
	})

	t.Logf("%d calls against one model answering 503 to 30%% of requests:", calls)
	t.Logf("  %-12s %8s %18s %16s", "client", "success", "requests per call", "fake time per call")
	for _, r := range []struct {
		name string
		result
	}{{"raw SDK", raw}, {"geminiguard", guarded}} {
		t.Logf("  %-12s %7.1f%% %18.2f %16v", r.name, 100*float64(r.ok)/calls, float64(r.requests)/calls, r.elapsed/calls)
	}
	assert.InDelta(t, 0.7, float64(raw.ok)/calls, 0.07, "the raw SDK fails with the model")
	assert.GreaterOrEqual(t, float64(guarded.ok)/calls, 0.97, "retries within the budget recover nearly every call")
	assert.Less(t, float64(guarded.requests)/calls, 1.5, "at a bounded cost in upstream requests")
}

func TestCheckCascadeReport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: "gemini-2.5-pro", InputTokenLimit: 1048576, OutputTokenLimit: 65536},
			geminitest.Model{Name: "gemini-2.5-flash", InputTokenLimit: 1000000, OutputTokenLimit: 8192},
		)
		soon := time.Now().Add(30 * 24 * time.Hour)
		c := newClient(t, srv, nil, geminiguard.WithCascade("gemini-2.5-pro", "gemini-2.5-flash"),
			geminiguard.WithShutdowns(map[string]geminiguard.Shutdown{"gemini-2.5-pro": {Date: soon, Replacement: "gemini-3.1-pro"}}))

		report, err := c.CheckCascade(t.Context())

		require.NoError(t, err)
		require.Len(t, report.Models, 2)
		pro := report.Models[0]
		assert.True(t, pro.Exists)
		assert.Equal(t, "2.5", pro.Generation)
		assert.Equal(t, int32(1048576), pro.InputTokenLimit)
		assert.Equal(t, 30, pro.DaysLeft)
		assert.Equal(t, "shutdown soon", pro.Verdict)
		assert.Equal(t, int32(8192), report.Models[1].OutputTokenLimit)
		assert.False(t, report.Healthy())
		require.Len(t, report.Warnings, 2)
		assert.Contains(t, report.Warnings[0], "gemini-3.1-pro")
		assert.Contains(t, report.Warnings[1], "every cascade model is generation 2.5")
		assert.Equal(t, 2, srv.Hits("", geminitest.VerbList), "one listing at New, one now")
	})
}
