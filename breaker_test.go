package geminiguard

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var brkT0 = time.Date(2026, time.March, 2, 10, 0, 0, 0, time.UTC)

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{
		StateClosed:   "closed",
		StateOpen:     "open",
		StateHalfOpen: "half-open",
		State(7):      "State(7)",
	} {
		assert.Equal(t, want, s.String())
	}
}

func TestBreakerSettingsWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   BreakerSettings
		want BreakerSettings
	}{
		{"zero", BreakerSettings{}, BreakerSettings{FailureThreshold: 5, DeadAfter: 10 * time.Second, OpenFor: 30 * time.Second, MinOpenFor: 2 * time.Second, HalfOpenProbes: 1, AllOpenProbeEvery: 2 * time.Second}},
		{"set fields kept", BreakerSettings{FailureThreshold: 3, DeadAfter: time.Second, OpenFor: time.Minute, HalfOpenProbes: 2, AllOpenProbeEvery: 5 * time.Second},
			BreakerSettings{FailureThreshold: 3, DeadAfter: time.Second, OpenFor: time.Minute, MinOpenFor: 2 * time.Second, HalfOpenProbes: 2, AllOpenProbeEvery: 5 * time.Second}},
		{"failure rate fills window and min requests", BreakerSettings{FailureRate: 0.5},
			BreakerSettings{FailureThreshold: 5, DeadAfter: 10 * time.Second, OpenFor: 30 * time.Second, MinOpenFor: 2 * time.Second, HalfOpenProbes: 1, FailureRate: 0.5, Window: time.Minute, MinRequests: 10, AllOpenProbeEvery: 2 * time.Second}},
		{"negative kept for validate, or to turn early probes and the silence rule off", BreakerSettings{FailureThreshold: -1, DeadAfter: -1, OpenFor: -time.Second, HalfOpenProbes: -2, AllOpenProbeEvery: -1},
			BreakerSettings{FailureThreshold: -1, DeadAfter: -1, OpenFor: -time.Second, HalfOpenProbes: -2, AllOpenProbeEvery: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.withDefaults()
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, got.withDefaults(), "idempotent")
		})
	}
}

func TestBreakerSettingsValidate(t *testing.T) {
	tests := []struct {
		name string
		in   BreakerSettings
		want []string // one substring per expected error, in order; none: valid
	}{
		{"zero", BreakerSettings{}, nil},
		{"defaults", BreakerSettings{}.withDefaults(), nil},
		{"failure rate defaults", BreakerSettings{FailureRate: 0.5}.withDefaults(), nil},
		{"failure rate 1", BreakerSettings{FailureRate: 1, Window: time.Second, MinRequests: 1}, nil},
		{"negative threshold", BreakerSettings{FailureThreshold: -1}, []string{"BreakerSettings.FailureThreshold is -1: use a positive count, or 0 for the default (5)"}},
		{"negative open for", BreakerSettings{OpenFor: -time.Second}, []string{"BreakerSettings.OpenFor is -1s"}},
		{"negative min open for", BreakerSettings{MinOpenFor: -time.Second}, []string{"BreakerSettings.MinOpenFor is -1s"}},
		{"min open for past open for", BreakerSettings{OpenFor: 5 * time.Second, MinOpenFor: 10 * time.Second}, []string{"BreakerSettings.MinOpenFor is 10s, longer than OpenFor (5s)"}},
		{"min open for past the default open for", BreakerSettings{MinOpenFor: time.Minute}, []string{"BreakerSettings.MinOpenFor is 1m0s, longer than OpenFor (30s)"}},
		{"open for shorter than the default min open for", BreakerSettings{OpenFor: time.Second}, nil},
		{"negative probes", BreakerSettings{HalfOpenProbes: -1}, []string{"BreakerSettings.HalfOpenProbes is -1"}},
		{"early probes off", BreakerSettings{AllOpenProbeEvery: -1}, nil},
		{"early probes too often", BreakerSettings{AllOpenProbeEvery: 10 * time.Millisecond}, []string{"BreakerSettings.AllOpenProbeEvery is 10ms: use at least 1s"}},
		{"rate above 1", BreakerSettings{FailureRate: 50}, []string{"BreakerSettings.FailureRate is 50: use a fraction in (0, 1]"}},
		{"rate negative", BreakerSettings{FailureRate: -0.1}, []string{"BreakerSettings.FailureRate is -0.1"}},
		{"rate NaN", BreakerSettings{FailureRate: math.NaN()}, []string{"BreakerSettings.FailureRate is NaN"}},
		{"window negative", BreakerSettings{FailureRate: 0.5, Window: -time.Second}, []string{"BreakerSettings.Window is -1s"}},
		{"window too short", BreakerSettings{FailureRate: 0.5, Window: time.Millisecond}, []string{"BreakerSettings.Window is 1ms: use a duration of at least 1s"}},
		{"window without rate", BreakerSettings{Window: time.Minute}, []string{"BreakerSettings.Window is 1m0s but FailureRate is 0"}},
		{"min requests negative", BreakerSettings{FailureRate: 0.5, MinRequests: -3}, []string{"BreakerSettings.MinRequests is -3"}},
		{"min requests without rate", BreakerSettings{MinRequests: 3}, []string{"BreakerSettings.MinRequests is 3 but FailureRate is 0"}},
		{"every problem at once", BreakerSettings{FailureThreshold: -1, OpenFor: -1, HalfOpenProbes: -1, FailureRate: 2, Window: -1, MinRequests: -1},
			[]string{"FailureThreshold", "OpenFor", "HalfOpenProbes", "FailureRate", "Window", "MinRequests"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.in.validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), err.Error())
			for i, w := range tt.want {
				assert.True(t, strings.HasPrefix(lines[i], "geminiguard: "), lines[i])
				assert.Contains(t, lines[i], w)
			}
		})
	}
}

