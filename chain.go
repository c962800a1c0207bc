package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/geminiguard/geminiguard/internal/latency"
)

// The chain, in call order. A call (call.go: its state and records) walks
// the cascade's models in rounds (run, pause); for each model, retry makes
// its attempts: admit runs the admission steps in order (each defence's
// check lives in its own file), try sends the admitted request (attempt,
// ended) and settles the admission with the breaker (settle), decide turns
// a failure's verdict into the next step (retry after a backoff, next
// model, stop); finish ends the call with an answer, the Fallback or a
// *CascadeError.

// step is what an attempt's outcome asks the call to do next.
type step int

const (
	stepDone    step = iota // the model answered
	stepRetry               // same model again after a delay
	stepNext                // next model of the cascade; this one is done for the call
	stepLater               // next model of the cascade; this one again in the next round
	stepStop                // return this error now (request scope, caller cancelled, deadline)
	stepProject             // skip the rest of the cascade: the project is down
)

// stepGo is an admission step's answer when the request may go: a step no
// attempt outcome asks for.
const stepGo step = -1

// run sends the call through the chain and ends it (finish): the cascade's
// models in order, each through retry (limiter, breaker, classifier-driven
// retries); rounds, when a model failed retryably while another could still
// answer; an early probe when nothing is left but open models; then the
// Fallback, else a *CascadeError.
func (call *call[R]) run(ctx context.Context) (R, error) {
	var zero R
	c := call.c
	if call.stream == nil { // a stream counts once, however many times it opens
		c.stats.calls.Add(1)
		defer call.recordUnfinished()
	}
	if err := c.projectCooling(call.now); err != nil {
		call.skip(c.model(call.firstModel()), err, 0)
		return call.finish(ctx, zero, nil, nil)
	}
	// The first round walks the cascade; a later round, after a backoff,
	// walks again the models that failed retryably while another model
	// could still answer (so a sick primary gets its retries too, after a
	// pause, and the call returns to it before giving up), a model that
	// hung before it learned its answer times after the others
	// (stalledLast); when the retry budget cannot pay for the whole round,
	// the likeliest to answer first (likeliestFirst).
	var slotsOnStack [4]retrySlot // a cascade of up to four: no allocation
	slots := slotsOnStack[:0]
	for _, m := range call.order() {
		slots = append(slots, retrySlot{m: m})
	}
	call.open = openSeen{left: len(slots)}
	for round := 1; ; round++ {
		call.later = call.later[:0]
		for i := range slots {
			sl := &slots[i]
			if round > 1 && !c.budget.withdraw(call.now) {
				continue // the Client is retrying too much: no second rounds now
			}
			resp, next, err := call.retry(ctx, sl)
			switch next {
			case stepDone:
				return call.finish(ctx, resp, sl.m, nil)
			case stepStop:
				return call.finish(ctx, zero, nil, err)
			case stepProject:
				return call.finish(ctx, zero, nil, nil)
			case stepLater:
				call.later = append(call.later, *sl)
			}
		}
		if len(call.later) == 0 {
			break
		}
		switch err := call.pause(ctx, round); {
		case err == errNoTimeForRound:
			return call.finish(ctx, zero, nil, nil)
		case err != nil:
			return call.finish(ctx, zero, nil, err)
		}
		slots = append(slots[:0], call.later...)
		stalledLast(slots)
		if c.budget.credits(call.now) < int64(len(slots)) {
			call.likeliestFirst(slots) // the budget cannot pay for the whole round: its likeliest answers first
		}
	}
	switch resp, m, next, err := call.probeAllOpen(ctx); next {
	case stepDone:
		return call.finish(ctx, resp, m, nil)
	case stepStop:
		return call.finish(ctx, zero, nil, err)
	}
	return call.finish(ctx, zero, nil, nil)
}

