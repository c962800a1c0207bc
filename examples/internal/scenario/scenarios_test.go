package scenario

import (
	"fmt"
	"math"
	"slices"
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

// knownMisses are the targets of issue 5 that the library misses today,
// keyed by target name, with their cause. geminiguard's figures repeat from
// run to run (its arm's jitter is seeded): a target listed here that a run
// meets fails the test, to be taken off the list.
var knownMisses = map[string]string{
	"fullOutage: success not behind raw":               "the calls started after the outage's end before the next early probe (one per 2s) has answered are refused; raw sends each call and answers from the first",
	"fullOutage: success not behind sdk-retry":         "as fullOutage success vs raw; sdk-retry's 15s of retries also carry calls over the outage's end, where geminiguard's calls fail fast",
	"overhead: the chain allocates ≤ 4 times per call": "all of it comes with what the chain must send on each attempt (TestChainAllocations: a raw SDK call as sent allocates as much): the attempt deadline (its context and timer, the X-Server-Timeout header the SDK derives from it) and the per-call config that turns automatic continuation off",
}

// check reports whether the named target holds, failing the test when a
// target missed is not a known miss or a known miss is met.
func check(t *testing.T, name string, ok bool, format string, args ...any) {
	t.Helper()
	got := fmt.Sprintf(format, args...)
	why, known := knownMisses[name]
	switch {
	case ok && known:
		t.Errorf("%s: met (%s), but listed in knownMisses: take it off", name, got)
	case ok:
		t.Logf("target met: %s (%s)", name, got)
	case known:
		t.Logf("TARGET MISSED, known: %s (%s): %s", name, got, why)
	default:
		t.Errorf("target missed: %s (%s)", name, got)
	}
}

// play runs sc in a bubble, logs its table and returns the result with the
// arms' summaries by name.
func play(t *testing.T, sc *Scenario) (*Result, map[string]Summary) {
	t.Helper()
	var res *Result
	synctest.Test(t, func(t *testing.T) { res = Run(t.Context(), sc) })
	var b strings.Builder
	require.NoError(t, res.WriteTable(&b, false))
	t.Logf("%s: %s\n%s", sc.Name, sc.Summary, b.String())
	sums := make(map[string]Summary)
	for _, s := range res.Summaries() {
		require.NoError(t, s.StartErr, s.Arm)
		require.Equal(t, len(sc.Workload.Arrivals)+sc.Workload.Calls, s.Calls, s.Arm)
		require.Equal(t, s.Answered, s.Primary+s.Fallbacks, "%s: every answer comes from the primary or not", s.Arm)
		sums[s.Arm] = s
	}
	for _, a := range res.Arms {
		assert.Len(t, a.Upstream, a.Total, "%s: the upstream log and the fake's counters agree", a.Arm)
	}
	return res, sums
}

// aheadOfBaselines checks that arm is behind none of raw, sdk-retry and
// failsafe on success rate and p95.
func aheadOfBaselines(t *testing.T, sc *Scenario, sums map[string]Summary, arm string) {
	t.Helper()
	g := sums[arm]
	for _, base := range []string{"raw", "sdk-retry", "failsafe"} {
		b := sums[base]
		check(t, sc.Name+": success not behind "+base, g.Success >= b.Success, "%s %s, %s %s", arm, pct(g.Success), base, pct(b.Success))
		check(t, sc.Name+": p95 not behind "+base, g.P95 <= b.P95, "%s %s, %s %s", arm, secs(g.P95), base, secs(b.P95))
	}
}

func TestBurst429(t *testing.T) {
	t.Parallel()
	sc := Burst429()
	_, sums := play(t, sc)
	g, o := sums["geminiguard"], sums["oracle"]
	check(t, "burst429: success ≥ 99.5%", g.Success >= 0.995, "%s", pct(g.Success))
	check(t, "burst429: mean latency ≤ 1.2× oracle", g.Mean <= o.Mean*12/10, "%s vs oracle %s", secs(g.Mean), secs(o.Mean))
	check(t, "burst429: no 429 with limits configured", g.Got429 == 0, "%d 429s", g.Got429)
	assert.Zero(t, o.Got429, "the oracle never exceeds a quota")
	assert.Equal(t, 1.0, o.Success)
	aheadOfBaselines(t, sc, sums, "geminiguard")
}

func TestDailyExhausted(t *testing.T) {
	t.Parallel()
	sc := DailyExhausted()
	res, sums := play(t, sc)
	g, o := sums["geminiguard"], sums["oracle"]
	after, oracleAfter := g.Measure(sc, "mean after 1st"), o.Measure(sc, "mean after 1st")
	check(t, "dailyExhausted: latency after the first ≤ 1.05× oracle", after <= 1.05*oracleAfter, "%.3fs vs oracle %.3fs", after, oracleAfter)
	primary := requests(res.Arm("geminiguard"), flash, 0, dailyReset)
	check(t, "dailyExhausted: no request to the exhausted model after the first 429", primary == 1, "%d requests before the reset", primary)
	assert.Equal(t, 1.0, o.Success)
	aheadOfBaselines(t, sc, sums, "geminiguard")
}

func TestStorm503(t *testing.T) {
	t.Parallel()
	sc := Storm503()
	res, sums := play(t, sc)
	g, o := sums["geminiguard"], sums["oracle"]
	check(t, "storm503: success ≥ 99.9%", g.Success >= 0.999, "%s", pct(g.Success))
	check(t, "storm503: ≤ 1.5 upstream requests per call", g.PerCall <= 1.5, "%.3f", g.PerCall)
	check(t, "storm503: p95 ≤ 1.5× oracle p95", g.P95 <= o.P95*3/2, "%s vs oracle %s", secs(g.P95), secs(o.P95))
	aheadOfBaselines(t, sc, sums, "geminiguard")

	// The script is what it claims: 37% of the raw arm's requests to the
	// primary (which all go there) fail with 503, give or take the draw.
	raw := res.Arm("raw")
	failed := 0
	for _, u := range raw.Upstream {
		if u.Status == 503 {
			failed++
		}
	}
	assert.InDelta(t, 0.37, float64(failed)/float64(len(raw.Upstream)), 0.03)

	// The oracle answers from the primary every call whose request to the
	// primary, sent at the call's start, succeeds, and from the primary or
	// not the few calls that no model answers then (it waits for one).
	primaryNow, noneNow := 0, 0
	for i, at := range sc.Workload.Arrivals {
		switch {
		case sc.Script(Request{Model: flash, Call: i, At: at}).Fault == geminitest.OK:
			primaryNow++
		case sc.Script(Request{Model: lite, Call: i, At: at}).Fault != geminitest.OK:
			noneNow++
		}
	}
	assert.GreaterOrEqual(t, o.Primary, primaryNow)
	assert.LessOrEqual(t, o.Primary, primaryNow+noneNow)
	assert.InDelta(t, 0.61, o.PrimaryShare, 0.03, "the primary answers about 63%% of requests, fewer in the storms where calls crowd")

	checkIssue10(t, sc, sums)
}

func TestFullOutage(t *testing.T) {
	t.Parallel()
	sc := FullOutage()
	res, sums := play(t, sc)
	g := sums["geminiguard"]
	run := res.Arm("geminiguard")
	load := g.Measure(sc, "outage req/call")
	check(t, "fullOutage: ≤ 1.1 upstream requests per call during the outage", load <= 1.1, "%.3f", load)

	// Once every model was refused (the first outage call that sent no
	// request), every call that sends no request returns within FastFail,
	// and the Client probes at most once per AllOpenProbeEvery, whichever
	// model it probes.
	perCall := make(map[int]int)
	for _, u := range run.Upstream {
		perCall[u.Call]++
	}
	open := time.Duration(-1)
	slowest := time.Duration(0)
	for _, c := range outageCalls(sc, run) {
		if perCall[c.Index] > 0 {
			continue
		}
		if open < 0 {
			open = c.Start
		}
		slowest = max(slowest, c.Latency)
	}
	require.GreaterOrEqual(t, open, time.Duration(0), "the breakers opened during the outage")
	check(t, "fullOutage: calls refused by open breakers return within 1ms", slowest <= FastFail, "slowest %v, breakers open from %v", slowest, open)
	var probes []time.Duration
	for _, u := range run.Upstream {
		if u.At >= open && u.At < sc.Window[1] {
			probes = append(probes, u.At)
		}
	}
	gap := time.Duration(math.MaxInt64)
	for i := 1; i < len(probes); i++ {
		gap = min(gap, probes[i]-probes[i-1])
	}
	check(t, "fullOutage: one probe per AllOpenProbeEvery while every model is open", gap >= 2*time.Second, /* BreakerSettings.AllOpenProbeEvery's default */
		"%d probes, %v apart at least", len(probes), gap)

	rec := g.Measure(sc, "recovery")
	bound := 30*time.Second + 2*proLatency // the issue's bound: open until OpenFor (default 30s) after the last failed probe, then one probe of the primary
	check(t, "fullOutage: recovery within OpenFor plus one probe", rec <= bound.Seconds(), "%.1fs (bound %v)", rec, bound)
	first := g.Measure(sc, "1st s load")
	check(t, "fullOutage: first second after recovery ≤ 1.2× steady traffic", first <= 1.2, "%.2fx", first)
	aheadOfBaselines(t, sc, sums, "geminiguard")
}

func TestRetired404(t *testing.T) {
	t.Parallel()
	sc := Retired404()
	_, sums := play(t, sc)
	g := sums["geminiguard"]
	after := g.Measure(sc, "req to retired")
	check(t, "retired404: at most one request to the retired model", after <= 1, "%.0f requests", after)
	assert.Equal(t, 1.0, g.Success)
	aheadOfBaselines(t, sc, sums, "geminiguard")
}

// A Client started after the retirement never sends the retired model a
// request: its startup check refuses the cascade.
func TestRetired404StartupCheck(t *testing.T) {
	sc := Retired404()
	synctest.Test(t, func(t *testing.T) {
		start, load := time.Now(), new(atomic.Int64)
		srv := geminitest.New(sc.fakeModel(sc.Models[0], start, true, load), sc.fakeModel(sc.Models[1], start, false, load))
		_, err := GeminiguardArm("geminiguard").New(t.Context(), Env{Scenario: sc, HTTPClient: srv.HTTPClient(), BaseURL: geminitest.BaseURL, Start: start})
		require.ErrorIs(t, err, geminiguard.ErrModelNotFound)
		check(t, "retired404: no request to the retired model with the startup check", srv.Total(flash) == 0, "%d requests", srv.Total(flash))
	})
}

func TestStreamCut(t *testing.T) {
	t.Parallel()
	sc := StreamCut()
	_, sums := play(t, sc)
	resumed, plain := sums["geminiguard+resume"], sums["geminiguard"]
	lost, dup := resumed.Measure(sc, "lost chars"), resumed.Measure(sc, "dup chars")
	check(t, "streamCut: with resume, every answer complete and exact", resumed.Success == 1 && lost == 0 && dup == 0,
		"%s complete, %.0f lost, %.0f duplicated", pct(resumed.Success), lost, dup)
	rep := plain.Measure(sc, "reported")
	check(t, "streamCut: without resume, every cut reported", rep == 100, "%.1f%% of %.0f cuts", rep, plain.Measure(sc, "cut"))
	assert.Positive(t, plain.Measure(sc, "cut"), "the script cuts streams")
	assert.Less(t, sums["raw"].Measure(sc, "reported"), 100.0, "the SDK is silent on a clean end without finishReason")
	aheadOfBaselines(t, sc, sums, "geminiguard+resume")
}

func TestSlowBrownout(t *testing.T) {
	t.Parallel()
	sc := SlowBrownout()
	res, sums := play(t, sc)
	o, raw := sums["oracle"], sums["raw"]

	// The script is what it claims: about 15% of the requests to the
	// primary stall 45s, and the raw SDK waits every one out.
	stalls := 0
	for _, u := range res.Arm("raw").Upstream {
		if u.Took >= stallLatency {
			stalls++
		}
	}
	assert.InDelta(t, stallShare, float64(stalls)/float64(raw.Upstream), 0.05)
	assert.GreaterOrEqual(t, raw.P95, stallLatency, "p95 is a stalled request waited out")
	assert.Equal(t, 1.0, raw.Success, "nothing fails: it is slow")

	// The oracle sends each call to the primary unless that request
	// stalls, and then to the secondary: one request per call, every
	// answer within the models' normal spread.
	unstalled := 0
	for i, at := range sc.Workload.Arrivals {
		if !stalled(slowSeed, Request{Model: flash, Call: i, At: at}) {
			unstalled++
		}
	}
	assert.Equal(t, unstalled, o.Primary, "the oracle's primary answers are the calls whose primary request does not stall")
	assert.Equal(t, o.Calls-unstalled, o.Fallbacks)
	assert.Equal(t, 1.0, o.Success)
	assert.Equal(t, o.Calls, o.Upstream, "one request per call")
	assert.Less(t, o.P99, stallFactor*flashLatency)

	checkIssue10(t, sc, sums)
}

func TestLongThinking(t *testing.T) {
	t.Parallel()
	sc := LongThinking()
	_, sums := play(t, sc)
	o := sums["oracle"]
	// Every request takes 40s: the oracle has nothing to avoid.
	assert.Equal(t, 1.0, o.PrimaryShare)
	assert.Equal(t, o.Calls, o.Upstream, "one request per call")
	assert.Equal(t, thinkLatency, o.P50)
	assert.Equal(t, thinkLatency, o.P99)
	// A hedge of a uniformly slow model buys nothing: failsafe-go's fixed
	// delay hedges every call, and each call still takes 40s.
	f := sums["failsafe"]
	assert.Equal(t, 2*f.Calls, f.Upstream, "failsafe hedges every call once")
	assert.Equal(t, thinkLatency, f.P99)

	checkIssue10(t, sc, sums)
}

// issue10Target is a target of issue 10 on one scenario: met reports
// whether it holds for the arms' summaries, by arm name, and the figures.
type issue10Target struct {
	scenario, name string
	met            func(sums map[string]Summary) (bool, string)
}

// issue10Targets are the targets of issue 10 (brownouts: routing by
// success ratio, learned attempt deadlines), with slowBrownout's requests
// per call as issue 19 revised them, for geminiguard at its
// defaults against the oracle and the baselines. The storm503 targets met
// before (success, requests per call, p95) are TestStorm503's. failsafe-go's
// p95 on slowBrownout is not a target: its hedge waits a fixed 1.2s set by
// hand for this scenario's latencies, and pays for it (1.17 requests per
// call there, 2.00 on longThinking, against the ≤ 1.1 and ≤ 1.05 asked).
var issue10Targets = append([]issue10Target{
	{"storm503", "storm503: primary share ≥ 0.9× oracle", func(sums map[string]Summary) (bool, string) {
		g, o := sums["geminiguard"], sums["oracle"]
		return g.PrimaryShare >= 0.9*o.PrimaryShare, fmt.Sprintf("%s vs oracle %s", pct(g.PrimaryShare), pct(o.PrimaryShare))
	}},
	{"slowBrownout", "slowBrownout: p99 ≤ 3× oracle p99", func(sums map[string]Summary) (bool, string) {
		g, o := sums["geminiguard"], sums["oracle"]
		return g.P99 <= 3*o.P99, fmt.Sprintf("%s vs oracle %s", secs(g.P99), secs(o.P99))
	}},
	{"slowBrownout", "slowBrownout: success 100%", func(sums map[string]Summary) (bool, string) {
		g := sums["geminiguard"]
		return g.Answered == g.Calls, pct(g.Success)
	}},
	// Issue 19 asks slowBrownout for the primary's answers as well (0.9×
	// the oracle's share), within 1.3 requests per call. Issue 10's ≤ 1.1
	// capped that share at 0.67× the oracle's: a call sent to the primary
	// stalls with probability 0.15, and a stall is answered by a second
	// request, so a share p of the calls sent to the primary costs
	// 1 + 0.15·p requests per call.
	{"slowBrownout", "slowBrownout: primary share ≥ 0.9× oracle", func(sums map[string]Summary) (bool, string) {
		g, o := sums["geminiguard"], sums["oracle"]
		return g.PrimaryShare >= 0.9*o.PrimaryShare, fmt.Sprintf("%s vs oracle %s", pct(g.PrimaryShare), pct(o.PrimaryShare))
	}},
	{"slowBrownout", "slowBrownout: ≤ 1.3 upstream requests per call", func(sums map[string]Summary) (bool, string) {
		g := sums["geminiguard"]
		return g.PerCall <= 1.3, fmt.Sprintf("%.3f", g.PerCall)
	}},
	{"longThinking", "longThinking: success 100%", func(sums map[string]Summary) (bool, string) {
		g := sums["geminiguard"]
		return g.Answered == g.Calls, pct(g.Success)
	}},
	{"longThinking", "longThinking: ≤ 1.05 upstream requests per call", func(sums map[string]Summary) (bool, string) {
		g := sums["geminiguard"]
		return g.PerCall <= 1.05, fmt.Sprintf("%.3f", g.PerCall)
	}},
}, append(notBehind("slowBrownout", "raw", "sdk-retry"), notBehind("longThinking", "raw", "sdk-retry", "failsafe")...)...)

// notBehind returns the targets that geminiguard is behind none of the
// bases on success and p95 in the named scenario (what aheadOfBaselines
// checks in the others).
func notBehind(scenario string, bases ...string) []issue10Target {
	var out []issue10Target
	for _, base := range bases {
		out = append(out,
			issue10Target{scenario, scenario + ": success not behind " + base, func(sums map[string]Summary) (bool, string) {
				g, b := sums["geminiguard"], sums[base]
				return g.Success >= b.Success, fmt.Sprintf("geminiguard %s, %s %s", pct(g.Success), base, pct(b.Success))
			}},
			issue10Target{scenario, scenario + ": p95 not behind " + base, func(sums map[string]Summary) (bool, string) {
				g, b := sums["geminiguard"], sums[base]
				return g.P95 <= b.P95, fmt.Sprintf("geminiguard %s, %s %s", secs(g.P95), base, secs(b.P95))
			}})
	}
	return out
}

// checkIssue10 checks sc's targets of issue10Targets on sums, in a subtest.
func checkIssue10(t *testing.T, sc *Scenario, sums map[string]Summary) {
	t.Helper()
	t.Run("issue10", func(t *testing.T) {
		n := 0
		for _, tg := range issue10Targets {
			if tg.scenario == sc.Name {
				ok, got := tg.met(sums)
				check(t, tg.name, ok, "%s", got)
				n++
			}
		}
		require.Positive(t, n, "issue10Targets has targets for %s", sc.Name)
	})
}

// The primary share counts the answers of the cascade's first model over
// every call, failed ones included, and both tables show it with the
// fallback rate.
func TestPrimaryShare(t *testing.T) {
	sc := &Scenario{Name: "share", Models: []Model{{Name: flash}, {Name: lite}}}
	run := &ArmRun{Arm: "arm", Total: 5, Calls: []Call{
		{Index: 0, OK: true, Outcome: Outcome{Model: "models/" + flash}},
		{Index: 1, OK: true, Outcome: Outcome{Model: flash}},
		{Index: 2, OK: true, Outcome: Outcome{Model: lite}},
		{Index: 3, Outcome: Outcome{Err: errNoModel}},
	}}
	s := Summarize(sc, run)
	assert.Equal(t, 2, s.Primary)
	assert.Equal(t, 0.5, s.PrimaryShare)
	assert.Equal(t, 0.25, s.FallbackRate)
	res := &Result{Scenario: sc, Arms: []*ArmRun{run}}
	var md, text strings.Builder
	require.NoError(t, res.WriteTable(&md, true))
	require.NoError(t, res.WriteTable(&text, false))
	assert.Contains(t, md.String(), "| 429s | primary | fallback |")
	assert.Contains(t, md.String(), "| 0 | 50.0% | 25.0% |")
	assert.Regexp(t, `primary\s+fallback`, text.String())
}

// The retry storm reproduces the orderings of the AWS study, and full
// jitter keeps to G5's bounds: ≤ 0.35× the calls of no backoff and ≤ 0.1×
// the completion time of un-jittered exponential backoff.
func TestRetryStorm(t *testing.T) {
	results := RetryStorm(100, 30, 2015)
	var b strings.Builder
	require.NoError(t, WriteStormTable(&b, results, false))
	t.Logf("retry storm, 100 clients, 30 trials:\n%s", b.String())
	by := make(map[string]StormResult)
	for _, r := range results {
		by[r.Algorithm] = r
	}
	none, expo, equal, full, decorr := by["none"], by["exponential"], by["equal jitter"], by["full jitter"], by["decorrelated"]
	assert.Less(t, full.Calls, equal.Calls, "full jitter spends less work than equal jitter")
	assert.Less(t, equal.Calls, expo.Calls)
	assert.Less(t, expo.Calls, none.Calls)
	assert.Less(t, decorr.Completion, equal.Completion, "decorrelated finishes before equal jitter")
	assert.Less(t, full.Completion, equal.Completion)
	assert.Less(t, equal.Completion, expo.Completion, "un-jittered exponential is the slowest")
	check(t, "retry storm: full jitter ≤ 0.35× the calls of no backoff", full.Calls <= 0.35*none.Calls, "%.2fx", full.Calls/none.Calls)
	check(t, "retry storm: full jitter ≤ 0.1× the completion of exponential", float64(full.Completion) <= 0.1*float64(expo.Completion), "%.3fx", float64(full.Completion)/float64(expo.Completion))
}

// diff counts what a stream lost and repeated against the answer.
func TestDiff(t *testing.T) {
	want := Answer(7)
	cases := []struct {
		name      string
		shown     string
		lost, dup int
	}{
		{"whole", want, 0, 0},
		{"cut", want[:100], len(want) - 100, 0},
		{"restarted", want[:100] + want, 0, 100},
		{"gap", want[:100] + want[150:], 50, 0},
		{"nothing", "", len(want), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lost, dup := diff(want, tc.shown)
			assert.Equal(t, tc.lost, lost)
			assert.Equal(t, tc.dup, dup)
		})
	}
}