func TestOutcomeOf(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		err  error
		v    Verdict
		want outcome
	}{
		{"nil error", nil, Verdict{}, outcomeSuccess},
		{"nil error wins over a counting verdict", nil, Verdict{counts: true}, outcomeSuccess},
		{"counted failure", boom, Verdict{Class: ClassOverloaded, counts: true}, outcomeFailure},
		{"caller cancel", boom, Verdict{Class: ClassCanceled}, outcomeIgnore},
		{"quota answer", boom, Verdict{Class: ClassDailyQuota, cool: coolUntilMidnight}, outcomeIgnore},
		{"request error", boom, Verdict{Class: ClassBadRequest}, outcomeIgnore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, outcomeOf(tt.err, tt.v))
		})
	}
}

// breakerStep is one call on a breaker in a script. do is "allow", "ok",
// "fail" or "ignore" (done with permit p), or "call ok", "call fail", "call
// ignore" (allow, then done with that permit at the same time). want lists
// what the step returned, space-separated: "granted" or "refused" for allow,
// and each transition as "from→to", in the order they were returned.
type breakerStep struct {
	at    time.Duration // since brkT0
	do    string
	p     int // done: the permit, numbered from 0 in the order allow granted them
	want  string
	state State // state(now) after the step
}

// runBreakerScript plays steps on a new breaker and checks every result.
func runBreakerScript(t *testing.T, s BreakerSettings, steps []breakerStep) {
	t.Helper()
	if s.MinOpenFor == 0 {
		s.MinOpenFor = s.withDefaults().OpenFor // the scripts pin a fixed open period; TestBreakerOpenPeriodGrows the growing one
	}
	b := newBreaker(s)
	var permits []permit
	for i, st := range steps {
		now := brkT0.Add(st.at)
		var got []string
		allow := func() (permit, bool) {
			p, tr, err := b.allow(now)
			if tr != nil {
				assert.Equal(t, now, tr.At, "step %d: transition time", i)
				got = append(got, tr.From.String()+"→"+tr.To.String())
			}
			if err != nil {
				assert.ErrorIs(t, err, ErrCircuitOpen, "step %d", i)
				assert.Equal(t, permit{}, p, "step %d: a refusal carries no permit", i)
				got = append(got, "refused")
				return p, false
			}
			got = append(got, "granted")
			permits = append(permits, p)
			return p, true
		}
		done := func(p permit, o string) {
			out := map[string]outcome{"ok": outcomeSuccess, "fail": outcomeFailure, "ignore": outcomeIgnore}[o]
			if tr := b.done(p, now, out); tr != nil {
				assert.Equal(t, now, tr.At, "step %d: transition time", i)
				got = append(got, tr.From.String()+"→"+tr.To.String())
			}
		}
		switch op, o, _ := strings.Cut(st.do, " "); op {
		case "allow":
			allow()
		case "call":
			if p, ok := allow(); ok {
				done(p, o)
			}
		default:
			require.Less(t, st.p, len(permits), "step %d: no permit %d", i, st.p)
			done(permits[st.p], st.do)
		}
		require.Equal(t, st.want, strings.Join(got, " "), "step %d (%s at %v)", i, st.do, st.at)
		require.Equal(t, st.state, b.state(now), "step %d (%s at %v): state", i, st.do, st.at)
	}
}

