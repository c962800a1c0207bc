package geminiguard

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/geminiguard/geminiguard/internal/circuit"
)

// State is the state of a model's circuit breaker. The zero value is
// StateClosed.
type State int

const (
	// StateClosed: requests flow; counted failures are tallied.
	StateClosed State = iota
	// StateOpen: requests are refused with ErrCircuitOpen until the open
	// period has passed (MinOpenFor, doubled on each failed probe, up to
	// OpenFor).
	StateOpen
	// StateHalfOpen: up to HalfOpenProbes trial requests are let through; their
	// successes close the breaker, a failure opens it again. A breaker that
	// opened from closed on a model that has answered, and that nobody asked
	// for longer than it was open, lets every call through until its first
	// probe comes back: a wave of users after a silence meets the model as
	// a closed breaker would let it.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string { return circuit.State(s).String() }

// Breaker defaults, as BreakerSettings' fields state them.
const (
	defaultFailureThreshold   = 5                // consecutive counted failures that open the breaker
	defaultOpenFor            = 30 * time.Second // longest time open before half-open
	defaultMinOpenFor         = 2 * time.Second  // first time open before half-open
	defaultHalfOpenProbes     = 1                // probes in flight in half-open, and successes that close it
	defaultBreakerWindow      = 60 * time.Second // failure-rate window, when FailureRate is set
	defaultBreakerMinRequests = 10               // calls the window needs before the rate counts, when FailureRate is set
	defaultAllOpenProbeEvery  = 2 * time.Second  // spacing of early probes when a call has no model left but open ones
	defaultDeadAfter          = 10 * time.Second // time without a success that, with the failures, makes a model dead
)

// BreakerSettings configures the per-model circuit breakers (one per model
// and endpoint). Only failures that say the model is unwell count (5xx,
// timeouts, network errors, cut streams); quota answers cool the model down
// instead, and caller cancellations and request errors count for nothing. A
// zero field means its default, so the zero value is the default
// configuration; a negative (except AllOpenProbeEvery's) or contradictory
// value is an error from New. It is a plain value: the Client keeps its own
// copy.
type BreakerSettings struct {
	// FailureThreshold is the number of consecutive counted failures that
	// opens a closed breaker, once the model has also answered nothing for
	// DeadAfter; a success resets the count. A model that has answered is
	// opened only by a run of failures that it would make with a chance
	// under 0.1% if it still answered as often as over its latest 64 to 128
	// requests before the run: FailureThreshold for a model that answered
	// them all, 7 in a row for one that answered two in three, 17 for one
	// that answered a third. The run is counted in draws: failures of
	// requests sent together (before the failure counted last came back,
	// and within DeadAfter/FailureThreshold of its request) count once, for
	// they met the model in the same moment: a wave of users meeting one
	// bad spell is one draw. A flaky model's runs are what it does; the
	// throttle (see the package doc's routing) keeps its traffic to what
	// it can serve.
	// Default: 5.
	FailureThreshold int
	// DeadAfter is how long a model must have gone without answering, on
	// top of FailureThreshold failures in a row that have lasted half of
	// it, for its breaker to open: the breaker is for a dead model. (A
	// burst of calls after a quiet spell gets a model's fast 503s back
	// before its slow answers: a few failures in a row, 0.3s long, of a
	// model silent only because nothing asked it, say nothing yet; nor
	// does a failure before the spell.) While the model has answered
	// nothing for DeadAfter, or never did, no failure opens it while a
	// request to it sent before the latest failure, or before the first of
	// the burst came back, is still out, for at most DeadAfter: its answer
	// may be on its way. A degraded one, failing in bursts
	// but still answering, keeps the share of traffic it can serve (see
	// the package doc's routing); a storm of 503s that lets one request in
	// seven through does not take it out of rotation. When every model of
	// the Client has been failing, or refused as failing, for 2s with no
	// answer (an outage; a Client that asked nothing is idle, not in one),
	// or the model never answered since the Client started, the
	// failures alone open it: for MinOpenFor, so that a brownout present
	// from the first request takes a model that answers most of its
	// requests out for a moment only. An outage's opening lasts up to
	// OpenFor while no model answers (AllOpenProbeEvery's early probes
	// find its end), and ends with the outage: once any model answers,
	// the model is open for MinOpenFor from the opening (doubled for each
	// failed probe), as for its own failures. A negative value opens on
	// the failures alone.
	// Default: 10s.
	DeadAfter time.Duration
	// OpenFor is the longest an open breaker refuses requests before it
	// lets probes through (half-open), unless every model is open (see
	// AllOpenProbeEvery). A breaker opened from closed refuses for
	// MinOpenFor; each failed probe reopens it for twice as long as the
	// time before, up to OpenFor, and never for longer than a quarter of
	// the time since the model last answered (since the Client started,
	// when it never did), though for MinOpenFor at least: a model in and
	// out of bad spells, silent for about as long as its spell has lasted,
	// is probed again within seconds, so it is not taken out for much
	// longer than its bad spell lasts; one that stays down costs a probe
	// per OpenFor once it has been silent for four times OpenFor.
	// Default: 30s.
	OpenFor time.Duration
	// MinOpenFor is how long a breaker opened from closed refuses requests
	// before its first probe; at most OpenFor. Set it to OpenFor for an
	// open period that does not grow.
	// Default: 2s, or OpenFor when that is shorter.
	MinOpenFor time.Duration
	// HalfOpenProbes is both the number of probes a half-open breaker lets
	// through at a time and the number of probe successes that close it: a
	// model that just came back gets that many requests, not the flood.
	// Default: 1.
	HalfOpenProbes int
	// FailureRate, when above 0, also opens a closed breaker when the counted
	// failures reach this fraction of the calls that completed within the last
	// Window (successes and counted failures; ignored outcomes are left out),
	// once there were at least MinRequests of them. It must be in [0, 1].
	// Default: 0 (off: consecutive failures only).
	FailureRate float64
	// Window is the span the failure rate is measured over, in steps of a
	// tenth of it. At least 1s; only with FailureRate.
	// Default: 60s when FailureRate is set.
	Window time.Duration
	// MinRequests is the number of calls within Window below which the
	// failure rate is not judged. Only with FailureRate.
	// Default: 10 when FailureRate is set.
	MinRequests int
	// AllOpenProbeEvery spaces the early probes of an outage. When a call
	// has no model left to try and at least one is open (each of its models
	// is open, cooling down, or already failed in this call, and none has a
	// probe in flight), it would fail anyway, so it probes instead: the
	// model open the longest, if for at least AllOpenProbeEvery, goes
	// half-open before its OpenFor ends and the call is its probe. At most
	// one such call per AllOpenProbeEvery across the Client probes; the
	// others fail at once as before. A total outage thus costs at most one
	// request per AllOpenProbeEvery, and its end is found within about that
	// long instead of within OpenFor. When the probe succeeds, the other
	// open models of the call go half-open too: they went down together and
	// are likely back together, and each gets one probe. A negative value
	// turns early probes off (recovery waits for OpenFor); a positive one
	// must be at least 1s.
	// Default: 2s.
	AllOpenProbeEvery time.Duration
}

// withDefaults returns s with every zero field set to its default. Negative
// and other invalid values are kept, for validate to report.
func (s BreakerSettings) withDefaults() BreakerSettings {
	if s.FailureThreshold == 0 {
		s.FailureThreshold = defaultFailureThreshold
	}
	if s.OpenFor == 0 {
		s.OpenFor = defaultOpenFor
	}
	if s.MinOpenFor == 0 {
		s.MinOpenFor = min(defaultMinOpenFor, max(s.OpenFor, 0))
	}
	if s.HalfOpenProbes == 0 {
		s.HalfOpenProbes = defaultHalfOpenProbes
	}
	if s.AllOpenProbeEvery == 0 {
		s.AllOpenProbeEvery = defaultAllOpenProbeEvery
	}
	if s.DeadAfter == 0 {
		s.DeadAfter = defaultDeadAfter
	}
	if s.FailureRate > 0 {
		if s.Window == 0 {
			s.Window = defaultBreakerWindow
		}
		if s.MinRequests == 0 {
			s.MinRequests = defaultBreakerMinRequests
		}
	}
	return s
}

// validate reports every invalid field of s (errors.Join), each naming the
// field and what to do; nil when s is valid. It accepts s before or after
// withDefaults.
func (s BreakerSettings) validate() error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("geminiguard: BreakerSettings."+format, args...))
	}
	if s.FailureThreshold < 0 {
		add("FailureThreshold is %d: use a positive count, or 0 for the default (%d)", s.FailureThreshold, defaultFailureThreshold)
	}
	if s.OpenFor < 0 {
		add("OpenFor is %v: use a positive duration, or 0 for the default (%v)", s.OpenFor, defaultOpenFor)
	}
	switch {
	case s.MinOpenFor < 0:
		add("MinOpenFor is %v: use a positive duration, or 0 for the default (%v, or OpenFor when shorter)", s.MinOpenFor, defaultMinOpenFor)
	case s.OpenFor >= 0 && s.MinOpenFor > cmp.Or(s.OpenFor, defaultOpenFor):
		add("MinOpenFor is %v, longer than OpenFor (%v): the first open period cannot be longer than the longest", s.MinOpenFor, cmp.Or(s.OpenFor, defaultOpenFor))
	}
	if s.HalfOpenProbes < 0 {
		add("HalfOpenProbes is %d: use a positive count, or 0 for the default (%d)", s.HalfOpenProbes, defaultHalfOpenProbes)
	}
	if s.AllOpenProbeEvery > 0 && s.AllOpenProbeEvery < time.Second {
		add("AllOpenProbeEvery is %v: use at least 1s (a probe a second at most during an outage), 0 for the default (%v), or a negative value to turn early probes off", s.AllOpenProbeEvery, defaultAllOpenProbeEvery)
	}
	if !(s.FailureRate >= 0 && s.FailureRate <= 1) {
		add("FailureRate is %v: use a fraction in (0, 1], e.g. 0.5, or 0 to turn the rule off", s.FailureRate)
	}
	switch {
	case s.Window < 0:
		add("Window is %v: use a duration of at least 1s, or 0 for the default (%v)", s.Window, defaultBreakerWindow)
	case s.Window > 0 && s.Window < time.Second:
		add("Window is %v: use a duration of at least 1s (a Gemini call takes about that long), or 0 for the default (%v)", s.Window, defaultBreakerWindow)
	case s.Window > 0 && s.FailureRate == 0:
		add("Window is %v but FailureRate is 0: set FailureRate to use the failure-rate rule, or leave Window 0", s.Window)
	}
	switch {
	case s.MinRequests < 0:
		add("MinRequests is %d: use a positive count, or 0 for the default (%d)", s.MinRequests, defaultBreakerMinRequests)
	case s.MinRequests > 0 && s.FailureRate == 0:
		add("MinRequests is %d but FailureRate is 0: set FailureRate to use the failure-rate rule, or leave MinRequests 0", s.MinRequests)
	}
	return errors.Join(errs...)
}