// likeliestFirst orders the slots of a call's next round by the share of
// their recent requests their models answered (over the latency
// throttle's window, as the throttle reads it: answerRate), the cascade's
// order between
// equals. A round after the first is paid from the Client's retry budget,
// model by model; when the budget cannot pay for the whole round, a model
// in a bad spell, first in the cascade, would spend what is left of it on
// a request it fails, and the budget then refuse the model that answers
// (a cluster of calls that met both models' failures empties it). When it
// can, the round keeps the cascade's order: the primary's answer is the
// better one.
func (call *call[R]) likeliestFirst(slots []retrySlot) {
	if len(slots) < 2 {
		return
	}
	var onStack [4]float64 // a cascade of up to four: no allocation
	rates := onStack[:0]
	for _, sl := range slots {
		requests, accepts, _, held := sl.m.routes[call.endpoint].throttleTotals(call.now)
		rates = append(rates, answerRate(requests-held, accepts))
	}
	// An insertion sort: stable, in place, and a round holds a few slots.
	for i := 1; i < len(slots); i++ {
		for j := i; j > 0 && rates[j] > rates[j-1]; j-- {
			slots[j], slots[j-1] = slots[j-1], slots[j]
			rates[j], rates[j-1] = rates[j-1], rates[j]
		}
	}
}

// stalledLast moves the slots of a call's next round whose model's last
// attempt stalled before the model learned its answer times after the
// others, the cascade's order kept within each: a model that made the call
// wait its attempt timeout out, with no learned deadline to bound the next
// wait, is asked again only once the models whose failures were quick had
// their turn (a primary hanging on nearly every request from the start,
// whose attempt timed out, and a secondary that answered 503 at once: the
// round went back to the primary and waited a minute again). A model that
// learned its deadline is cut at it again, a bounded wait, and keeps its
// place: its answer is the better one.
func stalledLast(slots []retrySlot) {
	for i := 1; i < len(slots); i++ { // an insertion sort: stable, in place, a few slots
		for j := i; j > 0 && slots[j-1].stalled && !slots[j].stalled; j-- {
			slots[j], slots[j-1] = slots[j-1], slots[j]
		}
	}
}

// errNoTimeForRound: the backoff before another round would overrun the
// call's deadline.
var errNoTimeForRound = errors.New("geminiguard: no time left for another round")

// pause waits the backoff between two rounds of a call. It returns nil to
// start the next round; errNoTimeForRound, without waiting, when the wait
// would overrun the call's deadline (the last failure is then marked as cut
// short by it); the caller's context error, recorded as unsent with the
// time waited, when it ended during the wait.
func (call *call[R]) pause(ctx context.Context, round int) error {
	c := call.c
	first := &call.later[0]
	d, _ := c.cfg.retry.retryDelay(0, first.prev, round, c.jitter.float64())
	if !call.now.Add(d).Before(call.deadline) {
		for i := len(call.attempts) - 1; i >= 0; i-- {
			if a := call.attempts[i]; !a.Skipped { // skips share their errors: never modify those
				if me, ok := a.Err.(*ModelError); ok {
					me.Err = &waitError{Err: me.Err, Wait: d}
				}
				break
			}
		}
		return errNoTimeForRound
	}
	for i := range call.later {
		call.later[i].prev, call.later[i].delay = d, 0
	}
	first.delay = d
	c.retrying(ctx, RetryEvent{Model: first.m.name, Attempt: first.tries, Err: call.attempts[len(call.attempts)-1].Err, Delay: d})
	start := call.now
	if err := call.sleep(ctx, d); err != nil {
		return call.unsent(first.m, err, call.now.Sub(start))
	}
	return nil
}

// retrySlot is a model's place in a call's rounds: its attempts so far, the
// wait before its next attempt and its previous backoff.
type retrySlot struct {
	m     *modelState
	tries int
	prev  time.Duration // the previous backoff, which decorrelated jitter grows from
	delay time.Duration // the wait before the next attempt, for the record
	// stalled: its last attempt timed out (the attempt timeout, a cut, a
	// 504) while its model had not learned its answer times: nothing but
	// that timeout bounds its next wait (stalledLast).
	stalled bool
}