// failingCalls returns n steps that each call and fail at at, the last one
// with want last and state s (the others must change nothing).
func failingCalls(n int, at time.Duration, last string, s State) []breakerStep {
	steps := make([]breakerStep, n)
	for i := range steps {
		steps[i] = breakerStep{at: at, do: "call fail", want: "granted", state: StateClosed}
	}
	steps[n-1].want, steps[n-1].state = last, s
	return steps
}

// joinSteps concatenates scripts.
func joinSteps(parts ...[]breakerStep) []breakerStep {
	var all []breakerStep
	for _, p := range parts {
		all = append(all, p...)
	}
	return all
}

const (
	wantClosedToOpen   = "granted closed→open"
	wantOpenToHalfOpen = "open→half-open granted"
)

func TestBreakerScript(t *testing.T) {
	s := 1 * time.Second
	rate := BreakerSettings{FailureThreshold: 100, FailureRate: 0.5, MinRequests: 4, Window: 60 * s, DeadAfter: -1}
	tests := []struct {
		name     string
		settings BreakerSettings
		steps    []breakerStep
	}{
		{"threshold opens", BreakerSettings{}, failingCalls(5, 0, wantClosedToOpen, StateOpen)},
		{"a model that answered within DeadAfter is degraded, not dead", BreakerSettings{}, joinSteps(
			[]breakerStep{{at: 0, do: "call ok", want: "granted", state: StateClosed}},
			failingCalls(5, s, "granted", StateClosed),
			failingCalls(3, 9*s, "granted", StateClosed),
			failingCalls(1, 10*s, wantClosedToOpen, StateOpen), // silent for DeadAfter, and failing
		)},
		{"a success within DeadAfter keeps it closed however many fail", BreakerSettings{DeadAfter: 5 * s}, joinSteps(
			failingCalls(4, 0, "granted", StateClosed),
			[]breakerStep{{at: 2 * s, do: "call ok", want: "granted", state: StateClosed}},
			failingCalls(20, 3*s, "granted", StateClosed),
			failingCalls(5, 7*s-1, "granted", StateClosed),
			failingCalls(1, 7*s, wantClosedToOpen, StateOpen),
		)},
		{"custom threshold", BreakerSettings{FailureThreshold: 2}, failingCalls(2, 0, wantClosedToOpen, StateOpen)},
		{"a success resets the consecutive count", BreakerSettings{DeadAfter: -1}, joinSteps(
			failingCalls(4, 0, "granted", StateClosed),
			[]breakerStep{{at: s, do: "call ok", want: "granted", state: StateClosed}},
			failingCalls(4, 2*s, "granted", StateClosed),
			failingCalls(1, 3*s, wantClosedToOpen, StateOpen),
		)},
		{"ignore neither counts nor resets", BreakerSettings{}, joinSteps(
			failingCalls(4, 0, "granted", StateClosed),
			[]breakerStep{{at: s, do: "call ignore", want: "granted", state: StateClosed}},
			failingCalls(1, 2*s, wantClosedToOpen, StateOpen),
		)},
		{"open refuses until OpenFor", BreakerSettings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, StateOpen),
			[]breakerStep{
				{at: s, do: "allow", want: "refused", state: StateOpen},
				{at: 30*s - 1, do: "allow", want: "refused", state: StateOpen},
				{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen},
			},
		)},
		{"half-open admits one probe by default", BreakerSettings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, StateOpen),
			[]breakerStep{
				{at: 31 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen},
				{at: 32 * s, do: "allow", want: "refused", state: StateHalfOpen},
				{at: 40 * s, do: "ok", p: 5, want: "half-open→closed", state: StateClosed},
				{at: 40 * s, do: "allow", want: "granted", state: StateClosed},
			},
		)},
		{"exactly HalfOpenProbes in flight, all must succeed", BreakerSettings{FailureThreshold: 1, HalfOpenProbes: 3, DeadAfter: -1}, []breakerStep{
			{at: 0, do: "call fail", want: wantClosedToOpen, state: StateOpen},
			{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen},
			{at: 30 * s, do: "allow", want: "granted", state: StateHalfOpen},
			{at: 30 * s, do: "allow", want: "granted", state: StateHalfOpen},
			{at: 30 * s, do: "allow", want: "refused", state: StateHalfOpen},
			{at: 31 * s, do: "ok", p: 1, want: "", state: StateHalfOpen},
			{at: 31 * s, do: "allow", want: "granted", state: StateHalfOpen}, // a slot freed
			{at: 31 * s, do: "allow", want: "refused", state: StateHalfOpen},
			{at: 32 * s, do: "ok", p: 2, want: "", state: StateHalfOpen},
			{at: 33 * s, do: "ok", p: 3, want: "half-open→closed", state: StateClosed},
			{at: 34 * s, do: "ok", p: 4, want: "", state: StateClosed}, // stale probe
			{at: 35 * s, do: "call fail", want: wantClosedToOpen, state: StateOpen},
		}},
		{"probe failure reopens with a fresh OpenFor", BreakerSettings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, StateOpen),
			[]breakerStep{
				{at: 45 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen},
				{at: 50 * s, do: "fail", p: 5, want: "half-open→open", state: StateOpen},
				{at: 79 * s, do: "allow", want: "refused", state: StateOpen},
				{at: 80*s - 1, do: "allow", want: "refused", state: StateOpen},
				{at: 80 * s, do: "call ok", want: wantOpenToHalfOpen + " half-open→closed", state: StateClosed},
			},
		)},
		{"one failing probe of several reopens", BreakerSettings{FailureThreshold: 1, HalfOpenProbes: 2}, []breakerStep{
			{at: 0, do: "call fail", want: wantClosedToOpen, state: StateOpen},
			{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen},
			{at: 30 * s, do: "allow", want: "granted", state: StateHalfOpen},
			{at: 31 * s, do: "ok", p: 1, want: "", state: StateHalfOpen},
			{at: 32 * s, do: "fail", p: 2, want: "half-open→open", state: StateOpen},
			{at: 61 * s, do: "allow", want: "refused", state: StateOpen},
		}},
		{"ignore frees a probe slot without closing", BreakerSettings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, StateOpen),
			[]breakerStep{
				{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen},
				{at: 30 * s, do: "allow", want: "refused", state: StateHalfOpen},
				{at: 31 * s, do: "ignore", p: 5, want: "", state: StateHalfOpen},
				{at: 31 * s, do: "allow", want: "granted", state: StateHalfOpen},
				{at: 31 * s, do: "allow", want: "refused", state: StateHalfOpen},
				{at: 32 * s, do: "ok", p: 6, want: "half-open→closed", state: StateClosed},
			},
		)},
		{"stale permits change nothing", BreakerSettings{}, joinSteps(
			[]breakerStep{
				{at: 0, do: "allow", want: "granted", state: StateClosed}, // p0: granted closed, done late
				{at: 0, do: "allow", want: "granted", state: StateClosed}, // p1
			},
			failingCalls(5, 0, wantClosedToOpen, StateOpen),
			[]breakerStep{
				{at: s, do: "fail", p: 0, want: "", state: StateOpen},
				{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: StateHalfOpen}, // p7
				{at: 30 * s, do: "ok", p: 1, want: "", state: StateHalfOpen},              // not a probe: does not close
				{at: 30 * s, do: "allow", want: "refused", state: StateHalfOpen},          // and frees no slot
				{at: 31 * s, do: "ok", p: 7, want: "half-open→closed", state: StateClosed},
				{at: 31 * s, do: "fail", p: 7, want: "", state: StateClosed}, // a probe handed back twice
				{at: 31 * s, do: "fail", p: 0, want: "", state: StateClosed},
			},
		)},
		{"a closed-state permit done after a round trip is stale", BreakerSettings{FailureThreshold: 1}, []breakerStep{
			{at: 0, do: "allow", want: "granted", state: StateClosed}, // p0
			{at: 0, do: "call fail", want: wantClosedToOpen, state: StateOpen},
			{at: 30 * s, do: "call ok", want: wantOpenToHalfOpen + " half-open→closed", state: StateClosed},
			{at: 31 * s, do: "fail", p: 0, want: "", state: StateClosed}, // would open with threshold 1
		}},
		{"failure rate opens at the rate", rate, []breakerStep{
			{at: 0, do: "call ok", want: "granted", state: StateClosed},
			{at: s, do: "call fail", want: "granted", state: StateClosed},
			{at: 2 * s, do: "call ok", want: "granted", state: StateClosed},
			{at: 3 * s, do: "call ignore", want: "granted", state: StateClosed},    // not a call of the rate
			{at: 4 * s, do: "call fail", want: wantClosedToOpen, state: StateOpen}, // 2 of 4
		}},
		{"failure rate waits for MinRequests", rate, []breakerStep{
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: s, do: "call fail", want: "granted", state: StateClosed},
			{at: 2 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 3 * s, do: "call fail", want: wantClosedToOpen, state: StateOpen}, // 4 of 4
		}},
		{"failure rate below the threshold", rate, []breakerStep{
			{at: 0, do: "call ok", want: "granted", state: StateClosed},
			{at: s, do: "call ok", want: "granted", state: StateClosed},
			{at: 2 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 3 * s, do: "call ok", want: "granted", state: StateClosed},
			{at: 4 * s, do: "call ok", want: "granted", state: StateClosed},
			{at: 5 * s, do: "call fail", want: "granted", state: StateClosed}, // 2 of 6
		}},
		{"failure rate forgets calls older than Window", rate, []breakerStep{
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: 61 * s, do: "call fail", want: "granted", state: StateClosed}, // 1 of 1 in the window
			{at: 62 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 63 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 64 * s, do: "call fail", want: wantClosedToOpen, state: StateOpen},
		}},
		{"failure rate counts an out-of-order time in the newest bucket", rate, []breakerStep{
			{at: 0, do: "call ok", want: "granted", state: StateClosed},
			{at: 61 * s, do: "call fail", want: "granted", state: StateClosed}, // the ok at 0 left the window
			{at: s, do: "call fail", want: "granted", state: StateClosed},      // read the clock before the lock
			{at: 62 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 62 * s, do: "call fail", want: wantClosedToOpen, state: StateOpen},
		}},
		{"failure rate counts from zero after closing", rate, []breakerStep{
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: 0, do: "call fail", want: "granted", state: StateClosed},
			{at: 0, do: "call fail", want: wantClosedToOpen, state: StateOpen},
			{at: 30 * s, do: "call ok", want: wantOpenToHalfOpen + " half-open→closed", state: StateClosed},
			{at: 31 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 31 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 31 * s, do: "call fail", want: "granted", state: StateClosed},
			{at: 31 * s, do: "call fail", want: wantClosedToOpen, state: StateOpen},
		}},
		{"consecutive rule still applies with a rate", BreakerSettings{FailureThreshold: 3, FailureRate: 0.9, DeadAfter: -1}, joinSteps(
			[]breakerStep{{at: 0, do: "call ok", want: "granted", state: StateClosed}},
			failingCalls(3, s, wantClosedToOpen, StateOpen),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.settings.validate())
			runBreakerScript(t, tt.settings, tt.steps)
		})
	}
}

