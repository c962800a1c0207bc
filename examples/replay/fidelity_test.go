package main

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/examples/internal/scenario"
)

// withinACall asserts that got, a percentile p of a replay's calls, is
// within a call of want's: between the times to a good answer of want's
// calls one rank below and one above its percentile (a failed call never
// answered).
func withinACall(t *testing.T, want *scenario.ArmRun, p float64, got time.Duration, what string) {
	lat := make([]time.Duration, len(want.Calls))
	for i, c := range want.Calls {
		lat[i] = scenario.Never
		if c.OK {
			lat[i] = c.Latency
		}
	}
	slices.Sort(lat)
	k := int(math.Ceil(p*float64(len(lat)))) - 1
	lo, hi := lat[max(k-1, 0)], lat[min(k+1, len(lat)-1)]
	assert.True(t, lo <= got && got <= hi, "%s: the replay's %v, the scenario's between %v and %v", what, got, lo, hi)
}

func TestReplayOfAScenarioGivesTheScenariosFigures(t *testing.T) {
	for _, name := range []string{"storm503", "streamCut"} {
		t.Run(name, func(t *testing.T) {
			var trace bytes.Buffer
			var recorded *scenario.ArmRun
			var want, got scenario.Summary
			synctest.Test(t, func(t *testing.T) {
				sc := scenario.Lookup(name)
				sc.Arms = []scenario.Arm{scenario.GeminiguardArm("geminiguard", geminiguard.WithRecorder(&trace))}
				res := scenario.Run(t.Context(), sc)
				recorded, want = res.Arms[0], res.Summaries()[0]
			})
			synctest.Test(t, func(t *testing.T) {
				sc, err := replayScenario(scenario.Lookup(name), trace.Bytes())
				require.NoError(t, err)
				sc.Arms = []scenario.Arm{scenario.GeminiguardArm("geminiguard")}
				res := scenario.Run(t.Context(), sc)
				got = res.Summaries()[0]
			})
			t.Logf("scenario: %d/%d answered, %d requests, p50 %v p99 %v, primary %d", want.Answered, want.Calls, want.Upstream, want.P50, want.P99, want.Primary)
			t.Logf("replay:   %d/%d answered, %d requests, p50 %v p99 %v, primary %d", got.Answered, got.Calls, got.Upstream, got.P50, got.P99, got.Primary)
			assert.InDelta(t, want.Answered, got.Answered, 1, "calls answered")
			assert.InDelta(t, want.Upstream, got.Upstream, 1, "upstream requests")
			assert.InDelta(t, want.Primary, got.Primary, 1, "answers from the primary")
			withinACall(t, recorded, 0.50, got.P50, "p50")
			withinACall(t, recorded, 0.99, got.P99, "p99")
		})
	}
}