// Percentiles count failed calls as never answered.
func TestPercentile(t *testing.T) {
	answered := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9}
	assert.Equal(t, time.Duration(5), percentile(answered, 10, 0.5))
	assert.Equal(t, time.Duration(9), percentile(answered, 10, 0.9))
	assert.Equal(t, Never, percentile(answered, 10, 0.95))
	assert.Equal(t, "∞", secs(Never))
	assert.Equal(t, "–", value("%.1f", math.NaN()))
}

func TestBatchFlood(t *testing.T) {
	t.Parallel()
	sc := BatchFlood()
	start := time.Now()
	_, sums := play(t, sc)
	t.Logf("batchFlood: %v of wall time", time.Since(start))
	m := func(arm, name string) float64 { return sums[arm].Measure(sc, name) }

	// Without bulkheads the bursts starve the interactive feature: its p95
	// is many times the model's median latency. Slowed, not failed: no
	// learned cut throws away an answer the flood only delayed.
	assert.Greater(t, m("geminiguard", "interactive p95"), 5.0, "without bulkheads the flood slows the interactive feature")
	assert.GreaterOrEqual(t, sums["geminiguard"].Success, 0.99, "without bulkheads the flood slows calls and fails none")

	// With them, the interactive feature keeps its p95 within twice the
	// model's unloaded spread, every call answered, and far ahead of the
	// Client without bulkheads.
	p95 := m("geminiguard+bulkheads", "interactive p95")
	assert.LessOrEqual(t, p95, (2 * stallFactor * flashLatency).Seconds())
	assert.Less(t, 3*p95, m("geminiguard", "interactive p95"), "bulkheads cut the interactive p95 at least threefold")
	assert.Equal(t, 100.0, m("geminiguard+bulkheads", "interactive ok"))

	// The batch still gets all its work done, each burst before the next
	// one, none refused by its bulkhead.
	assert.Equal(t, 100.0, m("geminiguard+bulkheads", "batch ok"))
	assert.Less(t, m("geminiguard+bulkheads", "batch drain"), floodPeriod.Seconds())
	assert.Zero(t, m("geminiguard+bulkheads", "batch refused"))
	adaptiveAgainstFixed(t, sc, sums)
}

