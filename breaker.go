package geminiguard

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
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
	// successes close the breaker, a failure opens it again.
	StateHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case StateClosed:
		return "closed"
	case StateOpen:
		return "open"
	case StateHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

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

// windowBuckets is the number of slices the failure-rate window is kept in:
// it slides in steps of Window/windowBuckets (Hystrix: 10 buckets).
const windowBuckets = 10

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
	// DeadAfter; a success resets the count.
	// Default: 5.
	FailureThreshold int
	// DeadAfter is how long a model must have gone without answering, on
	// top of FailureThreshold failures in a row, for its breaker to open:
	// the breaker is for a dead model. A degraded one, failing in bursts
	// but still answering, keeps the share of traffic it can serve (see
	// the package doc's routing); a storm of 503s that lets one request in
	// seven through does not take it out of rotation. When no model of the
	// Client has answered for 2s (an outage), or the model never answered
	// since the Client started, the failures alone open it: for
	// MinOpenFor, so that a brownout present from the first request takes
	// a model that answers most of its requests out for a moment only. A
	// negative value opens on the failures alone.
	// Default: 10s.
	DeadAfter time.Duration
	// OpenFor is the longest an open breaker refuses requests before it
	// lets probes through (half-open), unless every model is open (see
	// AllOpenProbeEvery). A breaker opened from closed refuses for
	// MinOpenFor; each failed probe reopens it for twice as long as the
	// time before, up to OpenFor: a model is not taken out for much longer
	// than its bad spell lasts, and one that stays down costs a probe per
	// OpenFor once the periods reach it.
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

// openError is the error allow returns when it refuses a request. It matches
// ErrCircuitOpen. Until is when the breaker turns half-open; it is zero when
// the breaker is already half-open and every probe slot is taken (the end
// then depends on the probes). Values are never modified once made, so one
// value is shared by every refusal of one opening.
type openError struct {
	Until time.Time
	since time.Time // when the breaker opened
}

func (e *openError) Error() string {
	if e.Until.IsZero() {
		return "geminiguard: circuit half-open: probes in flight"
	}
	return "geminiguard: circuit open until " + e.Until.UTC().Format(time.RFC3339)
}

// Is reports ErrCircuitOpen.
func (e *openError) Is(target error) bool { return target == ErrCircuitOpen }

// errProbesBusy refuses a request while the breaker is half-open and every
// probe slot is taken.
var errProbesBusy = &openError{}

// permit is allow's grant of one request; hand it back to done. The zero
// permit is stale: done ignores it.
type permit struct {
	gen   uint64 // breaker generation when granted
	probe bool   // granted in half-open: it holds a probe slot
}

// outcome is what a permitted request said about the model's health. The
// zero value is outcomeIgnore.
type outcome int