// retry runs sl's model's attempts within one round of the call: admit,
// send, settle, decide, back off, until the model answers (stepDone with
// the answer) or another step is due (with the error that asks for it).
func (call *call[R]) retry(ctx context.Context, sl *retrySlot) (R, step, error) {
	var zero R
	a := &call.adm
	for {
		sl.tries++
		if a.m != nil {
			*a = admission{} // the previous request's, settled
		}
		if next, err := call.admit(ctx, sl, a); next != stepGo {
			return zero, next, err
		}
		rec := call.c.cfg.recorder // nil without WithRecorder
		if rec != nil {
			rec.begin(call.now)
		}
		resp, v, elapsed, err := call.try(ctx, a, sl.tries)
		call.c.tel.attempt(ctx, a.m, a.br, sl.tries, sl.delay, elapsed, v, call.now)
		if call.stream != nil && err == nil { // recorded when the stream ends
			call.stream.opened = openedStream{model: a.m.name, began: call.now.Add(-elapsed), firstChunk: elapsed}
		} else if rec != nil {
			rec.request(call.endpoint, a.m.name, v, err, call.now, elapsed)
		}
		if err == nil {
			sl.m = a.m // a hedge's model may have answered (hedge.go)
			call.answered(sl.m.name, sl.delay, elapsed)
			return resp, stepDone, nil
		}
		next, d, err := call.decide(sl, v, err)
		sl.stalled = v.Class == ClassTimeout && !sl.m.lat.Learned(call.class)
		if call.namedMissing(sl.m, v) {
			err = fmt.Errorf("geminiguard: model %q, named by the call, does not exist (the cascade is %s): fix the name, or pass \"\" for the cascade's primary: %w", sl.m.name, strings.Join(call.c.cascade, ", "), err)
		}
		err = call.fail(sl.m.name, &ModelError{Model: sl.m.name, Verdict: v, Err: err}, sl.delay, elapsed)
		if next != stepRetry {
			return zero, next, err
		}
		if err := call.backoff(ctx, sl, v, err, d); err != nil {
			return zero, stepStop, err
		}
	}
}

// admit decides whether the call may send its next request to sl's model
// now, by running the admission steps in order: the first that refuses
// decides. It fills a (which must hold nothing: zero, or as an earlier
// refusal left it) and returns stepGo; or, having
// recorded why and given back what the steps before took, leaving a holding
// nothing, stepNext when the model cannot take the request for this call,
// stepLater when it may in the call's next round (the throttle skipped it),
// or stepStop with the error that ends the call (its deadline passed, the
// caller cancelled during a wait). Each step is a defence's say, written
// beside its mechanism (gate.go: admission steps). Waits (tokens, a fleet
// lease, the store's round trips) are slept inside their steps, counted in
// sl.delay, and the clock is read again after every step.
func (call *call[R]) admit(ctx context.Context, sl *retrySlot, a *admission) (step, error) {
	if call.endpoint.metered() {
		a.tokens = call.inputTokens(ctx, sl.m) // may take time: reads the clock after it
	}
	for _, s := range call.c.admitSteps {
		var next step
		var err error
		// Conditions rather than switch s, whose nine cases compile to a
		// jump table: an indirect jump to another target at each step,
		// mispredicted (BenchmarkChainOwnRefused); and rather than a table
		// of method values: those of a generic type allocate on every call.
		switch {
		case s == admitDeadline:
			if call.now.Before(call.deadline) {
				continue // the common case, decided here
			}
			next, err = call.checkDeadline(ctx, sl)
		case s == admitConfig:
			next, err = call.checkConfig(sl)
		case s == admitBudget:
			next, err = call.checkBudget(ctx, sl, a)
		case s == admitCooling:
			next, err = call.checkCooling(sl)
		case s == admitOpen:
			next, err = call.checkOpen(sl)
		case s == admitThrottle:
			next, err = call.checkThrottle(sl)
		case s == admitLimiter:
			next, err = call.takeTokens(ctx, sl, a)
		case s == admitFleet:
			next, err = call.takeLease(ctx, sl, a)
		default: // admitPermit
			next, err = call.takePermit(ctx, sl, a)
		}
		if next != stepGo {
			// Refused: give back what the steps before took (most refusals
			// come before anything is taken), continue the Client's spell
			// of failures when s refused the model for its failures (a
			// second refusal at the same now finds the spell continued to
			// it and stores nothing), and log the refusal. Here rather than
			// in a function of its own, whose arguments' spills and reloads
			// cost a refused call 70 instructions.
			if a.holds() {
				a.unreserve(sl.m)
			}
			if s == admitOpen || s == admitThrottle || s == admitPermit {
				call.c.refusedAsFailing(call.now)
			}
			if call.c.cfg.logger != nil {
				call.c.logRefusal(ctx, sl.m, s, err)
			}
			return next, err
		}
	}
	a.m, a.endpoint, a.ctx = sl.m, call.endpoint, ctx
	return stepGo, nil
}