// openError is the error allow returns when it refuses a request: the
// breaker's refusal, shared by every refusal of one opening (Until is when
// the breaker turns half-open, zero when it is half-open and every probe slot
// is taken). It matches ErrCircuitOpen. One pointer wide, it is stored in an
// error without allocating.
type openError struct{ *circuit.Refusal }

func (e openError) Error() string {
	if e.Until.IsZero() {
		return "geminiguard: circuit half-open: probes in flight"
	}
	return "geminiguard: circuit open until " + e.Until.UTC().Format(time.RFC3339)
}

// Is reports ErrCircuitOpen.
func (e openError) Is(target error) bool { return target == ErrCircuitOpen }

// permit is allow's grant of one request; hand it back to done. The zero
// permit is stale: done ignores it.
type permit = circuit.Permit

// outcome is what a permitted request said about the model's health. The
// zero value is outcomeIgnore.
type outcome = circuit.Outcome

const (
	outcomeIgnore  = circuit.Ignore  // says nothing about the model: the permit is released, nothing is counted
	outcomeSuccess = circuit.Success // the model answered
	outcomeFailure = circuit.Failure // a counted failure: the model is unwell
	outcomeOutage  = circuit.Outage  // a counted failure while no model answers at all: DeadAfter does not apply
)

// outcomeOf maps a request's error and its verdict to an outcome: a nil error
// is a success, an error whose verdict Counts is a failure, and anything else
// (caller cancellation, request errors, quota answers) is ignored.
func outcomeOf(err error, v Verdict) outcome {
	switch {
	case err == nil:
		return outcomeSuccess
	case v.counts:
		return outcomeFailure
	}
	return outcomeIgnore
}