func TestBreakerRefusalError(t *testing.T) {
	b := newBreaker(BreakerSettings{FailureThreshold: 1, MinOpenFor: defaultOpenFor})
	p, _, err := b.allow(brkT0)
	require.NoError(t, err)
	require.NotNil(t, b.done(p, brkT0, outcomeFailure))

	_, _, err = b.allow(brkT0.Add(time.Second))
	require.ErrorIs(t, err, ErrCircuitOpen)
	var oe *openError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, brkT0.Add(defaultOpenFor), oe.Until)
	assert.Equal(t, "geminiguard: circuit open until 2026-03-02T10:00:30Z", err.Error())
	_, _, again := b.allow(brkT0.Add(2 * time.Second))
	assert.Same(t, oe, again, "one error value per opening")

	_, tr, err := b.allow(brkT0.Add(defaultOpenFor))
	require.NoError(t, err)
	require.NotNil(t, tr)
	_, _, err = b.allow(brkT0.Add(defaultOpenFor))
	require.ErrorIs(t, err, ErrCircuitOpen)
	require.ErrorAs(t, err, &oe)
	assert.True(t, oe.Until.IsZero(), "half-open: no known end")
	assert.Equal(t, "geminiguard: circuit half-open: probes in flight", err.Error())
}

func TestBreakerStateAndSnapshotDoNotMutate(t *testing.T) {
	b := newBreaker(BreakerSettings{FailureThreshold: 3, FailureRate: 0.9, DeadAfter: -1, MinOpenFor: defaultOpenFor})
	for i := range 2 {
		p, _, err := b.allow(brkT0)
		require.NoError(t, err)
		require.Nil(t, b.done(p, brkT0.Add(time.Duration(i)*time.Second), outcomeFailure))
	}
	p, _, _ := b.allow(brkT0)
	b.done(p, brkT0, outcomeSuccess)
	assert.Equal(t, breakerStats{State: StateClosed, WindowCalls: 3, WindowFailures: 2}, b.snapshot(brkT0.Add(2*time.Second)))
	assert.Equal(t, breakerStats{State: StateClosed}, b.snapshot(brkT0.Add(2*time.Minute)), "window passed")

	p, _, _ = b.allow(brkT0)
	b.done(p, brkT0, outcomeFailure)
	p, _, _ = b.allow(brkT0)
	assert.Equal(t, breakerStats{State: StateClosed, ConsecutiveFailures: 1, WindowCalls: 4, WindowFailures: 3}, b.snapshot(brkT0))
	b.done(p, brkT0, outcomeFailure)
	p, _, _ = b.allow(brkT0)
	require.NotNil(t, b.done(p, brkT0, outcomeFailure))

	openUntil := brkT0.Add(defaultOpenFor)
	assert.Equal(t, breakerStats{State: StateOpen, OpenUntil: openUntil, Trips: 1}, b.snapshot(brkT0))
	later := openUntil.Add(time.Second)
	for range 3 {
		assert.Equal(t, StateHalfOpen, b.state(later), "past OpenFor reads as half-open")
		assert.Equal(t, breakerStats{State: StateHalfOpen, Trips: 1}, b.snapshot(later))
	}
	_, tr, err := b.allow(later)
	require.NoError(t, err)
	assert.Equal(t, &transition{From: StateOpen, To: StateHalfOpen, At: later}, tr, "the reads left the transition to allow")
	assert.Equal(t, breakerStats{State: StateHalfOpen, ProbesInFlight: 1, Trips: 1}, b.snapshot(later))
}