// try sends the admitted request (the n-th to its model in this call) and
// settles the admission (the hedge's, when a hedge answered: see attempt): at once, or, for a stream that opened, when the
// stream ends (the admission is then handed to call.stream). A panic
// anywhere in between still settles it. A failure's verdict reaches past
// the call (cool-downs, learned limits) before try returns.
func (call *call[R]) try(ctx context.Context, a *admission, n int) (R, Verdict, time.Duration, error) {
	defer a.abandon()
	c, m := call.c, a.m
	c.stateChanged(ctx, m.name, call.endpoint, a.opened)
	if n == 1 {
		c.budget.deposit(call.now) // the cut budget's too
		if c.cfg.hedge.On {
			c.hedges.deposit(call.now)
		}
	} else {
		m.counters.retries.Add(1)
	}
	resp, v, elapsed, err := call.attempt(ctx, a)
	end := call.now
	m = a.m
	switch {
	case err == nil && call.stream != nil:
		call.stream.held = *a // its outcome is known when the stream ends
		a.settled, a.hold = true, budgetHold{}
	default:
		c.settle(a, end, err, v)
	}
	call.account(m, resp, end)
	if err != nil && !call.namedMissing(m, v) && call.endpoint.cools() {
		c.applyVerdict(ctx, m, v, end)
	} else if call.usage != nil && call.tokens >= 0 {
		m.lim.reconcile(end, call.tokens, int(call.usage(resp)))
		if call.c.fleet != nil && m.lim.limitsTokens() {
			m.lease.owe(int(call.usage(resp)) - max(call.tokens, 0))
		}
	}
	if call.share != nil {
		c.shareRecord(ctx, call.share, call.shareNow)
		call.share = nil
	}
	return resp, v, elapsed, err
}

// attempt makes one upstream request to the admitted model under the attempt
// timeout and classifies its outcome. The request starts at call.now
// (nothing that takes time comes between the latest clock reading and it);
// call.now is then its end, the one clock reading of an attempt. An attempt
// that may be hedged (hedge.go) is raced there, and may be answered by the
// hedge's model: *a is then the hedge's admission. An attempt that tests
// its model's lifted cut (latency.Learner.Probe) while the throttle's
// window holds no answer of the model is not hedged: a hedge answering
// first would end it before its lifted cut, and it would teach nothing (a
// model back slower after an outage, its probes beaten by their hedges
// while the throttle kept the other requests from it, was never
// relearned: TestModelBackSlowerAfterAnOutageIsRelearned); its call waits
// the lifted cut. While the model answers some of its requests, their
// answers teach, and the probe is hedged as any attempt.
func (call *call[R]) attempt(ctx context.Context, a *admission) (R, Verdict, time.Duration, error) {
	c, m, start := call.c, a.m, call.now
	end := start.Add(m.timeout) // the entry's own (WithModelTimeout), else the attempt timeout
	if call.deadline.Before(end) {
		end = call.deadline
	}
	cut, onward := call.boundingCut(m, end.Sub(start))
	probe := false
	if cut > 0 {
		if d, ok := m.lat.Probe(call.class, start, !onward, end.Sub(start)); ok {
			defer func() { m.lat.ProbeEnded(call.class, start, time.Now()) }() // on a panic of the SDK too
			cut, probe = max(cut, call.stretch(m, d, !onward)), true
		}
	}
	if after, ok := call.hedgeAfter(m, start, end); ok && !(probe && m.routes[call.endpoint].unanswered(start)) {
		return call.hedged(ctx, a, end, after, cut, onward)
	}
	deadline := end
	if cut > 0 && c.mayCut(onward, start) {
		deadline = start.Add(cut)
	} else {
		cut = 0
	}
	learning := call.learning(m, end.Sub(start))
	actx := ctx
	var late *lateCut
	if d, ok := ctx.Deadline(); !ok || deadline.Before(d) || learning {
		// The caller's deadline does not bound the attempt already, or a cut
		// learned while it waits may. (Otherwise the context and timer are
		// saved: half the chain's own cost.)
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
		if learning {
			late = call.cutOnceLearned(m, start, end.Sub(start), call.hasNext(m), cancel)
			defer late.end() // joined on a panic of the SDK too
		}
	}
	young := call.sentWhileYoung(m, start, learning)
	defer young.end() // on a panic of the SDK too
	m.counters.requests.Add(1)
	a.sent = true
	resp, err := call.send(actx, call, m)
	young.end() // before its answer is learned (ended)
	if late != nil {
		if cut, onward = late.end(), late.onward; err == nil {
			late.answered()
		}
	}
	call.now = time.Now()
	call.shareEnd(m, start, late != nil)
	return call.ended(ctx, m, start, call.now, cut, onward, actx.Err() != nil, resp, err)
}

