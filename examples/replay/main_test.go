package main

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"time"

	"github.com/geminiguard/geminiguard/examples/internal/scenario"
)

// outage is a recording of a primary down for its first two minutes (503s
// in 300 ms) and a secondary answering in 600 ms throughout. (Down for 20
// seconds, until the breaker's open period was bounded by a quarter of the
// model's silence: an outage that short is found as soon whatever OpenFor
// is, and the grid's breakers did not differ on it.)
const outage = `{"at_ms":0,"model":"gemini-3.5-flash","endpoint":"generate","status":503,"class":"overloaded","latency_ms":300}
{"at_ms":300,"model":"gemini-2.5-flash-lite","endpoint":"generate","status":200,"class":"none","latency_ms":600}
{"at_ms":120000,"model":"gemini-3.5-flash","endpoint":"generate","status":200,"class":"none","latency_ms":400}
{"at_ms":160000,"model":"gemini-3.5-flash","endpoint":"generate","status":200,"class":"none","latency_ms":400}
`

func TestSweepRanksTheGridOnARecording(t *testing.T) {
	bubble := func(f func(context.Context)) {
		synctest.Test(t, func(t *testing.T) { f(t.Context()) })
	}
	base, err := traceScenario([]byte(outage), time.Second)
	require.NoError(t, err)
	rows, err := sweep(bubble, []byte(outage), base)
	require.NoError(t, err)
	require.Len(t, rows, len(grid()))
	for i, r := range rows {
		assert.Equal(t, 160, r.calls, r.name)
		assert.Equal(t, 160, r.ok, "%s: the secondary answers while the primary is down", r.name)
		if i > 0 {
			assert.LessOrEqual(t, rows[i-1].p99, r.p99, "best first")
		}
	}
	share := map[string]float64{}
	for _, r := range rows {
		share[r.name] = r.primary
		t.Logf("%-55s p99 %v req/call %.2f primary %.3f", r.name, r.p99, r.perCall, r.primary)
	}
	assert.Greater(t, share["breaker 3/10s backoff 500ms-30s attempt 10s"], share["breaker 3/1m0s backoff 500ms-30s attempt 10s"],
		"a breaker open for 10 s gives the primary back sooner once it is up again, at 2 min")
	assert.Less(t, rows[len(rows)-1].perCall, 3.0)
}

func TestSweepOfTheShippedRecordingNamesABetterConfiguration(t *testing.T) {
	bubble := func(f func(context.Context)) {
		synctest.Test(t, func(t *testing.T) { f(t.Context()) })
	}
	rows, err := sweep(bubble, storm503, scenario.Storm503())
	require.NoError(t, err)
	require.Len(t, rows, len(grid()))
	var out bytes.Buffer
	printRows(&out, rows)
	t.Log("\n" + out.String())
	assert.Contains(t, out.String(), "$/1k calls")
	i := slices.IndexFunc(rows, func(r row) bool { return r.name == "default" })
	require.GreaterOrEqual(t, i, 0)
	def := rows[i]
	assert.Positive(t, i, "a configuration of the grid does better than the default on storm503")
	assert.Equal(t, 1000, def.calls)
	assert.Equal(t, 1000, def.ok, "the default answers every call, as in the scenario")
	// 1.35 requests a call and 58.1% from the primary when the recording
	// was made; the default's learned cut and hedging (issue 19) gave
	// 1.356 and 58.1% on it, as on the scenario (57.6% hedging off); the
	// throttle over the requests sent (not those it kept back), on a rate
	// it is sure of, 1.365 and 58.9%; the open period bounded by a quarter
	// of the model's silence, 1.372 and 58.7%.
	assert.InDelta(t, 1.372, def.perCall, 0.005, "as the scenario's run now")
	assert.InDelta(t, 0.587, def.primary, 0.0015)
	for _, r := range rows {
		assert.Positive(t, r.cost, "%s: the cost of its answers", r.name)
	}
	assert.Less(t, rows[0].p99, def.p99)
}