// adaptiveAgainstFixed checks the findings of issue 13 on a flood
// scenario: an adaptive batch limit under a ceiling of 64 keeps the
// interactive feature's p95 below a fixed 64 and answers at least as
// many of its calls, but not below the fixed 8 sized for the model: the
// reason LimitFixed stays the default.
func adaptiveAgainstFixed(t *testing.T, sc *Scenario, sums map[string]Summary) {
	t.Helper()
	m := func(arm, name string) float64 { return sums[arm].Measure(sc, name) }
	answered := answeredOverPlays(t, sc, sums, "bulkheads fixed 64", "bulkheads aimd ≤64", "bulkheads gradient ≤64")
	for _, arm := range []string{"bulkheads aimd ≤64", "bulkheads gradient ≤64"} {
		assert.Less(t, m(arm, "interactive p95"), m("bulkheads fixed 64", "interactive p95"), "%s: %s keeps the interactive p95 below a fixed 64", sc.Name, arm)
		// Within one call: the order in which a burst's simultaneous
		// requests reach the fake moves an arm's figures from run to run
		// (in capacityDrop, a fixed 64 answered 94.8% to 98.3% of the
		// calls over 12 runs, AIMD 96.3% to 100%: one run in 12 put AIMD
		// under, by three calls), so the arms are compared over plays.
		oneCall := 1 / float64(sums[arm].Calls)
		assert.GreaterOrEqual(t, answered[arm], answered["bulkheads fixed 64"]-oneCall, "%s: %s answers at least what a fixed 64 does over %d plays, within a call (%v)", sc.Name, arm, floodPlays, answered)
		assert.Less(t, m("geminiguard+bulkheads", "interactive p95"), m(arm, "interactive p95"), "%s: the fixed 8 keeps a lower interactive p95 than %s", sc.Name, arm)
	}
}