// transition reports a change of a breaker's state, made At the time passed
// to the call that made it; From and To convert to State. Each change is
// returned by exactly one call.
type transition = circuit.Transition

// lastAnswer is when something (a model, or any model of a Client) last
// answered. Safe for concurrent use once its Origin is set.
type lastAnswer = circuit.LastAnswer

// outageAfter is how long every model of a Client must have been failing,
// or refused as failing, with no answer for a failure to count as an
// outage's (Client.inOutage): the breaker then opens on FailureThreshold
// failures alone, without waiting DeadAfter, for OpenFor.
const outageAfter = 2 * time.Second

// breaker is the circuit breaker of one model and endpoint: the state
// machine of internal/circuit (circuit.Breaker, whose methods these are),
// read in State, with refusals that match ErrCircuitOpen. It is safe for
// concurrent use, reads no clock but at newBreaker, and calls no user code:
// changes are returned as transitions for the caller to report after the
// call. Create it with newBreaker; the zero value is not usable.
type breaker struct {
	s  BreakerSettings // with defaults; read-only
	sm *circuit.Breaker
}

// newBreaker returns a closed breaker. s must pass validate; zero fields take
// their defaults.
func newBreaker(s BreakerSettings) *breaker {
	s = s.withDefaults()
	return &breaker{s: s, sm: circuit.New(circuit.Settings{
		FailureThreshold: s.FailureThreshold,
		DeadAfter:        s.DeadAfter,
		OpenFor:          s.OpenFor,
		MinOpenFor:       s.MinOpenFor,
		HalfOpenProbes:   s.HalfOpenProbes,
		FailureRate:      s.FailureRate,
		Window:           s.Window,
		MinRequests:      s.MinRequests,
	}, time.Now())}
}

