package circuit

import (
	"cmp"
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

// defaultOpenFor is BreakerSettings' default OpenFor, which the tests below
// were written against.
const defaultOpenFor = 30 * time.Second

// withDefaults returns s with its zero fields set to BreakerSettings'
// defaults, as the root's BreakerSettings.withDefaults does before New.
func withDefaults(s Settings) Settings {
	s.FailureThreshold = cmp.Or(s.FailureThreshold, 5)
	s.OpenFor = cmp.Or(s.OpenFor, defaultOpenFor)
	if s.MinOpenFor == 0 {
		s.MinOpenFor = min(2*time.Second, max(s.OpenFor, 0))
	}
	s.HalfOpenProbes = cmp.Or(s.HalfOpenProbes, 1)
	s.DeadAfter = cmp.Or(s.DeadAfter, 10*time.Second)
	if s.FailureRate > 0 {
		s.Window = cmp.Or(s.Window, time.Minute)
		s.MinRequests = cmp.Or(s.MinRequests, 10)
	}
	return s
}

// newBreaker returns a breaker made now for s with the defaults filled in, as
// the root's newBreaker does.
func newBreaker(s Settings) *Breaker { return New(withDefaults(s), time.Now()) }

// A model that never answered, a request of it in flight for good: its
// fast failures open the breaker once DeadAfter has passed since New.
func TestBreakerNeverAnsweredOpensAfterDeadAfter(t *testing.T) {
	b := New(withDefaults(Settings{}), brkT0)
	b.Allow(brkT0) // in flight for good: older than every failure
	fail := func(at time.Duration) *Transition {
		p, _, _ := b.Allow(brkT0.Add(at))
		return b.Done(p, brkT0.Add(at), Failure)
	}
	for range 5 {
		require.Nil(t, fail(0), "an older request in flight: the model may yet answer")
	}
	require.Nil(t, fail(9*time.Second), "9s since New: not yet DeadAfter")
	tr := fail(10 * time.Second)
	require.NotNil(t, tr, "DeadAfter since New without an answer: dead")
	assert.Equal(t, Open, tr.To)
}

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{
		Closed:   "closed",
		Open:     "open",
		HalfOpen: "half-open",
		State(7): "State(7)",
	} {
		assert.Equal(t, want, s.String())
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
func runBreakerScript(t *testing.T, s Settings, steps []breakerStep) {
	t.Helper()
	if s.MinOpenFor == 0 {
		s.MinOpenFor = withDefaults(s).OpenFor // the scripts pin a fixed open period; TestBreakerOpenPeriodGrows the growing one
	}
	b := newBreaker(s)
	var permits []Permit
	for i, st := range steps {
		now := brkT0.Add(st.at)
		var got []string
		allow := func() (Permit, bool) {
			p, tr, r := b.Allow(now)
			if tr != nil {
				assert.Equal(t, now, tr.At, "step %d: transition time", i)
				got = append(got, tr.From.String()+"→"+tr.To.String())
			}
			if r != nil {
				assert.Equal(t, Permit{}, p, "step %d: a refusal carries no permit", i)
				got = append(got, "refused")
				return p, false
			}
			got = append(got, "granted")
			permits = append(permits, p)
			return p, true
		}
		done := func(p Permit, o string) {
			out := map[string]Outcome{"ok": Success, "fail": Failure, "ignore": Ignore}[o]
			if tr := b.Done(p, now, out); tr != nil {
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
		require.Equal(t, st.state, b.State(now), "step %d (%s at %v): state", i, st.do, st.at)
	}
}

// failingCalls returns n steps that each call and fail at at, the last one
// with want last and state s (the others must change nothing).
func failingCalls(n int, at time.Duration, last string, s State) []breakerStep {
	steps := make([]breakerStep, n)
	for i := range steps {
		steps[i] = breakerStep{at: at, do: "call fail", want: "granted", state: Closed}
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
	rate := Settings{FailureThreshold: 100, FailureRate: 0.5, MinRequests: 4, Window: 60 * s, DeadAfter: -1}
	tests := []struct {
		name     string
		settings Settings
		steps    []breakerStep
	}{
		{"threshold opens", Settings{}, failingCalls(5, 0, wantClosedToOpen, Open)},
		{"a model that answered within DeadAfter is degraded, not dead", Settings{}, joinSteps(
			[]breakerStep{{at: 0, do: "call ok", want: "granted", state: Closed}},
			failingCalls(5, s, "granted", Closed),
			failingCalls(3, 9*s, "granted", Closed),
			failingCalls(1, 10*s, wantClosedToOpen, Open), // silent for DeadAfter, and failing
		)},
		{"failures after a quiet spell make it dead once they have lasted half of DeadAfter", Settings{}, joinSteps(
			[]breakerStep{{at: 0, do: "call ok", want: "granted", state: Closed}},
			failingCalls(20, 30*s, "granted", Closed), // silent for 30s: a quiet spell, then a burst's fast failures
			failingCalls(1, 35*s-1, "granted", Closed),
			failingCalls(1, 35*s, wantClosedToOpen, Open),
		)},
		{"a success within DeadAfter keeps it closed however many fail", Settings{DeadAfter: 5 * s}, joinSteps(
			failingCalls(4, 0, "granted", Closed),
			[]breakerStep{{at: 2 * s, do: "call ok", want: "granted", state: Closed}},
			failingCalls(20, 3*s, "granted", Closed),
			failingCalls(5, 7*s-1, "granted", Closed),
			failingCalls(1, 7*s, wantClosedToOpen, Open),
		)},
		{"custom threshold", Settings{FailureThreshold: 2}, failingCalls(2, 0, wantClosedToOpen, Open)},
		{"a success resets the consecutive count", Settings{DeadAfter: -1}, joinSteps(
			failingCalls(4, 0, "granted", Closed),
			[]breakerStep{{at: s, do: "call ok", want: "granted", state: Closed}},
			failingCalls(4, 2*s, "granted", Closed),
			failingCalls(1, 3*s, wantClosedToOpen, Open),
		)},
		{"ignore neither counts nor resets", Settings{}, joinSteps(
			failingCalls(4, 0, "granted", Closed),
			[]breakerStep{{at: s, do: "call ignore", want: "granted", state: Closed}},
			failingCalls(1, 2*s, wantClosedToOpen, Open),
		)},
		{"open refuses until OpenFor", Settings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, Open),
			[]breakerStep{
				{at: s, do: "allow", want: "refused", state: Open},
				{at: 30*s - 1, do: "allow", want: "refused", state: Open},
				{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen},
			},
		)},
		{"half-open admits one probe by default", Settings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, Open),
			[]breakerStep{
				{at: 31 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen},
				{at: 32 * s, do: "allow", want: "refused", state: HalfOpen},
				{at: 40 * s, do: "ok", p: 5, want: "half-open→closed", state: Closed},
				{at: 40 * s, do: "allow", want: "granted", state: Closed},
			},
		)},
		{"exactly HalfOpenProbes in flight, all must succeed", Settings{FailureThreshold: 1, HalfOpenProbes: 3, DeadAfter: -1}, []breakerStep{
			{at: 0, do: "call fail", want: wantClosedToOpen, state: Open},
			{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen},
			{at: 30 * s, do: "allow", want: "granted", state: HalfOpen},
			{at: 30 * s, do: "allow", want: "granted", state: HalfOpen},
			{at: 30 * s, do: "allow", want: "refused", state: HalfOpen},
			{at: 31 * s, do: "ok", p: 1, want: "", state: HalfOpen},
			{at: 31 * s, do: "allow", want: "granted", state: HalfOpen}, // a slot freed
			{at: 31 * s, do: "allow", want: "refused", state: HalfOpen},
			{at: 32 * s, do: "ok", p: 2, want: "", state: HalfOpen},
			{at: 33 * s, do: "ok", p: 3, want: "half-open→closed", state: Closed},
			{at: 34 * s, do: "ok", p: 4, want: "", state: Closed}, // stale probe
			{at: 35 * s, do: "call fail", want: wantClosedToOpen, state: Open},
		}},
		{"probe failure reopens with a fresh OpenFor", Settings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, Open),
			[]breakerStep{
				{at: 45 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen},
				{at: 50 * s, do: "fail", p: 5, want: "half-open→open", state: Open},
				{at: 79 * s, do: "allow", want: "refused", state: Open},
				{at: 80*s - 1, do: "allow", want: "refused", state: Open},
				{at: 80 * s, do: "call ok", want: wantOpenToHalfOpen + " half-open→closed", state: Closed},
			},
		)},
		{"one failing probe of several reopens", Settings{FailureThreshold: 1, HalfOpenProbes: 2}, []breakerStep{
			{at: 0, do: "call fail", want: wantClosedToOpen, state: Open},
			{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen},
			{at: 30 * s, do: "allow", want: "granted", state: HalfOpen},
			{at: 31 * s, do: "ok", p: 1, want: "", state: HalfOpen},
			{at: 32 * s, do: "fail", p: 2, want: "half-open→open", state: Open},
			{at: 61 * s, do: "allow", want: "refused", state: Open},
		}},
		{"ignore frees a probe slot without closing", Settings{}, joinSteps(
			failingCalls(5, 0, wantClosedToOpen, Open),
			[]breakerStep{
				{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen},
				{at: 30 * s, do: "allow", want: "refused", state: HalfOpen},
				{at: 31 * s, do: "ignore", p: 5, want: "", state: HalfOpen},
				{at: 31 * s, do: "allow", want: "granted", state: HalfOpen},
				{at: 31 * s, do: "allow", want: "refused", state: HalfOpen},
				{at: 32 * s, do: "ok", p: 6, want: "half-open→closed", state: Closed},
			},
		)},
		{"stale permits change nothing", Settings{DeadAfter: -1}, joinSteps( // -1: p0 and p1 in flight do not hold the opening back
			[]breakerStep{
				{at: 0, do: "allow", want: "granted", state: Closed}, // p0: granted closed, done late
				{at: 0, do: "allow", want: "granted", state: Closed}, // p1
			},
			failingCalls(5, 0, wantClosedToOpen, Open),
			[]breakerStep{
				{at: s, do: "fail", p: 0, want: "", state: Open},
				{at: 30 * s, do: "allow", want: wantOpenToHalfOpen, state: HalfOpen}, // p7
				{at: 30 * s, do: "ok", p: 1, want: "", state: HalfOpen},              // not a probe: does not close
				{at: 30 * s, do: "allow", want: "refused", state: HalfOpen},          // and frees no slot
				{at: 31 * s, do: "ok", p: 7, want: "half-open→closed", state: Closed},
				{at: 31 * s, do: "fail", p: 7, want: "", state: Closed}, // a probe handed back twice
				{at: 31 * s, do: "fail", p: 0, want: "", state: Closed},
			},
		)},
		{"a closed-state permit done after a round trip is stale", Settings{FailureThreshold: 1, DeadAfter: -1}, []breakerStep{
			{at: 0, do: "allow", want: "granted", state: Closed}, // p0
			{at: 0, do: "call fail", want: wantClosedToOpen, state: Open},
			{at: 30 * s, do: "call ok", want: wantOpenToHalfOpen + " half-open→closed", state: Closed},
			{at: 31 * s, do: "fail", p: 0, want: "", state: Closed}, // would open with threshold 1
		}},
		{"a model that never answered: fast failures wait for an older request", Settings{}, joinSteps(
			[]breakerStep{{at: 0, do: "allow", want: "granted", state: Closed}}, // p0: slower than the failures
			failingCalls(5, 0, "granted", Closed),
			[]breakerStep{
				{at: s, do: "ok", p: 0, want: "", state: Closed}, // it answers: the model is not dead
				{at: s, do: "call fail", want: "granted", state: Closed},
			},
		)},
		{"a model that never answered: the older request fails too", Settings{}, joinSteps(
			[]breakerStep{{at: 0, do: "allow", want: "granted", state: Closed}}, // p0
			failingCalls(5, 0, "granted", Closed),
			[]breakerStep{{at: s, do: "fail", p: 0, want: "closed→open", state: Open}}, // six in a row, none older in flight
		)},
		{"a model that never answered: a newer request in flight holds nothing back", Settings{}, joinSteps(
			[]breakerStep{{at: 0, do: "allow", want: "granted", state: Closed}}, // p0
			failingCalls(4, 0, "granted", Closed),
			[]breakerStep{
				{at: 0, do: "allow", want: "granted", state: Closed},        // p5: sent after p0
				{at: s, do: "fail", p: 0, want: "closed→open", state: Open}, // five in a row, p0 the oldest in flight
			},
		)},
		{"a model that never answered: a request sent before its first failure came back is waited for", Settings{}, []breakerStep{
			{at: 0, do: "allow", want: "granted", state: Closed}, // p0 to p4 fail fast
			{at: 0, do: "allow", want: "granted", state: Closed},
			{at: 0, do: "allow", want: "granted", state: Closed},
			{at: 0, do: "allow", want: "granted", state: Closed},
			{at: 0, do: "allow", want: "granted", state: Closed},
			{at: 0, do: "allow", want: "granted", state: Closed}, // p5, sent the same instant, answers later
			{at: s / 4, do: "fail", p: 0, want: "", state: Closed},
			{at: s / 4, do: "fail", p: 1, want: "", state: Closed},
			{at: s / 4, do: "fail", p: 2, want: "", state: Closed},
			{at: s / 4, do: "fail", p: 3, want: "", state: Closed},
			{at: s / 4, do: "fail", p: 4, want: "", state: Closed}, // none sent before p4 out, but p5 was sent before any came back
			{at: s, do: "ok", p: 5, want: "", state: Closed},
		}},
		{"failure rate opens at the rate", rate, []breakerStep{
			{at: 0, do: "call ok", want: "granted", state: Closed},
			{at: s, do: "call fail", want: "granted", state: Closed},
			{at: 2 * s, do: "call ok", want: "granted", state: Closed},
			{at: 3 * s, do: "call ignore", want: "granted", state: Closed},    // not a call of the rate
			{at: 4 * s, do: "call fail", want: wantClosedToOpen, state: Open}, // 2 of 4
		}},
		{"failure rate waits for MinRequests", rate, []breakerStep{
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: s, do: "call fail", want: "granted", state: Closed},
			{at: 2 * s, do: "call fail", want: "granted", state: Closed},
			{at: 3 * s, do: "call fail", want: wantClosedToOpen, state: Open}, // 4 of 4
		}},
		{"failure rate below the threshold", rate, []breakerStep{
			{at: 0, do: "call ok", want: "granted", state: Closed},
			{at: s, do: "call ok", want: "granted", state: Closed},
			{at: 2 * s, do: "call fail", want: "granted", state: Closed},
			{at: 3 * s, do: "call ok", want: "granted", state: Closed},
			{at: 4 * s, do: "call ok", want: "granted", state: Closed},
			{at: 5 * s, do: "call fail", want: "granted", state: Closed}, // 2 of 6
		}},
		{"failure rate forgets calls older than Window", rate, []breakerStep{
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: 61 * s, do: "call fail", want: "granted", state: Closed}, // 1 of 1 in the window
			{at: 62 * s, do: "call fail", want: "granted", state: Closed},
			{at: 63 * s, do: "call fail", want: "granted", state: Closed},
			{at: 64 * s, do: "call fail", want: wantClosedToOpen, state: Open},
		}},
		{"failure rate counts an out-of-order time in the newest bucket", rate, []breakerStep{
			{at: 0, do: "call ok", want: "granted", state: Closed},
			{at: 61 * s, do: "call fail", want: "granted", state: Closed}, // the ok at 0 left the window
			{at: s, do: "call fail", want: "granted", state: Closed},      // read the clock before the lock
			{at: 62 * s, do: "call fail", want: "granted", state: Closed},
			{at: 62 * s, do: "call fail", want: wantClosedToOpen, state: Open},
		}},
		{"failure rate counts from zero after closing", rate, []breakerStep{
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: 0, do: "call fail", want: "granted", state: Closed},
			{at: 0, do: "call fail", want: wantClosedToOpen, state: Open},
			{at: 30 * s, do: "call ok", want: wantOpenToHalfOpen + " half-open→closed", state: Closed},
			{at: 31 * s, do: "call fail", want: "granted", state: Closed},
			{at: 31 * s, do: "call fail", want: "granted", state: Closed},
			{at: 31 * s, do: "call fail", want: "granted", state: Closed},
			{at: 31 * s, do: "call fail", want: wantClosedToOpen, state: Open},
		}},
		{"consecutive rule still applies with a rate", Settings{FailureThreshold: 3, FailureRate: 0.9, DeadAfter: -1}, joinSteps(
			[]breakerStep{{at: 0, do: "call ok", want: "granted", state: Closed}},
			failingCalls(3, s, wantClosedToOpen, Open),
		)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runBreakerScript(t, tt.settings, tt.steps)
		})
	}
}

