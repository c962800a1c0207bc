// Package circuit holds the circuit breaker's state machine: Breaker, one
// model's and endpoint's breaker (closed, open, half-open), with the two-step
// Allow/Done of sony/gobreaker and a generation that drops the outcomes of
// requests granted before a state change. Every method takes the time as an
// argument (now), reads no other clock, starts no goroutine and calls no
// user code: state changes are returned as Transitions for the caller to
// report. What a request's error means for the breaker (its Outcome), the
// error a refusal becomes, the settings' defaults and their validation are
// the root package's (breaker.go).
package circuit

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geminiguard/geminiguard/internal/window"
)

// State is the state of a breaker. The zero value is Closed.
type State int

const (
	// Closed: requests flow; counted failures are tallied.
	Closed State = iota
	// Open: requests are refused until the open period has passed
	// (MinOpenFor, doubled on each failed probe, up to OpenFor).
	Open
	// HalfOpen: up to HalfOpenProbes trial requests are let through; their
	// successes close the breaker, a failure opens it again.
	HalfOpen
)

// String returns "closed", "open" or "half-open".
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// windowBuckets is the number of slices the failure-rate window is kept in:
// it slides in steps of Window/windowBuckets (Hystrix: 10 buckets).
const windowBuckets = 10

// Settings configures a Breaker; the root's BreakerSettings documents each
// field. New applies no defaults: every field is as BreakerSettings'
// withDefaults leaves it (FailureThreshold, OpenFor, MinOpenFor and
// HalfOpenProbes positive, MinOpenFor at most OpenFor; Window at least 1s
// when FailureRate is above 0). A negative DeadAfter opens on the failures
// alone. It is a plain value.
type Settings struct {
	FailureThreshold int           // consecutive counted failures that open a closed breaker (with DeadAfter)
	DeadAfter        time.Duration // silence that, with the failures, makes a model dead
	OpenFor          time.Duration // the longest open period
	MinOpenFor       time.Duration // the open period of a breaker opened from closed
	HalfOpenProbes   int           // probes in flight in half-open, and successes that close it
	FailureRate      float64       // failure fraction over Window that opens a closed breaker; 0: off
	Window           time.Duration // the failure rate's span (FailureRate > 0)
	MinRequests      int           // calls within Window below which the rate is not judged (FailureRate > 0)
}

// Refusal is what Allow returns when it refuses a request. Until is when the
// breaker turns half-open; it is zero when the breaker is already half-open
// and every probe slot is taken (the end then depends on the probes).
// Values are never modified once made, so one value is shared by every
// refusal of one opening.
type Refusal struct {
	Until  time.Time
	since  time.Time // when the breaker opened
	outage bool      // an outage's failure opened it (Outage): OutageOver may shorten it
}

// probesBusy refuses a request while the breaker is half-open and every
// probe slot is taken.
var probesBusy = &Refusal{}

// Permit is Allow's grant of one request; hand it back to Done. The zero
// Permit is stale: Done ignores it.
type Permit struct {
	gen   uint64 // breaker generation when granted
	seq   uint64 // its place among the permits granted while the model was unheard (Breaker.early); 0: not one
	probe bool   // granted in half-open: it holds a probe slot
	sent  int64  // when granted, since the breaker's origin
}

// Probe reports whether p was granted in half-open: it holds a probe slot.
func (p Permit) Probe() bool { return p.probe }

// Early reports whether p was granted while the model was unheard: its
// request is awaited while in flight (Awaiting).
func (p Permit) Early() bool { return p.seq != 0 }

// Outcome is what a permitted request said about the model's health. The
// zero value is Ignore.
type Outcome int

const (
	Ignore  Outcome = iota // says nothing about the model: the permit is released, nothing is counted
	Success                // the model answered
	Failure                // a counted failure: the model is unwell
	Outage                 // a counted failure while no model answers at all: DeadAfter does not apply
)

// Transition reports a change of a breaker's state, made At the time passed
// to the call that made it. Each change is returned by exactly one call.
type Transition struct {
	From, To State
	At       time.Time
}

// Stats is a breaker's state as read at one time.
type Stats struct {
	State               State
	ConsecutiveFailures int       // counted failures in a row while closed
	OpenUntil           time.Time // when an open breaker turns half-open; zero unless State is Open
	ProbesInFlight      int       // half-open probes granted and not yet done
	WindowCalls         int       // successes and counted failures within Window (failure-rate rule only)
	WindowFailures      int       // counted failures within Window (failure-rate rule only)
	Trips               int       // times the breaker opened since it was made
}