// floodPlays is how many times the flood scenarios' bulkhead arms are
// played for adaptiveAgainstFixed's comparison of their answers.
const floodPlays = 3

// answeredOverPlays returns the share of the calls each of arms answered
// over floodPlays plays of sc: sums (a play of every arm) and floodPlays-1
// plays of those arms alone.
func answeredOverPlays(t *testing.T, sc *Scenario, sums map[string]Summary, arms ...string) map[string]float64 {
	t.Helper()
	only := *sc
	only.Arms = nil
	for _, a := range sc.Arms {
		if slices.Contains(arms, a.Name) {
			only.Arms = append(only.Arms, a)
		}
	}
	total := map[string]float64{}
	for _, arm := range arms {
		total[arm] = sums[arm].Success
	}
	for range floodPlays - 1 {
		_, more := play(t, &only)
		for _, arm := range arms {
			total[arm] += more[arm].Success
		}
	}
	for arm := range total {
		total[arm] /= floodPlays
	}
	return total
}

func TestCapacityDrop(t *testing.T) {
	t.Parallel()
	sc := CapacityDrop()
	_, sums := play(t, sc)
	adaptiveAgainstFixed(t, sc, sums)
	// The fixed 8 still drains the second burst within about its queue
	// timeout (58.8s of 60s: a run may lose a call or two of the 400).
	assert.GreaterOrEqual(t, sums["geminiguard+bulkheads"].Measure(sc, "batch ok"), 99.0)
	assert.Equal(t, 100.0, sums["geminiguard+bulkheads"].Measure(sc, "interactive ok"))
}