// A refusal says until when the breaker is open and since when, is one
// value per opening, and has no known end while the breaker is half-open with
// every probe slot taken.
func TestBreakerRefusal(t *testing.T) {
	b := newBreaker(Settings{FailureThreshold: 1, MinOpenFor: defaultOpenFor})
	p, _, r := b.Allow(brkT0)
	require.Nil(t, r)
	require.NotNil(t, b.Done(p, brkT0, Failure))

	_, _, r = b.Allow(brkT0.Add(time.Second))
	require.NotNil(t, r)
	assert.Equal(t, brkT0.Add(defaultOpenFor), r.Until)
	assert.Equal(t, r.Until, b.OpenUntil())
	assert.Equal(t, brkT0, b.OpenSince())
	_, _, again := b.Allow(brkT0.Add(2 * time.Second))
	assert.Same(t, r, again, "one refusal per opening")

	_, tr, r := b.Allow(brkT0.Add(defaultOpenFor))
	require.Nil(t, r)
	require.NotNil(t, tr)
	assert.Zero(t, b.OpenUntil(), "not open")
	assert.Zero(t, b.OpenSince(), "not open")
	_, _, r = b.Allow(brkT0.Add(defaultOpenFor))
	require.NotNil(t, r)
	assert.True(t, r.Until.IsZero(), "half-open: no known end")
}