// Breaker is the circuit breaker of one model and endpoint: a state machine
// over the times passed in, compared with time.Time's Before only (so by the
// monotonic clock when they carry its reading, as time.Now's do: a step of
// the wall clock changes nothing), with a generation that changes on every state
// change so that outcomes of requests granted before the change are
// dropped (the two-step allow/done of sony/gobreaker). It is safe for
// concurrent use; it starts no goroutine, reads no clock and calls no user
// code: changes are returned as transitions for the caller to report after
// the call. Create it with New; the zero value is not usable.
type Breaker struct {
	s Settings // read-only

	// cur is gen<<2 | state, stored under mu on every change, so that Allow
	// grants closed-state permits without taking mu.
	cur atomic.Uint64
	// answered is when the model last answered, set without mu on every
	// success.
	answered LastAnswer
	// answers counts the model's answers in its record of recent outcomes
	// (with failures, under mu: see record), added to without mu on every
	// success.
	answers atomic.Int64
	// consecutive counts the counted failures in a row while closed. A
	// success resets it without mu (the closed fast path of Done); failures
	// add to it under mu.
	consecutive atomic.Int64
	// open is, while open, the end of the open period (Until) and what
	// Allow returns; nil otherwise. Stored under mu before cur on every
	// change; State reads it without mu.
	open atomic.Pointer[Refusal]
	// elsewhere is, since the origin, until when another breaker of the
	// model (a fleet's other replica) awaits the answer of a request it
	// sent while the model was unheard (AwaitedElsewhere); 0: none.
	elsewhere atomic.Int64

	mu        sync.Mutex // guards the fields below (and writes to cur and open)
	changed   time.Time  // when the state last changed; zero: never
	probes    int        // probes in flight, half-open
	door      bool       // half-open after a silence: every call is a probe until the first comes back (Allow)
	successes int        // probe successes, half-open
	trips     int        // times opened
	reopens   int        // failed probes since the breaker last closed: the open period doubles with each
	failing   time.Time  // when the latest run of consecutive failures began (set by the one that makes it 1)
	failures  int64      // counted failures in the record of recent outcomes (with answers)
	draws     int64      // the latest run's failures that are draws of their own (see Done)
	drawNext  int64      // since the origin: a failure of the run whose request was sent from then on is a draw
	before    outcomes   // the record when the latest run of consecutive failures began: how often the model answered then
	seen      uint64     // early's latest grant when that failure, or the first after half of DeadAfter without one, came back: the requests sent before the model's first word (dead)
	failed    time.Time  // the latest counted failure, closed
	early     grants     // closed-state permits granted while the model was unheard (never answered, or nothing for DeadAfter), in flight
	window    rateWindow // completed calls, closed, when FailureRate > 0
}

// New returns a closed breaker made at now, whose model has not answered
// yet. s must be as Settings says.
func New(s Settings, now time.Time) *Breaker {
	b := &Breaker{s: s}
	b.answered.Origin = now
	b.window.span = b.s.Window / windowBuckets
	b.cur.Store(1<<2 | uint64(Closed)) // generation 1: the zero permit is stale
	return b
}