// wallStepped returns tm with its wall clock moved by step and its monotonic
// reading kept: what time.Now returns after the system clock was stepped
// (NTP, a VM resumed, an operator) by step. tm must carry a monotonic reading
// (from time.Now, not Round(0)) and step be whole seconds. It writes the
// wall field of time.Time directly (the layout of Go 1.9+: wall with the
// hasMonotonic bit, seconds since 1885 in bits 30-62, ext the monotonic
// reading) and checks the result, so a change of the layout fails here.
func wallStepped(t *testing.T, tm time.Time, step time.Duration) time.Time {
	t.Helper()
	require.Zero(t, step%time.Second, "whole seconds")
	require.Contains(t, tm.String(), " m=", "tm has a monotonic reading")
	type timeLayout struct {
		wall uint64
		ext  int64
		loc  *time.Location
	}
	out := tm
	(*timeLayout)(unsafe.Pointer(&out)).wall += uint64(int64(step/time.Second) << 30)
	require.Equal(t, step, time.Duration(out.UnixNano()-tm.UnixNano()), "the wall clock moved")
	require.Zero(t, out.Sub(tm), "the monotonic clock did not")
	return out
}

// TestBreakerReadsAgreeAcrossAClockStep: after the system clock steps
// (back or forward) while a breaker is open, the lock-free state read and the
// locked reads (snapshot, allow) use one time base, the monotonic clock, and
// agree: a model whose OpenFor has passed reads half-open, and the call path
// does not skip it for the length of the step.
func TestBreakerReadsAgreeAcrossAClockStep(t *testing.T) {
	const openFor = 30 * time.Second
	tests := []struct {
		name  string
		after time.Duration // monotonic time since the breaker opened
		step  time.Duration // wall-clock step
		want  State
	}{
		{"open, clock stepped back", 10 * time.Second, -time.Hour, StateOpen},
		{"OpenFor passed, clock stepped back", openFor + time.Second, -time.Hour, StateHalfOpen},
		{"open, clock stepped forward", 10 * time.Second, time.Hour, StateOpen},
		{"OpenFor passed, clock stepped forward", openFor + time.Second, time.Hour, StateHalfOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreaker(BreakerSettings{FailureThreshold: 1, OpenFor: openFor, MinOpenFor: openFor})
			opened := time.Now()
			p, _, err := b.allow(opened)
			require.NoError(t, err)
			require.NotNil(t, b.done(p, opened, outcomeFailure))

			now := wallStepped(t, opened.Add(tt.after), tt.step)
			assert.Equal(t, tt.want, b.state(now), "lock-free read")
			assert.Equal(t, tt.want, b.snapshot(now).State, "locked read")
			_, tr, err := b.allow(now)
			if tt.want == StateOpen {
				assert.ErrorIs(t, err, ErrCircuitOpen, "allow refuses")
				return
			}
			require.NoError(t, err, "allow grants the probe")
			require.NotNil(t, tr)
			assert.Equal(t, StateHalfOpen, tr.To)
		})
	}
}