const (
	outcomeIgnore  outcome = iota // says nothing about the model: the permit is released, nothing is counted
	outcomeSuccess                // the model answered
	outcomeFailure                // a counted failure: the model is unwell
	outcomeOutage                 // a counted failure while no model answers at all: DeadAfter does not apply
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
// to the call that made it. Each change is returned by exactly one call.
type transition struct {
	From, To State
	At       time.Time
}

// breakerStats is a breaker's state as read at one time.
type breakerStats struct {
	State               State
	ConsecutiveFailures int       // counted failures in a row while closed
	OpenUntil           time.Time // when an open breaker turns half-open; zero unless State is StateOpen
	ProbesInFlight      int       // half-open probes granted and not yet done
	WindowCalls         int       // successes and counted failures within Window (failure-rate rule only)
	WindowFailures      int       // counted failures within Window (failure-rate rule only)
	Trips               int       // times the breaker opened since it was made
}

// breaker is the circuit breaker of one model and endpoint: a state machine
// over the times passed in, compared with time.Time's Before only (so by the
// monotonic clock when they carry its reading, as time.Now's do: a step of
// the wall clock changes nothing), with a generation that changes on every state
// change so that outcomes of requests granted before the change are
// dropped (the two-step allow/done of sony/gobreaker). It is safe for
// concurrent use; it starts no goroutine, reads no clock and calls no user
// code: changes are returned as transitions for the caller to report after
// the call. Create it with newBreaker; the zero value is not usable.
type breaker struct {
	s BreakerSettings // with defaults; read-only

	// cur is gen<<2 | state, stored under mu on every change, so that allow
	// grants closed-state permits without taking mu.
	cur atomic.Uint64
	// answered is when the model last answered, set without mu on every
	// success.
	answered lastAnswer
	// consecutive counts the counted failures in a row while closed. A
	// success resets it without mu (the closed fast path of done); failures
	// add to it under mu.
	consecutive atomic.Int64
	// open is, while open, the end of the open period (Until) and what
	// allow returns; nil otherwise. Stored under mu before cur on every
	// change; state reads it without mu.
	open atomic.Pointer[openError]

	mu        sync.Mutex // guards the fields below (and writes to cur and open)
	changed   time.Time  // when the state last changed; zero: never
	probes    int        // probes in flight, half-open
	successes int        // probe successes, half-open
	trips     int        // times opened
	reopens   int        // failed probes since the breaker last closed: the open period doubles with each
	window    rateWindow // completed calls, closed, when FailureRate > 0
}

// newBreaker returns a closed breaker. s must pass validate; zero fields take
// their defaults.
func newBreaker(s BreakerSettings) *breaker {
	b := &breaker{s: s.withDefaults()}
	b.answered.origin = time.Now()
	b.window.span = b.s.Window / windowBuckets
	b.cur.Store(1<<2 | uint64(StateClosed)) // generation 1: the zero permit is stale
	return b
}

// allow asks to send one request at now. It returns a permit to hand back to
// done, or an error that matches ErrCircuitOpen (an *openError, shared and
// not to be modified) and no permit.
//
// Closed, it grants at once, without taking the lock or allocating. Open, it
// refuses until OpenFor has passed since the breaker opened; the first call
// at or after that moves the breaker to half-open, returns that transition
// and grants the first probe. Half-open, it grants a probe while fewer than
// HalfOpenProbes are in flight and refuses otherwise. The transition is nil
// unless this call changed the state.
func (b *breaker) allow(now time.Time) (permit, *transition, error) {
	if c := b.cur.Load(); State(c&3) == StateClosed {
		return permit{gen: c >> 2}, nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var tr *transition
	gen, st := b.load()
	switch st {
	case StateClosed: // closed since the load above
		return permit{gen: gen}, nil, nil
	case StateOpen:
		if r := b.open.Load(); now.Before(r.Until) {
			return permit{}, nil, r
		}
		tr = b.setState(StateHalfOpen, now)
		gen, _ = b.load()
	}
	if b.probes >= b.s.HalfOpenProbes {
		return permit{}, nil, errProbesBusy
	}
	b.probes++
	return permit{gen: gen, probe: true}, tr, nil
}

// done reports the outcome at now of a request that allow permitted, and
// returns the transition it caused, nil when none. Each permit must be
// handed back exactly once, with outcomeIgnore when the request said nothing
// about the model (the caller gave up, the stream was abandoned): a probe
// permit never handed back holds its slot for good, and a half-open breaker
// whose slots are all held refuses every request. A permit from an older
// generation (the state changed since allow granted it) changes nothing.
//
// Closed: a success resets the consecutive failures; a failure that makes
// FailureThreshold in a row when the model has answered nothing for
// DeadAfter, or brings the failure rate over Window to FailureRate, opens
// the breaker for MinOpenFor. Half-open: the probe's slot is freed;
// HalfOpenProbes successes close the breaker (every count starts again); a
// failure opens it again for twice the previous open period, up to
// OpenFor. An outage's failure (no model answers: the Client's early probes
// find its end, AllOpenProbeEvery) opens it for OpenFor at once.
// outcomeIgnore only frees the slot.
func (b *breaker) done(p permit, now time.Time, o outcome) *transition {
	if o == outcomeSuccess {
		b.answered.saw(now)
	}
	if !p.probe && o == outcomeSuccess && b.s.FailureRate == 0 {
		// Closed-state success: only the failure count changes. A stale
		// permit resetting the count of a newer generation is harmless: a
		// new generation starts with a zero count anyway.
		if b.consecutive.Load() != 0 {
			b.consecutive.Store(0)
		}
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if gen, _ := b.load(); p.gen != gen {
		return nil
	}
	if p.probe {
		b.probes--
		switch o {
		case outcomeSuccess:
			if b.successes++; b.successes >= b.s.HalfOpenProbes {
				return b.setState(StateClosed, now)
			}
		case outcomeFailure:
			return b.setState(StateOpen, now)
		case outcomeOutage:
			return b.setStateUntil(StateOpen, now, now.Add(b.s.OpenFor))
		}
		return nil
	}
	switch o {
	case outcomeSuccess:
		b.consecutive.Store(0)
		if b.s.FailureRate > 0 {
			b.window.record(now, false)
		}
	case outcomeFailure, outcomeOutage:
		if b.consecutive.Add(1) >= int64(b.s.FailureThreshold) {
			switch {
			case o == outcomeOutage:
				return b.setStateUntil(StateOpen, now, now.Add(b.s.OpenFor))
			case b.silentFor(now):
				return b.setState(StateOpen, now)
			}
		}
		if b.s.FailureRate > 0 {
			b.window.record(now, true)
			calls, failures := b.window.totals(now)
			if calls >= b.s.MinRequests && float64(failures) >= b.s.FailureRate*float64(calls) {
				return b.setState(StateOpen, now)
			}
		}
	}
	return nil
}

// outageAfter is how long every model of a Client must have answered
// nothing for a failure to count as an outage's: the breaker then opens on
// FailureThreshold failures alone, without waiting DeadAfter.
const outageAfter = 2 * time.Second

// lastAnswer is when something (a model, or any model of a Client) last
// answered, as time since origin, which may be negative for a time passed
// in from before it. Safe for concurrent use once origin is set.
type lastAnswer struct {
	origin time.Time
	at     atomic.Int64 // the last answer, since origin
	seen   atomic.Bool  // an answer came since origin
}

// saw records an answer at now.
func (l *lastAnswer) saw(now time.Time) {
	l.at.Store(int64(now.Sub(l.origin)))
	l.seen.Store(true)
}

// silentFor reports whether no answer came in the d before now (when none
// ever came: whether d has passed since origin).
func (l *lastAnswer) silentFor(now time.Time, d time.Duration) bool {
	var last time.Duration
	if l.seen.Load() {
		last = time.Duration(l.at.Load())
	}
	return now.Sub(l.origin)-last >= d
}

// never reports whether no answer came since origin.
func (l *lastAnswer) never() bool {
	return !l.seen.Load()
}

// silentFor reports whether the model has answered nothing for DeadAfter
// before now (or never did), or DeadAfter is negative.
func (b *breaker) silentFor(now time.Time) bool {
	return b.s.DeadAfter < 0 || b.answered.never() || b.answered.silentFor(now, b.s.DeadAfter)
}

// openEarly ends an open breaker's open period at now, as if OpenFor had
// passed: it turns half-open, so that the next allow grants a probe, and
// returns that transition. It does nothing and returns nil unless the
// breaker is open at now.
func (b *breaker) openEarly(now time.Time) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stateAt(now) != StateOpen {
		return nil
	}
	return b.setState(StateHalfOpen, now)
}

// openUntil returns when an open breaker turns half-open, read without the
// lock; the zero time unless the breaker is open.
func (b *breaker) openUntil() time.Time {
	if r := b.open.Load(); r != nil {
		return r.Until
	}
	return time.Time{}
}

// openSince returns when an open breaker opened, read without the lock; the
// zero time unless the breaker is open.
func (b *breaker) openSince() time.Time {
	if r := b.open.Load(); r != nil {
		return r.since
	}
	return time.Time{}
}

// state returns the state at now without changing anything: an open breaker
// whose OpenFor has passed reads as half-open, which is what the next allow
// will make it (and report). Safe for concurrent use.
func (b *breaker) state(now time.Time) State {
	switch st := State(b.cur.Load() & 3); st {
	case StateClosed:
		return StateClosed
	case StateOpen:
		if r := b.open.Load(); r != nil && now.Before(r.Until) {
			return StateOpen
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateAt(now)
}

// snapshot returns the breaker's counters at now, read as state does,
// without changing anything.
func (b *breaker) snapshot(now time.Time) breakerStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := breakerStats{
		State:               b.stateAt(now),
		ConsecutiveFailures: int(b.consecutive.Load()),
		ProbesInFlight:      b.probes,
		Trips:               b.trips,
	}
	if st.State == StateOpen {
		st.OpenUntil = b.open.Load().Until
	}
	if b.s.FailureRate > 0 {
		st.WindowCalls, st.WindowFailures = b.window.totals(now)
	}
	return st
}

// load returns the generation and the state. Callers hold mu.
func (b *breaker) load() (uint64, State) {
	c := b.cur.Load()
	return c >> 2, State(c & 3)
}

// stateAt is state's reading; callers hold mu.
func (b *breaker) stateAt(now time.Time) State {
	_, st := b.load()
	if st == StateOpen && !now.Before(b.open.Load().Until) {
		return StateHalfOpen
	}
	return st
}

// setState moves the breaker to a different state at now, starts a new
// generation with fresh counts, and returns the transition. Open, it stays
// open for openPeriod. Callers hold mu.
func (b *breaker) setState(to State, now time.Time) *transition {
	var until time.Time
	if to == StateOpen {
		if _, from := b.load(); from == StateHalfOpen {
			b.reopens++ // a failed probe: this period is longer than the last
		}
		until = now.Add(b.openPeriod())
	}
	return b.setStateUntil(to, now, until)
}

// openPeriod returns how long the breaker stays open when it opens now:
// MinOpenFor from closed, doubled for each failed probe since, up to
// OpenFor. Callers hold mu.
func (b *breaker) openPeriod() time.Duration {
	d := b.s.MinOpenFor
	for range b.reopens {
		if d >= b.s.OpenFor/2 {
			return b.s.OpenFor
		}
		d *= 2
	}
	return min(d, b.s.OpenFor)
}

// setStateUntil is setState with the end of an open period given. Callers
// hold mu.
func (b *breaker) setStateUntil(to State, now, until time.Time) *transition {
	gen, from := b.load()
	b.consecutive.Store(0)
	b.probes, b.successes = 0, 0
	b.window.reset()
	var open *openError
	switch to {
	case StateOpen:
		b.trips++
		open = &openError{Until: until, since: now}
	case StateClosed:
		b.reopens = 0
	}
	b.changed = now
	b.open.Store(open)
	b.cur.Store((gen+1)<<2 | uint64(to))
	return &transition{From: from, To: to, At: now}
}

// openTill opens the breaker at now until until, as another replica's did
// (a FactOpen): an open breaker's open period is extended to until, without
// a transition. It does nothing when until is not after now or the breaker
// is open at least that long already. It returns the transition, nil when
// none.
func (b *breaker) openTill(now, until time.Time) *transition {
	if !until.After(now) {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stateAt(now) == StateOpen {
		if r := b.open.Load(); r.Until.Before(until) {
			b.open.Store(&openError{Until: until, since: r.since})
		}
		return nil
	}
	return b.setStateUntil(StateOpen, now, until)
}

// closeSince closes the breaker at now because a probe proved the model
// healthy at since (another replica's: a FactClosed), unless the breaker is
// closed or changed state after since (it then knows better). It returns
// the transition, nil when none.
func (b *breaker) closeSince(now, since time.Time) *transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, st := b.load(); st == StateClosed || b.changed.After(since) {
		return nil
	}
	return b.setState(StateClosed, now)
}

// rateWindow counts the calls completed over the last windowBuckets spans in
// a fixed ring, so recording never allocates. A bucket is identified by its
// epoch: the number of spans since origin, the first time recorded.
type rateWindow struct {
	span    time.Duration // Window / windowBuckets
	origin  time.Time     // zero until the first record
	head    int64         // newest epoch recorded
	buckets [windowBuckets]rateBucket
}

type rateBucket struct {
	epoch           int64
	calls, failures int
}

// record counts one completed call at now. A now older than the newest
// record (callers read the clock before taking the lock, so records can
// arrive slightly out of order) counts in the newest bucket.
func (w *rateWindow) record(now time.Time, failed bool) {
	if w.origin.IsZero() {
		w.origin = now
	}
	e := w.epoch(now)
	w.head = e
	bk := &w.buckets[e%windowBuckets]
	if bk.epoch != e {
		*bk = rateBucket{epoch: e}
	}
	bk.calls++
	if failed {
		bk.failures++
	}
}

// totals returns the calls and failures recorded within the window that ends
// at now.
func (w *rateWindow) totals(now time.Time) (calls, failures int) {
	if w.origin.IsZero() {
		return 0, 0
	}
	e := w.epoch(now)
	for _, bk := range w.buckets {
		if bk.epoch > e-windowBuckets {
			calls += bk.calls
			failures += bk.failures
		}
	}
	return calls, failures
}

// epoch returns the bucket epoch of now, never older than head.
func (w *rateWindow) epoch(now time.Time) int64 {
	return max(int64(now.Sub(w.origin)/w.span), w.head)
}

// reset forgets every call.
func (w *rateWindow) reset() {
	*w = rateWindow{span: w.span}
}