// Allow asks to send one request at now. It returns a permit to hand back to
// Done, or a *Refusal (shared and not to be modified) and no permit.
//
// Closed, it grants at once, without taking the lock or allocating while
// the model is heard from (while it is unheard, the grant is tracked under
// the lock until handed back, for dead). Open, it
// refuses until OpenFor has passed since the breaker opened; the first call
// at or after that moves the breaker to half-open, returns that transition
// and grants the first probe. Half-open, it grants a probe while fewer than
// HalfOpenProbes are in flight and refuses otherwise, but for its door: a
// breaker that opened from closed (no failed probe since) on a model that
// has answered, and that nobody asked for longer than it was open once its
// open period ended, knows nothing newer than the run that opened it, so
// it grants every call a probe, as a closed breaker would, until the first
// probe comes back (any outcome). Calls that come together after a silence
// (a wave of users) then meet the model together instead of one of them
// alone; were the model hanging, each waits its learned cut, once per
// opening. A model that never answered has no learned cut to bound that
// wait: it gets no door. The transition is nil unless this call changed
// the state.
func (b *Breaker) Allow(now time.Time) (Permit, *Transition, *Refusal) {
	if c := b.cur.Load(); State(c&3) == Closed && !b.unheard(now) {
		return Permit{gen: c >> 2, sent: b.since(now)}, nil, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var tr *Transition
	gen, st := b.load()
	switch st {
	case Closed: // closed since the load above, or the model is unheard
		p := Permit{gen: gen, sent: b.since(now)}
		if b.unheard(now) {
			p.seq = b.early.add(now)
		}
		return p, nil, nil
	case Open:
		r := b.open.Load()
		if now.Before(r.Until) {
			return Permit{}, nil, r
		}
		tr = b.setState(HalfOpen, now)
		gen, _ = b.load()
		b.door = b.reopens == 0 && !b.answered.never() && now.Sub(r.Until) > r.Until.Sub(r.since)
	}
	if b.probes >= b.s.HalfOpenProbes && !b.door {
		return Permit{}, nil, probesBusy
	}
	b.probes++
	return Permit{gen: gen, probe: true, sent: b.since(now)}, tr, nil
}

// since returns t as nanoseconds since the breaker's origin: a permit's
// sending, kept in an int64.
func (b *Breaker) since(t time.Time) int64 { return int64(t.Sub(b.answered.Origin)) }

// drawUntil returns, for a failure at now (since the origin) of a request
// sent at sent, when a later request's failure is a draw of its own (Done):
// once this one came back, or DeadAfter/FailureThreshold after it was sent,
// whichever is sooner.
func (b *Breaker) drawUntil(sent int64, now time.Time) int64 {
	return sent + min(b.since(now)-sent, int64(b.s.DeadAfter)/int64(b.s.FailureThreshold))
}

// Draw returns, for a failure at now of p's request, when that request was
// sent and when a later request's failure is a draw of its own after it, as
// Done counts a run in draws: what a fleet's replica reports, so that the
// fleet counts the requests its replicas sent together once.
func (b *Breaker) Draw(p Permit, now time.Time) (sent, until time.Time) {
	return b.answered.Origin.Add(time.Duration(p.sent)), b.answered.Origin.Add(time.Duration(b.drawUntil(p.sent, now)))
}

// Done reports the outcome at now of a request that Allow permitted, and
// returns the transition it caused, nil when none. Each permit must be
// handed back exactly once, with Ignore when the request said nothing
// about the model (the caller gave up, the stream was abandoned): a probe
// permit never handed back holds its slot for good, and a half-open breaker
// whose slots are all held refuses every request. A permit from an older
// generation (the state changed since Allow granted it) changes nothing.
//
// A run of failures in a row is counted in draws too, for dead: a failure
// is a draw of its own when its request was sent once the run's latest
// draw came back, or DeadAfter/FailureThreshold after that draw's request
// was sent, whichever is sooner. Requests sent together meet the model in
// the same moment, and a model whose failures come in spells fails them
// together: twelve users who call at once every ten seconds, meeting two
// bad spells in a row, are 24 failures in a row but two draws. (The
// second bound keeps a hung model's run, whose failures come back at the
// attempt timeout, counting as its requests are sent.)
//
// Closed: a success resets the consecutive failures; a failure that makes
// FailureThreshold in a row, the first of them half of DeadAfter ago or more,
// when the model has answered nothing for DeadAfter, or brings the failure rate
// over Window to FailureRate, opens the breaker for MinOpenFor. Half-open: the
// probe's slot is freed; HalfOpenProbes successes close the breaker (every
// count starts again); a failure opens it again for twice the previous open
// period, up to OpenFor. An outage's failure (no model answers: the Client's
// early probes find its end, AllOpenProbeEvery) opens it for OpenFor at once.
// Ignore only frees the slot.
func (b *Breaker) Done(p Permit, now time.Time, o Outcome) *Transition {
	if o == Success {
		b.answered.Saw(now)
		b.answers.Add(1)
	}
	if !p.probe && p.seq == 0 && o == Success && b.s.FailureRate == 0 {
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
	if p.seq != 0 {
		b.early.end(p.seq) // whatever the generation: it is no longer in flight
	}
	before := b.record() // without this outcome: for a run of failures that it starts
	if o == Failure {    // whatever the generation, as answers are; an outage's failures say nothing of how flaky the model is
		b.failures++
	}
	if gen, _ := b.load(); p.gen != gen {
		return nil
	}
	if p.probe {
		b.probes--
		b.door = false
		switch o {
		case Success:
			if b.successes++; b.successes >= b.s.HalfOpenProbes {
				return b.setState(Closed, now)
			}
		case Failure:
			return b.setState(Open, now)
		case Outage:
			return b.openForOutage(now)
		}
		return nil
	}
	switch o {
	case Success:
		b.consecutive.Store(0)
		if b.s.FailureRate > 0 {
			b.window.record(now, false)
		}
	case Failure, Outage:
		n := b.consecutive.Add(1)
		if n == 1 {
			b.failing = now
			b.before = before
			b.draws, b.drawNext = 0, p.sent
		}
		if p.sent >= b.drawNext {
			b.draws++
			b.drawNext = b.drawUntil(p.sent, now)
		}
		if n == 1 || 2*now.Sub(b.failed) > b.s.DeadAfter {
			b.seen = b.early.next // the model's first word since a quiet spell: wait for what was sent before it
		}
		b.failed = now
		if n >= int64(b.s.FailureThreshold) {
			switch {
			case o == Outage:
				return b.openForOutage(now)
			case b.dead(now, p):
				return b.setState(Open, now)
			}
		}
		if b.s.FailureRate > 0 {
			b.window.record(now, true)
			calls, failures := b.window.totals(now)
			if calls >= b.s.MinRequests && float64(failures) >= b.s.FailureRate*float64(calls) {
				return b.setState(Open, now)
			}
		}
	}
	return nil
}

// LastAnswer is when something (a model, or any model of a Client) last
// answered, as time since Origin, which may be negative for a time passed
// in from before it. Safe for concurrent use once Origin is set.
type LastAnswer struct {
	Origin time.Time
	at     atomic.Int64 // the last answer, since Origin
	seen   atomic.Bool  // an answer came since Origin
}

// Saw records an answer at now.
func (l *LastAnswer) Saw(now time.Time) {
	l.at.Store(int64(now.Sub(l.Origin)))
	l.seen.Store(true)
}

// SawBy records an answer at t unless a later one is recorded already.
func (l *LastAnswer) SawBy(t time.Time) {
	v := int64(t.Sub(l.Origin))
	for {
		cur := l.at.Load()
		if l.seen.Load() && cur >= v {
			return
		}
		if l.at.CompareAndSwap(cur, v) {
			l.seen.Store(true)
			return
		}
	}
}

// SilentFor reports whether no answer came in the d before now (when none
// ever came: whether d has passed since Origin).
func (l *LastAnswer) SilentFor(now time.Time, d time.Duration) bool {
	return l.SilentAt(now.Sub(l.Origin), d)
}

// SilentAt is SilentFor at the time at since Origin, for a caller that has
// it already.
func (l *LastAnswer) SilentAt(at, d time.Duration) bool {
	return l.silenceAt(at) >= d
}

// Silence returns how long no answer has come before now: since the last
// answer, or since Origin when none came.
func (l *LastAnswer) Silence(now time.Time) time.Duration {
	return l.silenceAt(now.Sub(l.Origin))
}

// silenceAt is Silence at the time at since Origin.
func (l *LastAnswer) silenceAt(at time.Duration) time.Duration {
	if l.seen.Load() {
		at -= time.Duration(l.at.Load())
	}
	return at
}

// never reports whether no answer came since Origin.
func (l *LastAnswer) never() bool {
	return !l.seen.Load()
}

// dead reports whether FailureThreshold failures in a row, the latest
// p's at now, make the model dead: DeadAfter is negative; or no request
// is still in flight that was granted within DeadAfter before now while
// the model was unheard (unheard), before p or before the first of those
// failures came back (or the first after half of DeadAfter without one:
// the model's first word to a burst after a quiet spell), and the model
// never answered, or has answered nothing for DeadAfter before now, the
// failures in a row began half of DeadAfter ago or more, and they are a
// run it would hardly make answering as it did before (unlikelyRun),
// counted in draws (Done: requests sent together are one). A
// model's fast failures come back before its slow answers: the first
// requests of a model that answers most of them but fails its first few
// fast are not all in yet (whichever of a burst's requests were granted
// first), and a burst of calls after a quiet spell finds the model silent
// for as long as nothing asked it, its answers to the burst on their way.
// A request in flight for longer than DeadAfter is not waited for.
// Callers hold mu.
func (b *Breaker) dead(now time.Time, p Permit) bool {
	if b.s.DeadAfter < 0 {
		return true
	}
	if b.early.pending(max(p.seq, b.seen+1), now.Add(-b.s.DeadAfter)) || b.awaitedElsewhere(now) {
		return false
	}
	return b.answered.never() || b.answered.SilentFor(now, b.s.DeadAfter) && 2*now.Sub(b.failing) >= b.s.DeadAfter &&
		b.before.unlikelyRun(b.draws)
}

// outcomes are a model's answers and counted failures over its latest
// recentOutcomes to twice as many: a record kept in counts, not time, so
// that it says as much of a model asked once a minute as of one asked a
// hundred times a second.
type outcomes struct{ answers, failures int64 }

// recentOutcomes is about how many of a model's latest outcomes its record
// keeps: enough to tell a model that answers a fifth of its requests from
// one that answers half, few enough to follow a change within minutes.
const recentOutcomes = 64

// record returns the model's record of recent outcomes, first scaled down
// to recentOutcomes when it holds more than twice as many (so that it is
// scaled once in recentOutcomes outcomes or more, and the rounding down of
// a scaling does not wear a small count away). An answer added while it
// scales may be lost: the record is an estimate. Callers hold mu.
func (b *Breaker) record() outcomes {
	o := outcomes{b.answers.Load(), b.failures}
	if all := o.answers + o.failures; all > 2*recentOutcomes {
		o = outcomes{o.answers * recentOutcomes / all, o.failures * recentOutcomes / all}
		b.answers.Store(o.answers)
		b.failures = o.failures
	}
	return o
}

// deadRunChance is how unlikely a run of failures must be, for a model that
// answers as it did before the run began, for the run to make it dead. A
// model answering a third of its requests starts a run at one request in
// five or so: at 1% (dead after 12 failures in a row), one user's flaky
// primary in the brownout family (2000031) was opened by such runs every
// few minutes; at 0.1% (17), a model that dies is opened later by as many
// failures, each of them fast.
const deadRunChance = 0.001

// unlikelyRun reports whether n failures in a row are less likely than
// deadRunChance from a model that answers as often as o says (Laplace's
// estimate, (answers+1)/(all+2), so that a short record says little): a
// model that answered every request before the run is dead after
// FailureThreshold failures, one that answered two in three after seven,
// one that answered a fifth after about thirty. Such a run says that the
// model changed, not that it is as flaky as it was.
func (o outcomes) unlikelyRun(n int64) bool {
	fails := float64(o.failures+1) / float64(o.answers+o.failures+2)
	return math.Pow(fails, float64(n)) < deadRunChance
}

// RunUnlikely reports whether n failures in a row are a run that the model
// would hardly make answering as it did before it (unlikelyRun): before
// the run of failures in a row it is in, or now when it is in none. A
// fleet's replica asks it of the fleet's run, of which it saw a part.
func (b *Breaker) RunUnlikely(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	o := b.before
	if b.consecutive.Load() == 0 {
		o = b.record()
	}
	return o.unlikelyRun(int64(n))
}

// HeardAt records that the model answered at t, no later than now,
// elsewhere: a fleet's other replica (the fleet's latest answer). The rules
// for a model that never answered, or answered nothing for DeadAfter, read
// it as an answer of its own (one process hears every answer); the record
// of outcomes, and with it the run a model would hardly make, stays this
// breaker's own.
func (b *Breaker) HeardAt(t, now time.Time) {
	if t.After(now) {
		t = now
	}
	b.answered.SawBy(t)
}

// Awaiting reports whether a request granted while the model was unheard
// (never answered, or nothing for DeadAfter), within DeadAfter before now,
// is still in flight: its answer may be on its way. A fleet's replica asks
// it before it takes the model for dead on the fleet's failures, whose
// first it did not see come back.
func (b *Breaker) Awaiting(now time.Time) bool {
	return now.Before(b.AwaitingUntil(now, false))
}

// AwaitedElsewhere records until when another breaker of the model (a
// fleet's other replica) awaits the answer of a request it sent while the
// model was unheard (zero: none): until then, failures do not make the
// model dead, as its own requests in flight would not (dead).
func (b *Breaker) AwaitedElsewhere(until time.Time) {
	var v int64
	if !until.IsZero() {
		v = int64(until.Sub(b.answered.Origin))
	}
	b.elsewhere.Store(v)
}

// awaitedElsewhere reports whether another breaker of the model awaits an
// answer at now (AwaitedElsewhere).
func (b *Breaker) awaitedElsewhere(now time.Time) bool {
	e := b.elsewhere.Load()
	return e != 0 && int64(now.Sub(b.answered.Origin)) < e
}

// AwaitingUntil returns until when a request granted while the model was
// unheard, within DeadAfter before now and still in flight, is waited for
// (the latest such grant plus DeadAfter); zero when none is (Awaiting).
// With sending, a request about to be granted at now counts too when the
// model is unheard and the breaker closed. A fleet's replica reports it
// (sending: on the round trip that leases requests it is about to send),
// so that the others wait for its answers as one process waits for all
// of its own.
func (b *Breaker) AwaitingUntil(now time.Time, sending bool) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	var latest time.Time
	for _, at := range b.early.busy { // zero once ended
		if at.After(latest) {
			latest = at
		}
	}
	if _, st := b.load(); sending && st == Closed && b.unheard(now) {
		latest = now
	}
	if b.s.DeadAfter < 0 || !latest.After(now.Add(-b.s.DeadAfter)) {
		return time.Time{}
	}
	return latest.Add(b.s.DeadAfter)
}

// unheard reports whether the model had, at now, never answered, or
// answered nothing for DeadAfter: whether a request granted then is
// tracked while in flight (early), for dead to wait for its answer.
func (b *Breaker) unheard(now time.Time) bool {
	return b.answered.never() || b.s.DeadAfter > 0 && b.answered.SilentFor(now, b.s.DeadAfter)
}

// grants are the closed-state permits granted while the model was
// unheard, in the order granted, while any of them is in flight. The zero
// value has granted none.
type grants struct {
	next uint64      // the seq of the latest grant; seqs start at 1
	base uint64      // the seq of busy[0], the oldest in flight
	busy []time.Time // busy[i]: when the grant base+i was granted, zero once it ended; busy[0] is in flight, when any is
}

// add counts a grant at now in flight and returns its seq.
func (g *grants) add(now time.Time) uint64 {
	g.next++
	if len(g.busy) == 0 {
		g.base = g.next
	}
	g.busy = append(g.busy, now)
	return g.next
}

// end counts the end of grant seq; a grant ended before (a permit handed
// back twice) changes nothing.
func (g *grants) end(seq uint64) {
	if seq < g.base || seq-g.base >= uint64(len(g.busy)) {
		return
	}
	g.busy[seq-g.base] = time.Time{}
	n := 0
	for n < len(g.busy) && g.busy[n].IsZero() {
		n++
	}
	g.base += uint64(n)
	if g.busy = g.busy[n:]; len(g.busy) == 0 {
		g.busy = nil // nothing is in flight: hold no memory
	}
}

// pending reports whether a grant older than seq, granted after since, is
// in flight.
func (g *grants) pending(seq uint64, since time.Time) bool {
	for i, at := range g.busy {
		if g.base+uint64(i) >= seq {
			break
		}
		if at.After(since) {
			return true
		}
	}
	return false
}

// OpenEarly ends an open breaker's open period at now, as if OpenFor had
// passed: it turns half-open, so that the next Allow grants a probe, and
// returns that transition. It does nothing and returns nil unless the
// breaker is open at now.
func (b *Breaker) OpenEarly(now time.Time) *Transition {
	return b.moveFrom(Open, HalfOpen, now)
}

// moveFrom moves the breaker from from to to at now (setState), and returns
// that transition; it does nothing and returns nil unless it is in from at
// now.
func (b *Breaker) moveFrom(from, to State, now time.Time) *Transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stateAt(now) != from {
		return nil
	}
	return b.setState(to, now)
}