// allow asks to send one request at now (circuit.Breaker.Allow). It returns
// a permit to hand back to done, or an openError (matching ErrCircuitOpen)
// and no permit; closed, it neither locks nor allocates, and a refusal does
// not allocate either. The transition is nil unless this call changed the
// state (open → half-open).
func (b *breaker) allow(now time.Time) (permit, *transition, error) {
	p, tr, r := b.sm.Allow(now)
	if r != nil {
		return p, nil, openError{r}
	}
	return p, tr, nil
}

// done reports the outcome at now of a request that allow permitted, and
// returns the transition it caused, nil when none (circuit.Breaker.Done).
// Each permit must be handed back exactly once, with outcomeIgnore when the
// request said nothing about the model: a probe permit never handed back
// holds its slot for good.
func (b *breaker) done(p permit, now time.Time, o outcome) *transition {
	return b.sm.Done(p, now, o)
}

// closedSince reports whether the breaker is closed and since when
// (circuit.Breaker.ClosedSince).
func (b *breaker) closedSince() (time.Time, bool) { return b.sm.ClosedSince() }

// state returns the state at now without changing anything: an open breaker
// whose OpenFor has passed reads as half-open (circuit.Breaker.State).
func (b *breaker) state(now time.Time) State { return State(b.sm.State(now)) }