// sentWhileYoung counts the call's attempt to m sent at start in flight
// while m's class is young (latency.Learner.SentWhileYoung), for the
// deadlines learned from its first answers to count it as at least as long
// as it has taken, until its end; an attempt sent while m learns
// (learning) is counted by cutOnceLearned already.
func (call *call[R]) sentWhileYoung(m *modelState, start time.Time, learning bool) youngAttempt {
	if !call.learns || learning {
		return youngAttempt{}
	}
	return youngAttempt{lat: m.lat, class: call.class, place: m.lat.SentWhileYoung(call.class, start)}
}

// shareEnd has try share m's record of answer times with the fleet once
// the call's attempt to m sent at start, before m learned its deadlines
// (early: cutOnceLearned watched it), has ended, its end learned (ended)
// and its admission settled, when the fleet may hold it as in flight (a
// round trip shared the record since it was sent: latency.Learner.InFlight)
// or other replicas' attempts of the class, sent before they learned their
// deadlines, wait as this replica last read the fleet's record: they learn
// from its answer, and that it is no longer out, at once rather than at
// this replica's next round trip (Client.shareRecord). An attempt that
// ends while the fleet asks for m's record (fleet.FactRecordWanted: a
// replica's stall outlasts the answers it knows) has it shared too, once a
// shareLatencyEvery at most. Any other attempt's end rides on the next
// round trip: a fleet whose replicas each call once a minute would
// otherwise make a round trip more for each replica's first calls
// (TestFleetRefusedLeaseFallsThroughInOneRoundTrip).
func (call *call[R]) shareEnd(m *modelState, start time.Time, early bool) {
	if call.c.fleet == nil {
		return
	}
	if early && (m.lease.sharedSince(start) || m.lat.OthersInFlight(call.class)) {
		call.share, call.shareNow = m, true
	} else if m.lease.wanted(call.now) {
		call.share, call.shareNow = m, false
	}
}

// youngAttempt is an attempt counted in flight while its model's class is
// young (sentWhileYoung); the zero value counts none. Not safe for
// concurrent use: the attempt's goroutine ends it.
type youngAttempt struct {
	lat   *latency.Learner
	class int
	place int64 // 0: not counted, or ended
}

// end counts the attempt's end, once; later calls do nothing.
func (y *youngAttempt) end() {
	if y.place > 0 {
		y.lat.Ended(y.class, y.place)
		y.place = 0
	}
}

// boundingCut returns the learned deadline of the call's attempt to m (see
// latency.go) when it is shorter than room, the time the attempt has
// otherwise; 0 when it is not, or the call does not learn answer times, or
// m has not learned them yet. The cut of an attempt with nowhere else to
// go is never the shorter one: whether the call has another model to go
// to (hasNext) is asked only of a cut that would bound the attempt either
// way, and onward reports it (Client.mayCut).
func (call *call[R]) boundingCut(m *modelState, room time.Duration) (cut time.Duration, onward bool) {
	if !call.learns {
		return 0, false
	}
	d, ok := m.lat.Cut(call.class, false)
	if d = call.stretch(m, d, false); !ok || d >= room {
		return 0, false
	}
	if call.hasNext(m) {
		return d, true
	}
	last, _ := m.lat.Cut(call.class, true)
	if last = call.stretch(m, last, true); last < room {
		return last, false
	}
	return 0, false
}

// lateAnswer reports whether an answer of m's that took elapsed came after
// the call's learned deadline of an attempt to m: the deadline learned with
// it counted, whether the call has another model to go to asked, as in
// boundingCut, only of an answer later than the shorter cut.
func (call *call[R]) lateAnswer(m *modelState, elapsed time.Duration) bool {
	if d, ok := m.lat.Cut(call.class, false); !ok || elapsed <= call.stretch(m, d, false) {
		return false
	}
	if call.hasNext(m) {
		return true
	}
	d, _ := m.lat.Cut(call.class, true)
	return elapsed > call.stretch(m, d, true)
}