// OpenUntil returns when an open breaker turns half-open, read without the
// lock; the zero time unless the breaker is open.
func (b *Breaker) OpenUntil() time.Time {
	if r := b.open.Load(); r != nil {
		return r.Until
	}
	return time.Time{}
}

// OpenSince returns when an open breaker opened, read without the lock; the
// zero time unless the breaker is open.
func (b *Breaker) OpenSince() time.Time {
	if r := b.open.Load(); r != nil {
		return r.since
	}
	return time.Time{}
}

// ClosedSince reports whether the breaker is closed and since when: the
// zero time when it was never anything else. Safe for concurrent use.
func (b *Breaker) ClosedSince() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, st := b.load()
	return b.changed, st == Closed
}

// Since returns when the breaker opened.
func (r *Refusal) Since() time.Time { return r.since }

// Refusing returns the refusal Allow would return at now when the breaker
// is open at now (now before the end of its open period), nil when it is
// not (State would not say Open), read without the lock: one load. Safe for
// concurrent use.
func (b *Breaker) Refusing(now time.Time) *Refusal {
	if r := b.open.Load(); r != nil && now.Before(r.Until) {
		return r
	}
	return nil
}

// State returns the state at now without changing anything: an open breaker
// whose OpenFor has passed reads as half-open, which is what the next Allow
// will make it (and report). Safe for concurrent use.
func (b *Breaker) State(now time.Time) State {
	switch st := State(b.cur.Load() & 3); st {
	case Closed:
		return Closed
	case Open:
		if r := b.open.Load(); r != nil && now.Before(r.Until) {
			return Open
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stateAt(now)
}

// Snapshot returns the breaker's counters at now, read as State does,
// without changing anything.
func (b *Breaker) Snapshot(now time.Time) Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	st := Stats{
		State:               b.stateAt(now),
		ConsecutiveFailures: int(b.consecutive.Load()),
		ProbesInFlight:      b.probes,
		Trips:               b.trips,
	}
	if st.State == Open {
		st.OpenUntil = b.open.Load().Until
	}
	if b.s.FailureRate > 0 {
		st.WindowCalls, st.WindowFailures = b.window.totals(now)
	}
	return st
}

// load returns the generation and the state. Callers hold mu.
func (b *Breaker) load() (uint64, State) {
	c := b.cur.Load()
	return c >> 2, State(c & 3)
}

// stateAt is State's reading; callers hold mu.
func (b *Breaker) stateAt(now time.Time) State {
	_, st := b.load()
	if st == Open && !now.Before(b.open.Load().Until) {
		return HalfOpen
	}
	return st
}

// setState moves the breaker to a different state at now, starts a new
// generation with fresh counts, and returns the transition. Open, it stays
// open for openPeriod. Callers hold mu.
func (b *Breaker) setState(to State, now time.Time) *Transition {
	var until time.Time
	if to == Open {
		if _, from := b.load(); from == HalfOpen {
			b.reopens++ // a failed probe: this period is longer than the last
		}
		until = now.Add(b.openPeriod(now))
	}
	return b.setStateUntil(to, now, until)
}

// openPeriod returns how long the breaker stays open when it opens at now:
// MinOpenFor from closed, doubled for each failed probe since, up to
// OpenFor, and never longer than 1/silenceShare of the model's silence (the
// time since its last answer, or since the breaker was made when it never
// answered), though at least MinOpenFor. Callers hold mu.
func (b *Breaker) openPeriod(now time.Time) time.Duration {
	longest := min(b.s.OpenFor, max(b.s.MinOpenFor, b.answered.Silence(now)/silenceShare))
	d := b.s.MinOpenFor
	for range b.reopens {
		if d >= longest/2 {
			return longest
		}
		d *= 2
	}
	return min(d, longest)
}

// silenceShare bounds an open period by the model's silence: a model silent
// for s is reopened for s/silenceShare at most. A model in and out of bad
// spells is silent for about as long as its bad spell has lasted, and
// whether the spell has ended by the next probe hardly depends on how long
// it lasted (spells of a brownout end at random: what is left of one is as
// long whatever has passed); a model that has been silent for minutes is
// likelier down for minutes more (an outage). Doubling alone took a model
// out for 15s after three failed probes, whatever its bad spells lasted:
// in the brownout families, primaries in alternating spells of 10–30s
// kept 0.52× and 0.70× the oracle's share (2700032, 3000200) and a
// start-up brownout at ten calls a second 0.73× (2700029); bounded by a
// quarter of the silence, 0.86×, 0.81× and 0.80×, and share ≥ 0.9× the
// oracle's in 2 and 1 more points of the cells on the seeds that missed or
// nearly missed it (the wide family's 2, the brownout family's 3); half of
// the silence did as doubling alone (BENCHMARKS.md, Brownout family). A
// dead model costs a few probes more over its first minutes, one per
// OpenFor once silent for silenceShare·OpenFor.
const silenceShare = 4

// openForOutage opens the breaker at now for OpenFor, an outage's opening
// (OutageOver). Callers hold mu.
func (b *Breaker) openForOutage(now time.Time) *Transition {
	return b.setOpen(now, &Refusal{Until: now.Add(b.s.OpenFor), since: now, outage: true})
}

// OutageOver ends, at now, what an outage added to the open period of a
// breaker that an outage's failure opened (Outage): something answered, so
// the outage is over and the model is judged on its own failures again. The
// breaker then stays open until its own open period from the opening has
// passed (MinOpenFor from closed, doubled for each failed probe before),
// at once when it has. It reports whether the breaker was open for an
// outage, and does nothing otherwise: no transition (the breaker stays
// open; the call after the end of its period is its probe).
func (b *Breaker) OutageOver(now time.Time) bool {
	if r := b.open.Load(); r == nil || !r.outage {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	r := b.open.Load()
	if r == nil || !r.outage {
		return false
	}
	until := r.since.Add(b.openPeriod(r.since))
	if until.Before(now) {
		until = now
	}
	if until.After(r.Until) {
		until = r.Until
	}
	b.open.Store(&Refusal{Until: until, since: r.since})
	return true
}

// setStateUntil is setState with the end of an open period given. Callers
// hold mu.
func (b *Breaker) setStateUntil(to State, now, until time.Time) *Transition {
	if to == Open {
		return b.setOpen(now, &Refusal{Until: until, since: now})
	}
	return b.set(to, now, nil)
}

// setOpen opens the breaker at now with refusal r. Callers hold mu.
func (b *Breaker) setOpen(now time.Time, r *Refusal) *Transition {
	b.trips++
	return b.set(Open, now, r)
}

// set moves the breaker to state to at now, open with refusal open (nil
// unless to is Open). Callers hold mu.
func (b *Breaker) set(to State, now time.Time, open *Refusal) *Transition {
	gen, from := b.load()
	b.consecutive.Store(0)
	b.probes, b.successes, b.door = 0, 0, false
	b.window.reset()
	if to == Closed {
		b.reopens = 0
	}
	b.changed = now
	b.open.Store(open)
	b.cur.Store((gen+1)<<2 | uint64(to))
	return &Transition{From: from, To: to, At: now}
}

// OpenTill opens the breaker at now until until, as another replica's
// opened at at (a FactOpen): an open breaker's open period is extended to
// until, without a transition, and counts as begun at at when that is later
// (a probe that failed elsewhere: the early probes of an outage,
// AllOpenProbeEvery apart, are then the fleet's, not each replica's). With
// outage, an outage opened it (FactOpen's Outage), and OutageOver ends it,
// as it ends the breaker's own outage opening; an opening that no outage
// made, extended by one, is not shortened. It does nothing when until is not
// after now, or when the breaker is not open and changed state after at (it
// knows better: its own probe is out, or a probe closed it since; as
// CloseSince). It returns the transition, nil when none.
func (b *Breaker) OpenTill(now, at, until time.Time, outage bool) *Transition {
	if !until.After(now) {
		return nil
	}
	if at.After(now) {
		at = now // another replica's clock, ahead of this one's
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stateAt(now) == Open {
		if r := b.open.Load(); r.Until.Before(until) || r.since.Before(at) {
			extends := r.Until.Before(until) // by an opening no outage made: not the outage's to end
			b.open.Store(&Refusal{Until: window.Later(r.Until, until), since: window.Later(r.since, at), outage: r.outage && (outage || !extends)})
		}
		return nil
	}
	if b.changed.After(at) {
		return nil
	}
	return b.setOpen(now, &Refusal{Until: until, since: now, outage: outage})
}

// Trip opens a closed breaker at now as its own rule would on a run of
// failures (for its open period: MinOpenFor from closed), because the
// failures of a fleet's replicas say the model is dead. It returns the
// transition, nil when the breaker is not closed.
func (b *Breaker) Trip(now time.Time) *Transition {
	return b.moveFrom(Closed, Open, now)
}

// TripForOutage opens a closed breaker at now for OpenFor, as an outage's
// failure does (Outage), because a fleet's replicas' failures came in an
// outage: OutageOver ends what the outage adds. It returns the transition,
// nil when the breaker is not closed.
func (b *Breaker) TripForOutage(now time.Time) *Transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stateAt(now) != Closed {
		return nil
	}
	return b.openForOutage(now)
}

// OpenForOutage reports whether the breaker is open at now for an outage
// (an outage's failure, TripForOutage or OpenTill with outage opened it,
// and OutageOver has not shortened it since), read without the lock.
func (b *Breaker) OpenForOutage(now time.Time) bool {
	r := b.Refusing(now)
	return r != nil && r.outage
}

// CloseSince closes the breaker at now because a probe proved the model
// healthy at since (another replica's: a FactClosed), unless the breaker is
// closed or changed state after since (it then knows better). It returns
// the transition, nil when none.
func (b *Breaker) CloseSince(now, since time.Time) *Transition {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, st := b.load(); st == Closed || b.changed.After(since) {
		return nil
	}
	return b.setState(Closed, now)
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