// TestBreakerConcurrent runs allow/done from many goroutines (run it with
// -race): at most HalfOpenProbes probes of one half-open period are ever in
// flight, every state change is returned exactly once, and every probe slot
// is given back.
func TestBreakerConcurrent(t *testing.T) {
	const (
		workers = 16
		calls   = 3000
		probes  = 3
	)
	b := newBreaker(BreakerSettings{FailureThreshold: 3, OpenFor: 20 * time.Millisecond, HalfOpenProbes: probes, DeadAfter: -1})
	var (
		clock       atomic.Int64 // nanoseconds since brkT0
		transitions atomic.Int64
		refused     atomic.Int64
		mu          sync.Mutex         // guards inFlight, maxInFlight, probesSeen
		inFlight    = map[uint64]int{} // probes in flight per generation
		maxInFlight int
		probesSeen  int
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range calls {
				now := brkT0.Add(time.Duration(clock.Add(int64(time.Millisecond / 4))))
				p, tr, err := b.allow(now)
				if tr != nil {
					transitions.Add(1)
				}
				if err != nil {
					if !errors.Is(err, ErrCircuitOpen) {
						t.Errorf("refusal %v does not match ErrCircuitOpen", err)
					}
					refused.Add(1)
					continue
				}
				if p.probe {
					mu.Lock()
					inFlight[p.gen]++
					maxInFlight = max(maxInFlight, inFlight[p.gen])
					probesSeen++
					mu.Unlock()
				}
				runtime.Gosched()         // the request is in flight
				o := outcome(rng.IntN(3)) // ignore, success, failure
				if rng.IntN(2) == 0 {
					o = outcomeFailure
				}
				if p.probe {
					mu.Lock()
					inFlight[p.gen]--
					mu.Unlock()
				}
				if tr := b.done(p, brkT0.Add(time.Duration(clock.Load())), o); tr != nil {
					transitions.Add(1)
				}
			}
		})
	}
	wg.Wait()

	gen, _ := b.load()
	assert.Equal(t, int64(gen-1), transitions.Load(), "each state change returned exactly once")
	assert.LessOrEqual(t, maxInFlight, probes)
	assert.Positive(t, probesSeen, "the run reached half-open")
	assert.Positive(t, refused.Load(), "the run refused requests")
	assert.Zero(t, b.snapshot(brkT0.Add(time.Duration(clock.Load()))).ProbesInFlight, "every probe slot given back")
	t.Logf("transitions %d, probes %d (max %d in flight), refused %d", transitions.Load(), probesSeen, maxInFlight, refused.Load())
}