// ended classifies the outcome of a request to m that started at start and
// ended at finish: err, or resp. cut, above 0, is the learned deadline that
// bounded it, onward whether it sends the call on to another model
// (boundingCut); timedOut says its own deadline passed. It learns the
// answer's time and reports as attempt does.
func (call *call[R]) ended(ctx context.Context, m *modelState, start, finish time.Time, cut time.Duration, onward, timedOut bool, resp R, err error) (R, Verdict, time.Duration, error) {
	c := call.c
	elapsed := finish.Sub(start)
	switch {
	case err == nil || callerDone(ctx, finish):
	case cut > 0 && elapsed >= cut:
		err = &cutError{err: err, after: cut}
		call.cutOn = append(call.cutOn, m)
		c.chargeCut(onward, call.now)
		m.lat.Record(call.class, latency.Abandoned, finish)
		m.routes[call.endpoint].slowed(call.now)
	case timedOut:
		err = &attemptTimeoutError{err: err}
	}
	if err == nil && call.learns {
		m.lat.Record(call.class, elapsed, finish)
		if call.lateAnswer(m, elapsed) {
			m.routes[call.endpoint].slowed(call.now) // late, and not cut (no budget then)
		}
	}
	var v Verdict
	if err != nil {
		v = m.classify(err)
	}
	if l := c.cfg.logger; l != nil && l.Enabled(ctx, slog.LevelDebug) {
		l.LogAttrs(ctx, slog.LevelDebug, "geminiguard: attempt", slog.String("model", m.name),
			slog.Duration("elapsed", elapsed), slog.String("class", v.Class.String()), slog.String("rule", v.Rule))
	}
	return resp, v, elapsed, err
}

// callerDone reports whether the caller's ctx was done at now: cancelled,
// or past its deadline. A request bounded by that deadline (an attempt, a
// round trip to the shared state) has a timer of its own for the same
// instant, which may fire first: the request then fails before ctx's timer
// marks ctx done, and the failure is still the caller's deadline, not the
// model's timeout or the store's failure.
func callerDone(ctx context.Context, now time.Time) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !now.Before(d)
}

// settle hands the admission's permit back with the outcome at now of the
// request it let through, counts the outcome in the model's counters, and
// reports a state change after the breaker's lock is released. It does
// nothing for an admission already settled.
func (c *Client) settle(a *admission, now time.Time, err error, v Verdict) {
	if a.settled || a.br == nil {
		return
	}
	a.settled = true
	o := outcomeOf(err, v)
	switch o {
	case outcomeSuccess:
		a.m.routes[a.endpoint].answered(now)
		c.answers.Saw(now)
		if c.outageOpen.Load() > 0 {
			c.outageOver(now)
		}
	case outcomeFailure:
		a.m.routes[a.endpoint].failed(now)
		if c.outage(now) {
			o = outcomeOutage // no model answers: dead, not degraded
		}
	}
	tr := a.br.done(a.permit, now, o)
	if o == outcomeOutage && tr != nil && State(tr.To) == StateOpen {
		c.outageOpen.Add(1)
	}
	if tr != nil && State(tr.To) == StateClosed { // the throttle need not hold back what the breaker took out for
		a.m.routes[a.endpoint].recovered(now, a.br.s.HalfOpenProbes)
	}
	a.m.count(err, v)
	c.stateChanged(a.ctx, a.m.name, a.endpoint, tr)
	c.reportOutcome(a.ctx, a.m, a.endpoint, a.br, a.permit, o, tr != nil, now) // first: a replica told of a close must not count the failures before it
	c.publishTransition(a.ctx, a.m, a.endpoint, a.br, tr)
}

// outageOver ends, at now, what the Client's outage added to the open
// periods of its cascade's breakers that it opened: an answer came, so the
// outage is over, and each model is open for what its own failures open it
// for (circuit.Breaker.OutageOver). A model that answers a share of its
// requests, taken out with the others by a moment when none answered, is
// not kept out for OpenFor while another model answers.
func (c *Client) outageOver(now time.Time) {
	seen := c.outageOpen.Load()
	for _, m := range c.states {
		for _, br := range m.breakers {
			br.sm.OutageOver(now)
		}
	}
	c.outageOpen.Add(-seen) // an opening counted during the walk is walked again at the next answer
}