// openEarly turns an open breaker half-open at now, before its OpenFor ends,
// and returns that transition; nil unless it is open at now
// (circuit.Breaker.OpenEarly).
func (b *breaker) openEarly(now time.Time) *transition { return b.sm.OpenEarly(now) }

// refusing returns the breaker's refusal when it is open at now, nil when it
// is not (state would not say StateOpen), in one lock-free read
// (circuit.Breaker.Refusing).
func (b *breaker) refusing(now time.Time) *circuit.Refusal { return b.sm.Refusing(now) }

// openUntil returns when an open breaker turns half-open; the zero time
// unless it is open.
func (b *breaker) openUntil() time.Time { return b.sm.OpenUntil() }

// openTill opens the breaker at now until until, as another replica's did (a
// FactOpen), or extends its open period to until (circuit.Breaker.OpenTill);
// with outage, an outage's opening, which the outage's end shortens. It
// returns the transition, nil when none.
func (b *breaker) openTill(now, at, until time.Time, outage bool) *transition {
	return b.sm.OpenTill(now, at, until, outage)
}

// tripForOutage opens a closed breaker at now for OpenFor, an outage's
// opening, which the outage's end shortens (circuit.Breaker.TripForOutage).
func (b *breaker) tripForOutage(now time.Time) *transition { return b.sm.TripForOutage(now) }

// openForOutage reports whether the breaker is open at now for an outage
// (circuit.Breaker.OpenForOutage).
func (b *breaker) openForOutage(now time.Time) bool { return b.sm.OpenForOutage(now) }

// trip opens a closed breaker at now for its own open period, as its rule
// would (circuit.Breaker.Trip).
func (b *breaker) trip(now time.Time) *transition { return b.sm.Trip(now) }

// runUnlikely reports whether n failures in a row are a run the model would
// hardly make answering as it did (circuit.Breaker.RunUnlikely). It takes
// the breaker's lock.
func (b *breaker) runUnlikely(n int) bool { return b.sm.RunUnlikely(n) }

// draw returns, for a failure at now of p's request, when it was sent and
// when a later request's failure is a draw of its own after it
// (circuit.Breaker.Draw): the replica's report to its fleet.
func (b *breaker) draw(p permit, now time.Time) (sent, until time.Time) { return b.sm.Draw(p, now) }

// heardAt records that the model answered another replica of the fleet at
// t (circuit.Breaker.HeardAt).
func (b *breaker) heardAt(t, now time.Time) { b.sm.HeardAt(t, now) }

// awaitedElsewhere records until when another replica of the fleet awaits
// an answer of the model (circuit.Breaker.AwaitedElsewhere).
func (b *breaker) awaitedElsewhere(until time.Time) { b.sm.AwaitedElsewhere(until) }

// awaiting reports whether a request sent while the model was unheard may
// yet answer (circuit.Breaker.Awaiting): the throttle and the fleet's dead
// rule wait for it. It takes the breaker's lock: ask it off the fast path.
func (b *breaker) awaiting(now time.Time) bool { return b.sm.Awaiting(now) }

// awaitingUntil returns until when a request sent while the model was
// unheard is waited for, zero when none is, one about to be sent counted
// with sending (circuit.Breaker.AwaitingUntil): the replica's report to
// its fleet.
func (b *breaker) awaitingUntil(now time.Time, sending bool) time.Time {
	return b.sm.AwaitingUntil(now, sending)
}

// closeSince closes the breaker at now because another replica's probe
// proved the model healthy at since (a FactClosed), unless it is closed or
// changed state after since (circuit.Breaker.CloseSince). It returns the
// transition, nil when none.
func (b *breaker) closeSince(now, since time.Time) *transition { return b.sm.CloseSince(now, since) }