func TestBreakerAllocs(t *testing.T) {
	for _, s := range []BreakerSettings{{}, {FailureRate: 0.5}} {
		b := newBreaker(s)
		now := brkT0
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			p, _, _ := b.allow(now)
			b.done(p, now, outcomeSuccess)
		})
		assert.Zero(t, allocs, "closed allow+done, FailureRate %v", s.FailureRate)
	}

	b := newBreaker(BreakerSettings{FailureThreshold: 1})
	p, _, _ := b.allow(brkT0)
	require.NotNil(t, b.done(p, brkT0, outcomeFailure))
	allocs := testing.AllocsPerRun(1000, func() {
		if _, _, err := b.allow(brkT0.Add(time.Second)); err == nil {
			t.Fatal("granted while open")
		}
	})
	assert.Zero(t, allocs, "open refusal")

	var c coolDown
	c.set(brkT0.Add(time.Minute), ClassRateLimit)
	allocs = testing.AllocsPerRun(1000, func() { c.until(brkT0) })
	assert.Zero(t, allocs, "cool-down check")
}

func BenchmarkBreakerAllow(b *testing.B) {
	b.Run("closed", func(b *testing.B) {
		br := newBreaker(BreakerSettings{})
		b.ReportAllocs()
		for b.Loop() {
			p, _, _ := br.allow(brkT0)
			br.done(p, brkT0, outcomeSuccess)
		}
	})
	b.Run("closed/parallel", func(b *testing.B) {
		br := newBreaker(BreakerSettings{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, _, _ := br.allow(brkT0)
				br.done(p, brkT0, outcomeSuccess)
			}
		})
	})
	b.Run("closed/rate", func(b *testing.B) {
		br := newBreaker(BreakerSettings{FailureRate: 0.5})
		b.ReportAllocs()
		for b.Loop() {
			p, _, _ := br.allow(brkT0)
			br.done(p, brkT0, outcomeSuccess)
		}
	})
	b.Run("open", func(b *testing.B) {
		br := newBreaker(BreakerSettings{FailureThreshold: 1})
		p, _, _ := br.allow(brkT0)
		br.done(p, brkT0, outcomeFailure)
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := br.allow(brkT0); err == nil {
				b.Fatal("granted while open")
			}
		}
	})
}