// outage records a counted failure at now in the Client's spell of
// failures and reports whether the Client is in an outage then (inOutage).
// The failure continues the spell under way, or begins one after an answer
// or a gap of more than outageAfter.
func (c *Client) outage(now time.Time) bool {
	f, at := &c.failing, now.Sub(c.answers.Origin)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seen || !c.spellGoesOn(at, f.latest) {
		f.began = at
	}
	f.seen, f.latest = true, max(f.latest, at)
	return c.outageAt(at)
}

// refusedAsFailing records at now a local refusal of a model for its
// failures (its breaker open, its probes taken, the throttle): it continues
// the spell under way and never begins one. In a full outage the open
// breakers refuse calls without a request and the early probes' failures
// come AllOpenProbeEvery apart: the refusals between them keep the spell,
// and so the outage, going.
func (c *Client) refusedAsFailing(now time.Time) {
	f, at := &c.failing, now.Sub(c.answers.Origin)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen && at > f.latest && c.spellGoesOn(at, f.latest) {
		f.latest = at
	}
}

// inOutage reports whether the Client's models are in an outage at now:
// every model failing, or refused as failing, for outageAfter (a spell with
// no answer and no gap of more than outageAfter between two failures or
// refusals, under way at now). A Client that asked nothing for a while is
// idle, not in an outage: the first failures after a quiet spell (fast
// 503s come back before slow answers) say nothing yet.
func (c *Client) inOutage(now time.Time) bool {
	f := &c.failing
	f.mu.Lock()
	defer f.mu.Unlock()
	return c.outageAt(now.Sub(c.answers.Origin))
}

// outageAt is inOutage at the time at since the Client's origin, with
// c.failing.mu held.
func (c *Client) outageAt(at time.Duration) bool {
	f := &c.failing
	return f.seen && c.spellGoesOn(at, f.latest) && at-f.began >= outageAfter
}

// spellGoesOn reports whether a spell whose latest failure or refusal came
// at latest goes on at at, both since the Client's origin: no answer
// since, and at most outageAfter ago.
func (c *Client) spellGoesOn(at, latest time.Duration) bool {
	since := at - latest
	return since <= outageAfter && c.answers.SilentAt(at, since)
}

// failureSpell is the Client's latest spell of failing models (inOutage):
// when it began and its latest failure or refusal, as times since the
// Client's origin (answers.Origin). Safe for concurrent use: the beginning
// and the latest failure change together under mu, so that no failure
// reads the latest of a spell that another failure at the same instant
// has just begun with the beginning of the spell before it (an outage as
// long as both together, which opened a model for OpenFor after a quiet
// spell). The zero value has seen no failure.
type failureSpell struct {
	mu            sync.Mutex
	began, latest time.Duration
	seen          bool // a failure came
}

// decide turns a failed attempt's verdict into the call's next step and,
// for stepRetry, the backoff before it. A retry whose backoff would overrun
// the call's deadline, or that the retry budget refuses, becomes stepNext;
// the first is marked on the error, which decide returns.
func (call *call[R]) decide(sl *retrySlot, v Verdict, err error) (step, time.Duration, error) {
	c := call.c
	next := call.nextStep(sl.m, v, sl.tries)
	if next != stepRetry {
		return next, 0, err
	}
	d, ok := c.cfg.retry.retryDelay(v.RetryAfter, sl.prev, sl.tries, c.jitter.float64())
	switch {
	case !ok:
		return stepNext, 0, err
	case !call.now.Add(d).Before(call.deadline):
		return stepNext, 0, &waitError{Err: err, Wait: d}
	case !c.budget.withdraw(call.now):
		return stepNext, 0, err
	}
	return stepRetry, d, err
}