func TestBreakerStateAndSnapshotDoNotMutate(t *testing.T) {
	b := newBreaker(Settings{FailureThreshold: 3, FailureRate: 0.9, DeadAfter: -1, MinOpenFor: defaultOpenFor})
	for i := range 2 {
		p, _, r := b.Allow(brkT0)
		require.Nil(t, r)
		require.Nil(t, b.Done(p, brkT0.Add(time.Duration(i)*time.Second), Failure))
	}
	p, _, _ := b.Allow(brkT0)
	b.Done(p, brkT0, Success)
	assert.Equal(t, Stats{State: Closed, WindowCalls: 3, WindowFailures: 2}, b.Snapshot(brkT0.Add(2*time.Second)))
	assert.Equal(t, Stats{State: Closed}, b.Snapshot(brkT0.Add(2*time.Minute)), "window passed")

	p, _, _ = b.Allow(brkT0)
	b.Done(p, brkT0, Failure)
	p, _, _ = b.Allow(brkT0)
	assert.Equal(t, Stats{State: Closed, ConsecutiveFailures: 1, WindowCalls: 4, WindowFailures: 3}, b.Snapshot(brkT0))
	b.Done(p, brkT0, Failure)
	p, _, _ = b.Allow(brkT0)
	require.NotNil(t, b.Done(p, brkT0, Failure))

	openUntil := brkT0.Add(defaultOpenFor)
	assert.Equal(t, Stats{State: Open, OpenUntil: openUntil, Trips: 1}, b.Snapshot(brkT0))
	later := openUntil.Add(time.Second)
	for range 3 {
		assert.Equal(t, HalfOpen, b.State(later), "past OpenFor reads as half-open")
		assert.Equal(t, Stats{State: HalfOpen, Trips: 1}, b.Snapshot(later))
	}
	_, tr, r := b.Allow(later)
	require.Nil(t, r)
	assert.Equal(t, &Transition{From: Open, To: HalfOpen, At: later}, tr, "the reads left the transition to allow")
	assert.Equal(t, Stats{State: HalfOpen, ProbesInFlight: 1, Trips: 1}, b.Snapshot(later))
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
		{"open, clock stepped back", 10 * time.Second, -time.Hour, Open},
		{"OpenFor passed, clock stepped back", openFor + time.Second, -time.Hour, HalfOpen},
		{"open, clock stepped forward", 10 * time.Second, time.Hour, Open},
		{"OpenFor passed, clock stepped forward", openFor + time.Second, time.Hour, HalfOpen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newBreaker(Settings{FailureThreshold: 1, OpenFor: openFor, MinOpenFor: openFor})
			opened := time.Now()
			p, _, r := b.Allow(opened)
			require.Nil(t, r)
			require.NotNil(t, b.Done(p, opened, Failure))

			now := wallStepped(t, opened.Add(tt.after), tt.step)
			assert.Equal(t, tt.want, b.State(now), "lock-free read")
			assert.Equal(t, tt.want, b.Snapshot(now).State, "locked read")
			_, tr, r := b.Allow(now)
			if tt.want == Open {
				assert.NotNil(t, r, "allow refuses")
				return
			}
			require.Nil(t, r, "allow grants the probe")
			require.NotNil(t, tr)
			assert.Equal(t, HalfOpen, tr.To)
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
	b := newBreaker(Settings{FailureThreshold: 3, OpenFor: 20 * time.Millisecond, HalfOpenProbes: probes, DeadAfter: -1})
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
				p, tr, r := b.Allow(now)
				if tr != nil {
					transitions.Add(1)
				}
				if r != nil {
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
				o := Outcome(rng.IntN(3)) // ignore, success, failure
				if rng.IntN(2) == 0 {
					o = Failure
				}
				if p.probe {
					mu.Lock()
					inFlight[p.gen]--
					mu.Unlock()
				}
				if tr := b.Done(p, brkT0.Add(time.Duration(clock.Load())), o); tr != nil {
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
	assert.Zero(t, b.Snapshot(brkT0.Add(time.Duration(clock.Load()))).ProbesInFlight, "every probe slot given back")
	t.Logf("transitions %d, probes %d (max %d in flight), refused %d", transitions.Load(), probesSeen, maxInFlight, refused.Load())
}

// The open period of a model silent for long starts at MinOpenFor, doubles
// with each failed probe up to OpenFor, and starts again from MinOpenFor
// once a probe closes the breaker.
func TestBreakerOpenPeriodGrows(t *testing.T) {
	b := New(withDefaults(Settings{FailureThreshold: 1, DeadAfter: -1}), brkT0.Add(-time.Hour)) // silent for an hour
	now := brkT0
	fail := func() {
		t.Helper()
		p, _, r := b.Allow(now)
		require.Nil(t, r)
		require.NotNil(t, b.Done(p, now, Failure))
	}
	fail()
	var periods []time.Duration
	for range 7 { // each probe fails
		until := b.Snapshot(now).OpenUntil
		periods = append(periods, until.Sub(now))
		_, _, r := b.Allow(until.Add(-time.Nanosecond))
		require.NotNil(t, r, "open until its period ends")
		now = until
		fail()
	}
	s := time.Second
	assert.Equal(t, []time.Duration{2 * s, 4 * s, 8 * s, 16 * s, 30 * s, 30 * s, 30 * s}, periods)

	now = b.Snapshot(now).OpenUntil
	p, _, r := b.Allow(now)
	require.Nil(t, r)
	require.NotNil(t, b.Done(p, now, Success), "the probe closes it")
	fail()
	assert.Equal(t, 2*s, b.Snapshot(now).OpenUntil.Sub(now), "closed, it starts again from MinOpenFor")

	fixed := newBreaker(Settings{FailureThreshold: 1, DeadAfter: -1, OpenFor: 10 * s, MinOpenFor: 10 * s})
	p, _, _ = fixed.Allow(brkT0)
	fixed.Done(p, brkT0, Failure)
	p, _, _ = fixed.Allow(brkT0.Add(10 * s))
	fixed.Done(p, brkT0.Add(10*s), Failure)
	assert.Equal(t, brkT0.Add(20*s), fixed.Snapshot(brkT0.Add(10*s)).OpenUntil, "MinOpenFor = OpenFor: a fixed period")
}

// An outage's failure opens for OpenFor at once: from closed on the
// FailureThreshold-th failure whatever DeadAfter says, and from half-open on
// a failed probe without the doubling from MinOpenFor.
func TestBreakerOutageOpensForOpenFor(t *testing.T) {
	b := newBreaker(Settings{FailureThreshold: 2})
	p, _, _ := b.Allow(brkT0)
	b.Done(p, brkT0, Success) // answered: DeadAfter keeps a failure closed
	for range 2 {
		p, _, _ = b.Allow(brkT0)
		b.Done(p, brkT0, Failure)
	}
	require.Equal(t, Closed, b.State(brkT0), "degraded, not dead")
	p, _, _ = b.Allow(brkT0)
	assert.Equal(t, &Transition{From: Closed, To: Open, At: brkT0}, b.Done(p, brkT0, Outage))
	assert.Equal(t, brkT0.Add(defaultOpenFor), b.OpenUntil())

	probeAt := b.OpenUntil()
	p, _, _ = b.Allow(probeAt)
	require.True(t, p.Probe())
	assert.Equal(t, &Transition{From: HalfOpen, To: Open, At: probeAt}, b.Done(p, probeAt, Outage))
	assert.Equal(t, probeAt.Add(defaultOpenFor), b.OpenUntil())
}

// OpenEarly turns an open breaker half-open before its OpenFor ends, and
// changes nothing in any other state.
func TestBreakerOpenEarly(t *testing.T) {
	b := newBreaker(Settings{FailureThreshold: 1})
	assert.Nil(t, b.OpenEarly(brkT0), "closed")
	p, _, _ := b.Allow(brkT0)
	require.NotNil(t, b.Done(p, brkT0, Failure))

	early := brkT0.Add(time.Second)
	assert.Equal(t, &Transition{From: Open, To: HalfOpen, At: early}, b.OpenEarly(early))
	assert.Nil(t, b.OpenEarly(early), "half-open")
	p, tr, r := b.Allow(early)
	require.Nil(t, r)
	assert.Nil(t, tr, "already half-open")
	assert.True(t, p.Probe(), "the next request is the probe")
}

// OpenTill opens a closed or half-open breaker until a time another replica
// gave, extends an open one without a transition, and never shortens it.
func TestBreakerOpenTill(t *testing.T) {
	s := time.Second
	b := newBreaker(Settings{})
	assert.Nil(t, b.OpenTill(brkT0, brkT0, brkT0, false), "an end not after now")
	assert.Equal(t, Closed, b.State(brkT0))

	assert.Equal(t, &Transition{From: Closed, To: Open, At: brkT0}, b.OpenTill(brkT0, brkT0, brkT0.Add(10*s), false))
	assert.Equal(t, brkT0.Add(10*s), b.OpenUntil())
	assert.Nil(t, b.OpenTill(brkT0.Add(s), brkT0, brkT0.Add(20*s), false), "extended, no transition")
	assert.Equal(t, brkT0.Add(20*s), b.OpenUntil())
	assert.Equal(t, brkT0, b.OpenSince(), "extended, still open since the opening")
	assert.Nil(t, b.OpenTill(brkT0.Add(2*s), brkT0, brkT0.Add(5*s), false))
	assert.Equal(t, brkT0.Add(20*s), b.OpenUntil(), "never shortened")
	assert.Equal(t, 1, b.Snapshot(brkT0.Add(2*s)).Trips)

	late := brkT0.Add(25 * s)
	_, tr, _ := b.Allow(late)
	require.Equal(t, HalfOpen, tr.To)
	assert.Equal(t, &Transition{From: HalfOpen, To: Open, At: late}, b.OpenTill(late, late, late.Add(10*s), false))
}

// OpenTill of a fact older than the breaker's latest change (facts are
// sent whole at each change of the fleet's): a half-open breaker whose own
// probe is out, or one a probe closed since, is left alone, so that the
// probe's outcome counts; an open breaker counts as opened at the later
// opening, which spaces the early probes of an outage fleet-wide.
func TestBreakerOpenTillOfAnOlderOpening(t *testing.T) {
	s := time.Second
	b := newBreaker(Settings{FailureThreshold: 1})
	require.NotNil(t, b.OpenTill(brkT0, brkT0, brkT0.Add(30*s), true))
	probing := brkT0.Add(3 * s)
	require.NotNil(t, b.OpenEarly(probing))
	p, _, refused := b.Allow(probing)
	require.Nil(t, refused)
	require.True(t, p.Probe())
	assert.Nil(t, b.OpenTill(probing.Add(time.Millisecond), brkT0, brkT0.Add(30*s), true), "the opening the probe is out for: no reopening")
	assert.Equal(t, HalfOpen, b.State(probing.Add(time.Millisecond)))
	b.Done(p, probing.Add(s), Success)
	require.Equal(t, Closed, b.State(probing.Add(s)), "the probe's answer closes it")
	assert.Nil(t, b.OpenTill(probing.Add(2*s), brkT0, brkT0.Add(30*s), true), "closed after that opening: left closed")
	assert.Equal(t, Closed, b.State(probing.Add(2*s)))

	failedElsewhere := probing.Add(3 * s)
	assert.NotNil(t, b.OpenTill(failedElsewhere, failedElsewhere, failedElsewhere.Add(4*s), false), "an opening after its change")
	assert.Nil(t, b.OpenTill(failedElsewhere.Add(s), failedElsewhere.Add(s), failedElsewhere.Add(3*s), false))
	assert.Equal(t, failedElsewhere.Add(s), b.OpenSince(), "open since the latest opening")
	assert.Equal(t, failedElsewhere.Add(4*s), b.OpenUntil(), "never shortened")
	assert.Nil(t, b.OpenTill(failedElsewhere.Add(2*s), failedElsewhere.Add(time.Hour), failedElsewhere.Add(5*s), false))
	assert.Equal(t, failedElsewhere.Add(2*s), b.OpenSince(), "an opening stamped ahead of this clock counts as now")

	outage := newBreaker(Settings{FailureThreshold: 1})
	require.NotNil(t, outage.OpenTill(brkT0, brkT0, brkT0.Add(30*s), true))
	assert.Nil(t, outage.OpenTill(brkT0.Add(s), brkT0.Add(s), brkT0.Add(4*s), false), "a later opening no outage made, within the outage's")
	assert.True(t, outage.OpenForOutage(brkT0.Add(s)), "still the outage's to end")
	assert.Nil(t, outage.OpenTill(brkT0.Add(2*s), brkT0.Add(2*s), brkT0.Add(40*s), false))
	assert.False(t, outage.OpenForOutage(brkT0.Add(2*s)), "extended by an opening no outage made: not the outage's to end")
}

// CloseSince closes a breaker that has not changed state since another
// replica's probe succeeded, and leaves a closed one, or one that changed
// after the probe, alone.
func TestBreakerCloseSince(t *testing.T) {
	s := time.Second
	b := newBreaker(Settings{FailureThreshold: 1})
	assert.Nil(t, b.CloseSince(brkT0, brkT0), "closed")

	p, _, _ := b.Allow(brkT0.Add(s))
	require.NotNil(t, b.Done(p, brkT0.Add(s), Failure))
	assert.Nil(t, b.CloseSince(brkT0.Add(2*s), brkT0), "opened after the probe: it knows better")
	assert.Equal(t, &Transition{From: Open, To: Closed, At: brkT0.Add(3 * s)}, b.CloseSince(brkT0.Add(3*s), brkT0.Add(2*s)))
	assert.Equal(t, Closed, b.State(brkT0.Add(3*s)))
}

// An outage opens a breaker for OpenFor; once it is over, the breaker is
// open for its own period from the opening (MinOpenFor from closed).
func TestBreakerOutageOverShortensTheOutagesOpening(t *testing.T) {
	b := New(withDefaults(Settings{}), brkT0)
	var tr *Transition
	for range 5 {
		p, _, _ := b.Allow(brkT0)
		tr = b.Done(p, brkT0, Outage)
	}
	require.NotNil(t, tr)
	assert.Equal(t, brkT0.Add(30*time.Second), b.OpenUntil(), "an outage opens for OpenFor")

	require.True(t, b.OutageOver(brkT0.Add(time.Second)))
	assert.Equal(t, brkT0.Add(2*time.Second), b.OpenUntil(), "over: MinOpenFor from the opening")
	assert.False(t, b.OutageOver(brkT0.Add(time.Second)), "once")
	assert.Nil(t, b.Refusing(brkT0.Add(2*time.Second)), "the call after its period is its probe")

	late := New(withDefaults(Settings{}), brkT0)
	for range 5 {
		p, _, _ := late.Allow(brkT0)
		late.Done(p, brkT0, Outage)
	}
	require.True(t, late.OutageOver(brkT0.Add(5*time.Second)))
	assert.Equal(t, brkT0.Add(5*time.Second), late.OpenUntil(), "its own period passed: it ends at once")

	own := New(withDefaults(Settings{DeadAfter: -1}), brkT0)
	for range 5 {
		p, _, _ := own.Allow(brkT0)
		own.Done(p, brkT0, Failure)
	}
	assert.False(t, own.OutageOver(brkT0.Add(time.Second)), "opened by its own failures: unchanged")
	assert.Equal(t, brkT0.Add(2*time.Second), own.OpenUntil())
}

// A fleet's outage openings end as the breaker's own do: TripForOutage
// (the fleet's failures in an outage) and OpenTill with outage (another
// replica's outage opening) open for what they say, and OutageOver cuts
// them to the breaker's own period from the opening.
func TestBreakerFleetsOutageOpeningsEndWithTheOutage(t *testing.T) {
	s := time.Second
	tripped := New(withDefaults(Settings{}), brkT0)
	assert.Equal(t, &Transition{From: Closed, To: Open, At: brkT0}, tripped.TripForOutage(brkT0))
	assert.Nil(t, tripped.TripForOutage(brkT0.Add(s)), "open already")
	assert.Equal(t, brkT0.Add(30*s), tripped.OpenUntil(), "OpenFor")
	assert.True(t, tripped.OpenForOutage(brkT0.Add(s)))
	require.True(t, tripped.OutageOver(brkT0.Add(s)))
	assert.Equal(t, brkT0.Add(2*s), tripped.OpenUntil(), "over: MinOpenFor from the opening")
	assert.False(t, tripped.OpenForOutage(brkT0.Add(s)), "no longer the outage's")

	heard := New(withDefaults(Settings{}), brkT0)
	require.NotNil(t, heard.OpenTill(brkT0, brkT0, brkT0.Add(30*s), true))
	assert.True(t, heard.OpenForOutage(brkT0))
	require.True(t, heard.OutageOver(brkT0.Add(s)))
	assert.Equal(t, brkT0.Add(2*s), heard.OpenUntil(), "over: MinOpenFor from the opening")

	plain := New(withDefaults(Settings{}), brkT0)
	require.NotNil(t, plain.OpenTill(brkT0, brkT0, brkT0.Add(30*s), false))
	assert.False(t, plain.OpenForOutage(brkT0))
	assert.False(t, plain.OutageOver(brkT0.Add(s)), "another replica's own failures: unchanged")
	assert.Equal(t, brkT0.Add(30*s), plain.OpenUntil())
	assert.Nil(t, plain.OpenTill(brkT0.Add(s), brkT0.Add(s), brkT0.Add(40*s), true))
	assert.False(t, plain.OutageOver(brkT0.Add(2*s)), "extended by an outage's opening: not shortened below what no outage opened")
	assert.Equal(t, brkT0.Add(40*s), plain.OpenUntil())
}

// A model that answered (20 requests), failed once, then was asked
// nothing for 17s: a burst's first failures continue that run, which has
// lasted half of DeadAfter, but the burst's other requests, granted
// before those failures came back, may yet answer: the breaker waits for
// them, and one answer keeps it closed. A request in flight for longer
// than DeadAfter is not waited for.
func TestBreakerWaitsForABurstsAnswersAfterAQuietSpell(t *testing.T) {
	b := New(withDefaults(Settings{}), brkT0)
	at := func(d time.Duration) time.Time { return brkT0.Add(d) }
	call := func(d time.Duration, o Outcome) *Transition {
		p, _, _ := b.Allow(at(d))
		return b.Done(p, at(d), o)
	}
	for range 20 { // a model that answers most of its requests: five failures in a row are unlikely of it
		require.Nil(t, call(time.Second, Success))
	}
	require.Nil(t, call(3*time.Second, Failure), "the run of failures begins")

	burst := make([]Permit, 10)
	for i := range burst {
		burst[i], _, _ = b.Allow(at(20 * time.Second))
	}
	for _, p := range burst[:5] {
		require.Nil(t, b.Done(p, at(20*time.Second+300*time.Millisecond), Failure), "the burst's other requests are still out")
	}
	require.Nil(t, b.Done(burst[5], at(22*time.Second), Success), "and one answers")
	assert.Equal(t, Closed, b.State(at(22*time.Second)))

	// burst[6:] stay in flight for good. From 40s the model fails every
	// request: it is dead once its failures have lasted half of DeadAfter,
	// the requests granted 20s before not waited for.
	for range 4 {
		require.Nil(t, call(40*time.Second, Failure))
	}
	require.Nil(t, call(45*time.Second-1, Failure), "the run has not lasted half of DeadAfter")
	tr := call(45*time.Second, Failure)
	require.NotNil(t, tr, "failures for half of DeadAfter, silent for DeadAfter: dead")
	assert.Equal(t, Open, tr.To)
}

// An open period is at most a quarter of the model's silence (though at
// least MinOpenFor): a model that answered a moment before its opening is
// probed every 2s until it has been silent for 8s, then every quarter of
// its silence, doubling no faster than before (2s, 4s, 8s at most), and
// every OpenFor once it has been silent for 4·OpenFor; one that never
// answered, likewise from the breaker's start. Before, the first was
// reopened for 2s, 4s, 8s, then 15s for a minute: out for 15s after three
// failed probes, whatever its bad spells lasted.
func TestBreakerOpenPeriodIsBoundedByTheModelsSilence(t *testing.T) {
	s := time.Second
	periods := func(b *Breaker, now time.Time) []time.Duration {
		var out []time.Duration
		for range 12 { // each probe fails
			until := b.Snapshot(now).OpenUntil
			out = append(out, until.Sub(now).Round(time.Millisecond))
			now = until
			p, _, r := b.Allow(now)
			require.Nil(t, r)
			require.NotNil(t, b.Done(p, now, Failure))
		}
		return out
	}
	want := []time.Duration{2 * s, 2 * s, 2 * s, 2 * s, 2 * s, 2500 * time.Millisecond, 3125 * time.Millisecond,
		3906 * time.Millisecond, 4883 * time.Millisecond, 6104 * time.Millisecond, 7629 * time.Millisecond, 9537 * time.Millisecond}

	answered := New(withDefaults(Settings{FailureThreshold: 1, DeadAfter: -1}), brkT0.Add(-time.Hour))
	p, _, _ := answered.Allow(brkT0)
	require.Nil(t, answered.Done(p, brkT0, Success))
	p, _, _ = answered.Allow(brkT0)
	require.NotNil(t, answered.Done(p, brkT0, Failure))
	assert.Equal(t, want, periods(answered, brkT0), "silent since its opening")

	never := New(withDefaults(Settings{FailureThreshold: 1, DeadAfter: -1}), brkT0)
	p, _, _ = never.Allow(brkT0)
	require.NotNil(t, never.Done(p, brkT0, Failure))
	assert.Equal(t, want, periods(never, brkT0), "never answered since its start")

	late := New(withDefaults(Settings{FailureThreshold: 1, DeadAfter: -1}), brkT0.Add(-time.Hour))
	p, _, _ = late.Allow(brkT0)
	require.Nil(t, late.Done(p, brkT0, Success))
	at := brkT0.Add(2 * time.Minute) // silent for 4·OpenFor when it opens
	p, _, _ = late.Allow(at)
	require.NotNil(t, late.Done(p, at, Failure))
	assert.Equal(t, []time.Duration{2 * s, 4 * s, 8 * s, 16 * s, 30 * s}, periods(late, at)[:5], "silent for two minutes: the doubling up to OpenFor")
}

// A run of failures makes a model dead only when a model answering as it
// did before the run would make it with a chance under deadRunChance:
// five for one that answered every request (FailureThreshold), seven for
// one that answered two in three, about thirty for one that answered a
// fifth. The run's start reads the record, so the failures of the run
// itself do not count in it; a long record is scaled down to
// recentOutcomes.
func TestBreakerRunOfAFlakyModelIsNotItsDeath(t *testing.T) {
	for _, tc := range []struct {
		name              string
		answers, failures int
		deadAt            int // failures in a row that open it
	}{
		{"answered every request", 30, 0, 5},
		{"answered two in three", 40, 20, 7},
		{"answered a fifth", 12, 48, 30},
		{"answered a fifth, of a record scaled down", 120, 480, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(withDefaults(Settings{}), brkT0)
			at := brkT0
			call := func(o Outcome) *Transition {
				p, _, _ := b.Allow(at)
				return b.Done(p, at, o)
			}
			each := (tc.failures + tc.answers - 1) / tc.answers // failures before each answer: no run of FailureThreshold
			for left := tc.failures; left > 0 || tc.answers > 0; tc.answers-- {
				for range min(each, left) {
					require.Nil(t, call(Failure))
					left--
				}
				require.Nil(t, call(Success))
			}
			at = at.Add(time.Minute) // silent for DeadAfter from the run's first failure on
			for n := 1; n < tc.deadAt; n++ {
				require.Nil(t, call(Failure), "failure %d in a row", n)
				at = at.Add(2 * time.Second) // the run lasts half of DeadAfter by the fifth
			}
			tr := call(Failure)
			require.NotNil(t, tr, "failure %d in a row: dead", tc.deadAt)
			assert.Equal(t, Open, tr.To)
		})
	}
}

// A run is counted in draws: requests sent together meet the model in the
// same moment, and a model whose failures come in spells fails them
// together. A failure is a draw of its own when its request was sent once
// the run's latest draw came back, or DeadAfter/FailureThreshold (2s at the
// defaults) after that draw's request was sent, whichever is sooner.
func TestBreakerRunCountsRequestsSentTogetherAsOneDraw(t *testing.T) {
	halfAnswered := func() (*Breaker, time.Time) {
		b := New(withDefaults(Settings{}), brkT0)
		for range 30 { // half answered, one failure in a row at most: dead after 10 draws
			for _, o := range []Outcome{Failure, Success} {
				p, _, _ := b.Allow(brkT0)
				b.Done(p, brkT0, o)
			}
		}
		return b, brkT0.Add(time.Minute)
	}

	t.Run("waves of requests sent together", func(t *testing.T) {
		b, at := halfAnswered()
		for wave := 1; ; wave++ {
			var ps [4]Permit
			for i := range ps {
				ps[i], _, _ = b.Allow(at)
			}
			back := at.Add(300 * time.Millisecond)
			for i, p := range ps {
				if tr := b.Done(p, back, Failure); tr != nil {
					assert.Equal(t, Open, tr.To)
					assert.Equal(t, []int{10, 0}, []int{wave, i}, "opened by the tenth wave's first failure")
					return
				}
			}
			at = at.Add(2 * time.Second)
		}
	})
	t.Run("requests that hang", func(t *testing.T) {
		b, at := halfAnswered()
		var ps []Permit
		for range 40 { // one a second, each failing at the 60s timeout
			p, _, _ := b.Allow(at)
			ps = append(ps, p)
			at = at.Add(time.Second)
		}
		at = at.Add(20 * time.Second) // the first is back at 60s
		for i, p := range ps {
			if tr := b.Done(p, at.Add(time.Duration(i)*time.Second), Failure); tr != nil {
				assert.Equal(t, Open, tr.To)
				assert.Equal(t, 18, i, "sent two seconds apart, the 1st, 3rd, ..., 19th are draws: the 19th makes 10")
				return
			}
		}
		t.Fatal("never opened")
	})
}

// RunUnlikely reads a run of which the breaker saw a part (a fleet's)
// against the record before the run it is in, or against the record now
// when it is in none.
func TestBreakerRunUnlikelyReadsTheRecordBeforeTheRun(t *testing.T) {
	b := New(withDefaults(Settings{}), brkT0)
	call := func(o Outcome) {
		p, _, _ := b.Allow(brkT0)
		b.Done(p, brkT0, o)
	}
	for range 20 { // a third answered: 20 answers, 40 failures, two in a row at most
		call(Success)
		call(Failure)
		call(Failure)
	}
	call(Success)
	assert.False(t, b.RunUnlikely(16), "a model answering a third of its requests makes 16 failures in a row about one time in a thousand")
	assert.True(t, b.RunUnlikely(17))

	for range 4 { // in a run now: its failures are not in the record it is read against
		call(Failure)
	}
	assert.False(t, b.RunUnlikely(16))
	assert.True(t, b.RunUnlikely(17))
}

// A breaker that has heard nothing for longer than it was open, since it
// opened from closed on a model that has answered, lets every call through
// until its first probe comes back: calls that come together after a
// silence (a wave) meet the model as a closed breaker would let them.
// Turned half-open sooner, after a failed probe, or on a model that never
// answered (no learned cut would bound a hang's wait), it lets one probe
// through at a time.
func TestBreakerHalfOpenAfterASilenceLetsCallsThroughUntilTheFirstOutcome(t *testing.T) {
	s := time.Second
	opened := func(answered bool) *Breaker {
		b := newBreaker(Settings{FailureThreshold: 1, DeadAfter: -1})
		if answered {
			p, _, _ := b.Allow(brkT0)
			require.Nil(t, b.Done(p, brkT0, Success))
		}
		p, _, _ := b.Allow(brkT0)
		require.NotNil(t, b.Done(p, brkT0, Failure))
		require.Equal(t, brkT0.Add(2*s), b.Snapshot(brkT0).OpenUntil)
		return b
	}
	probes := func(b *Breaker, at time.Duration, n int) (granted []Permit) {
		t.Helper()
		for range n {
			if p, _, r := b.Allow(brkT0.Add(at)); r == nil {
				require.True(t, p.Probe())
				granted = append(granted, p)
			}
		}
		return granted
	}

	b := opened(true)
	assert.Len(t, probes(b, 4*s, 3), 1, "half-open 2s after 2s open: one probe")
	b = opened(false)
	assert.Len(t, probes(b, time.Hour, 3), 1, "a model that never answered: one probe however long the silence")

	b = opened(true)
	ps := probes(b, 4*s+time.Millisecond, 12)
	require.Len(t, ps, 12, "half-open after more than its 2s open: every call")
	assert.Nil(t, b.Done(ps[0], brkT0.Add(5*s), Ignore))
	assert.Empty(t, probes(b, 5*s, 1), "the first outcome, even an ignored one, shuts the door: 11 probes out")
	tr := b.Done(ps[1], brkT0.Add(5*s), Success)
	require.NotNil(t, tr)
	assert.Equal(t, Closed, tr.To, "a probe's answer closes it")

	b = opened(true)
	ps = probes(b, 10*s, 2)
	require.Len(t, ps, 2)
	require.NotNil(t, b.Done(ps[0], brkT0.Add(10*s), Failure), "a failed probe opens it again, for 4s")
	assert.Nil(t, b.Done(ps[1], brkT0.Add(10*s), Failure), "the generation changed: nothing")
	assert.Len(t, probes(b, time.Hour, 3), 1, "after a failed probe, one probe at a time however long the silence")
}

// TestBreakerHeardAtElsewhere: a model that never answered this breaker
// opens on its failures alone; one that answered elsewhere (a fleet's
// other replica: HeardAt) within DeadAfter does not, as one process that
// heard that answer would not, and its record of outcomes stays empty.
func TestBreakerHeardAtElsewhere(t *testing.T) {
	at := brkT0.Add(6 * time.Second)
	assert.True(t, failFiveAt(New(withDefaults(Settings{}), brkT0), at), "never answered: its failures alone")

	b := New(withDefaults(Settings{}), brkT0)
	b.HeardAt(at.Add(-time.Second), at)
	assert.False(t, failFiveAt(b, at), "answered elsewhere a second ago")
	assert.Zero(t, b.answers.Load(), "its record of outcomes is its own")

	b.HeardAt(at.Add(-time.Hour), at) // older than the latest: changes nothing
	assert.False(t, b.answered.SilentFor(at, 5*time.Second), "the latest answer kept")
	b.HeardAt(at.Add(time.Hour), at) // a clock ahead: taken as now
	assert.False(t, b.answered.SilentFor(at.Add(time.Second), 2*time.Second))
	assert.True(t, b.answered.SilentFor(at.Add(2*time.Second), 2*time.Second))
}

// TestBreakerAwaitingUntil: a request granted while the model was unheard
// is awaited until its grant plus DeadAfter while in flight; with sending,
// a request about to be granted counts too; none once it came back.
func TestBreakerAwaitingUntil(t *testing.T) {
	b := New(withDefaults(Settings{}), brkT0)
	assert.True(t, b.AwaitingUntil(brkT0, false).IsZero(), "nothing in flight")
	assert.Equal(t, brkT0.Add(10*time.Second), b.AwaitingUntil(brkT0, true), "about to send one")
	p, _, _ := b.Allow(brkT0.Add(time.Second))
	require.True(t, p.Early())
	assert.Equal(t, brkT0.Add(11*time.Second), b.AwaitingUntil(brkT0.Add(2*time.Second), false))
	assert.True(t, b.AwaitingUntil(brkT0.Add(11*time.Second), false).IsZero(), "DeadAfter past its grant: not waited for")
	b.Done(p, brkT0.Add(3*time.Second), Success)
	assert.True(t, b.AwaitingUntil(brkT0.Add(4*time.Second), true).IsZero(), "it answered: heard, nothing awaited")
}

// TestBreakerAwaitedElsewhere: while another breaker of the model (a
// fleet's other replica) awaits an answer, failures alone do not make a
// model that never answered dead; once that wait ends, they do. None
// recorded changes nothing, whatever the clock says of the origin.
func TestBreakerAwaitedElsewhere(t *testing.T) {
	b := New(withDefaults(Settings{}), brkT0)
	b.AwaitedElsewhere(brkT0.Add(5 * time.Second))
	assert.False(t, failFiveAt(b, brkT0.Add(time.Second)), "another replica awaits an answer")
	assert.True(t, failFiveAt(b, brkT0.Add(6*time.Second)), "its wait is over")

	b = New(withDefaults(Settings{}), brkT0.Add(time.Hour)) // made after the times it is given
	b.AwaitedElsewhere(time.Time{})
	assert.True(t, failFiveAt(b, brkT0), "none awaited")
}

// failFiveAt has five requests fail at at and reports whether b opened.
func failFiveAt(b *Breaker, at time.Time) (opened bool) {
	for range 5 {
		p, _, _ := b.Allow(at)
		if tr := b.Done(p, at, Failure); tr != nil && tr.To == Open {
			opened = true
		}
	}
	return opened
}