// The open period starts at MinOpenFor, doubles with each failed probe up to
// OpenFor, and starts again from MinOpenFor once a probe closes the breaker.
func TestBreakerOpenPeriodGrows(t *testing.T) {
	b := newBreaker(BreakerSettings{FailureThreshold: 1, DeadAfter: -1})
	now := brkT0
	fail := func() {
		t.Helper()
		p, _, err := b.allow(now)
		require.NoError(t, err)
		require.NotNil(t, b.done(p, now, outcomeFailure))
	}
	fail()
	var periods []time.Duration
	for range 7 { // each probe fails
		until := b.snapshot(now).OpenUntil
		periods = append(periods, until.Sub(now))
		_, _, err := b.allow(until.Add(-time.Nanosecond))
		require.ErrorIs(t, err, ErrCircuitOpen, "open until its period ends")
		now = until
		fail()
	}
	s := time.Second
	assert.Equal(t, []time.Duration{2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s}, periods)

	now = b.snapshot(now).OpenUntil
	p, _, err := b.allow(now)
	require.NoError(t, err)
	require.NotNil(t, b.done(p, now, outcomeSuccess), "the probe closes it")
	fail()
	assert.Equal(t, 2*s, b.snapshot(now).OpenUntil.Sub(now), "closed, it starts again from MinOpenFor")

	fixed := newBreaker(BreakerSettings{FailureThreshold: 1, DeadAfter: -1, OpenFor: 10 * s, MinOpenFor: 10 * s})
	p, _, _ = fixed.allow(brkT0)
	fixed.done(p, brkT0, outcomeFailure)
	p, _, _ = fixed.allow(brkT0.Add(10 * s))
	fixed.done(p, brkT0.Add(10*s), outcomeFailure)
	assert.Equal(t, brkT0.Add(20*s), fixed.snapshot(brkT0.Add(10*s)).OpenUntil, "MinOpenFor = OpenFor: a fixed period")
}