// nextStep decides what a failed attempt with verdict v, the n-th to m,
// asks for.
func (call *call[R]) nextStep(m *modelState, v Verdict, n int) step {
	switch {
	case v.Class == ClassCanceled, v.Scope == ScopeRequest, call.namedMissing(m, v):
		return stepStop
	case v.Scope == ScopeProject:
		return stepProject
	case !v.Retryable, n >= call.c.cfg.retry.MaxAttempts, m.breakers[call.endpoint].state(call.now) == StateOpen:
		// (The last: this failure opened the breaker, which would refuse
		// the retry after its backoff.)
		return stepNext
	case call.hasNext(m), len(call.later) > 0:
		// Another model can answer now, or the call will come back to one
		// after a pause: move on rather than retry a model that just failed
		// (the next model answers sooner than a backoff), and come back to
		// this one in the next round.
		return stepLater
	}
	return stepRetry
}

// namedMissing reports whether v, the verdict of m's failure, says that m
// does not exist (a 404) while m is the model the call named outside the
// cascade: the call asked for it by name (a misspelt name, most likely), so
// the 404 ends the call, the cascade does not answer in its place, and m is
// not cooled down (the next call naming it asks the API again). Other calls
// of one model (only) return its failures anyway; a read (GetModel) is
// treated as a named call.
func (call *call[R]) namedMissing(m *modelState, v Verdict) bool {
	return v.Class == ClassNotFound && (!call.only || call.read) && m.name == call.first && !slices.Contains(call.c.cascade, m.name)
}

// backoff reports the retry of sl's model after its failure err and waits d
// before it. It returns the caller's context error, recorded as unsent
// with the time waited, when that ended the wait.
func (call *call[R]) backoff(ctx context.Context, sl *retrySlot, v Verdict, err error, d time.Duration) error {
	call.c.retrying(ctx, RetryEvent{Model: sl.m.name, Attempt: sl.tries, Err: err, Verdict: v, Delay: d})
	start := call.now
	if err := call.sleep(ctx, d); err != nil {
		return call.unsent(sl.m, err, call.now.Sub(start))
	}
	sl.delay, sl.prev = d, d
	return nil
}

// finish ends the call: with m's answer (m non-nil), completed first when
// the call completes answers; with a request-scoped error (stopErr); or,
// when every model failed, with the Fallback's answer or a *CascadeError.
// It fills the CallRecord and the client's statistics.
func (call *call[R]) finish(ctx context.Context, resp R, m *modelState, stopErr error) (R, error) {
	c := call.c
	err := stopErr
	if m != nil && call.complete != nil {
		if resp, err = call.complete(ctx, call, resp, m); err != nil {
			m = nil // a failed completion fails the call: never the Fallback
		}
	}
	fallback := false
	// What outlives the call holds a copy of its attempts: a unary call's
	// state is reused (releaseGenerateCall), a stream's goes on recording
	// attempts (resumes).
	failed := m == nil && err == nil
	recorded := call.rec != nil && call.stream == nil // a stream records its call when it ends
	var attempts []Attempt
	if failed || recorded {
		attempts = slices.Clone(call.attempts)
	}
	if failed {
		cerr := &CascadeError{Attempts: attempts}
		err = cerr
		if call.fallback != nil && ctx.Err() == nil {
			fresp, fok := call.fallback(ctx, cerr)
			call.now = time.Now()
			if fok {
				resp, err, fallback = fresp, nil, true
				if call.hit.Kind == "" { // the Fallback's own answer, not the cache's
					c.stats.defaults.Add(1)
				}
				c.fellBack(ctx, FallbackEvent{Model: call.firstModel(), Err: cerr})
			}
		}
	}
	call.finished = true
	if call.stream == nil {
		latency := call.now.Sub(call.start)
		c.stats.record(err == nil, fallback, latency)
		if recorded {
			*call.rec = CallRecord{Attempts: attempts, Fallback: fallback, Latency: latency, Cache: call.hit}
			call.spent.record(call.rec)
			if err == nil && !fallback {
				call.rec.Model = attempts[len(attempts)-1].Model
			}
		}
	}
	if err != nil {
		var zero R
		return zero, err
	}
	return resp, nil
}

// recordUnfinished counts a call that a panic (the SDK's, a hook's, the
// Fallback's) ended before finish, as a failure, so that the statistics
// stay consistent; the panic goes on to the caller. Deferred by run.
func (call *call[R]) recordUnfinished() {
	if !call.finished && call.stream == nil {
		call.finished = true
		call.c.stats.record(false, false, time.Since(call.start))
	}
}
