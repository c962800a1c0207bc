package geminiguard

import (
	"context"
	"time"
)

// The gate of one model: admit takes what a request needs before it may
// leave (the limiter's grant, the breaker's permit), and settle gives the
// breaker the request's outcome, the two steps of gobreaker's
// beforeRequest/afterRequest. Every admission is settled exactly once, on
// every path: by settle when the request's outcome is known, by abandon
// when a panic (the SDK's, a hook's, a stream consumer's) ends the call
// first. A probe permit that was never settled would hold its slot for good.

// admission is a model's leave to send one request of a call: a limiter
// grant and a breaker permit, taken together by admit. Its zero value holds
// nothing.
type admission struct {
	m            *modelState
	br           *breaker // m's breaker of the call's endpoint
	grant        grant
	alone        grant // the fleet's limits divided by the replicas, the shared state being unreachable (fleet.go)
	leased       bool  // a request (and leasedTokens) was taken from the model's fleet lease
	leasedTokens int
	permit       permit
	endpoint     endpoint
	opened       *transition     // the change allow made (open → half-open), reported once the request goes
	hold         budgetHold      // the request's estimated cost, counted against the budget until abandon
	sent         bool            // the request left: its grant is spent whatever comes back
	settled      bool            // the permit was handed back
	ctx          context.Context // the call's, for the reports of settle
}

// stepGo is admit's answer when the request may go: a step no attempt
// outcome asks for.
const stepGo step = -1

// admit decides whether the call may send its next request to sl's model
// now. It fills a (which must be zero) and returns stepGo; or, having
// recorded why, and leaving a holding nothing, stepNext
// when the model cannot take the request for this call (its WithModelConfig
// adjustment makes it malformed (adjustFlaw), cooling down, open,
// throttled for its recent failures while another model can answer (see
// route.go), out of tokens before the deadline, or out of tokens now while
// another model can answer), or stepStop with the error that ends the call (its
// deadline passed, the caller cancelled during a token wait). A token wait
// is slept here, counted in sl.delay.
func (call *call[R]) admit(ctx context.Context, sl *retrySlot, a *admission) (step, error) {
	m := sl.m
	var tokens int
	if call.endpoint.metered() {
		tokens = call.inputTokens(ctx, m) // may take time: read the clock after it
	}
	now := call.now
	if !now.Before(call.deadline) {
		if err := ctx.Err(); err != nil {
			return stepStop, call.unsent(m, err, sl.delay)
		}
		if d, ok := ctx.Deadline(); ok && !d.After(call.deadline) {
			// The caller's deadline, reached before its context says so
			// (its timer is about to fire): the caller's error, not ours.
			return stepStop, call.unsent(m, context.DeadlineExceeded, sl.delay)
		}
		return stepStop, call.unsent(m, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassTimeout, Scope: ScopeRequest}, Err: errCallTimeout}, sl.delay)
	}
	if err := call.adjustFlaw(m); err != nil {
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	if next, err := call.overBudget(ctx, m); next != stepGo {
		call.skip(m, err, sl.delay)
		return next, err
	}
	if err := m.cooling(now); err != nil {
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	br := m.breakers[call.endpoint]
	if br.state(now) == StateOpen {
		call.skip(m, m.openErr, sl.delay)
		return stepNext, m.openErr
	}
	if skip, err := call.throttled(m); skip {
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	if call.endpoint.metered() && m.lim.enforces() {
		if next, err := call.reserve(ctx, sl, m, m.lim, tokens, &a.grant); next != stepGo {
			return next, err
		}
	}
	if call.c.fleet != nil && call.endpoint.metered() {
		if next, err := call.fleetAdmit(ctx, sl, m, tokens, a); next != stepGo {
			a.grant.cancel()
			return next, err
		}
	}
	p, tr, err := br.allow(call.now)
	if err == nil && p.probe && call.c.fleet != nil && !call.fleetProbe(ctx, m) {
		br.done(p, call.now, outcomeIgnore) // another replica probes the model
		err = ErrCircuitOpen
	}
	if err != nil {
		a.unreserve(m)
		err = &ModelError{Model: m.name, Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel}, Err: err}
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	a.m, a.br, a.permit, a.endpoint, a.opened, a.ctx = m, br, p, call.endpoint, tr, ctx
	a.hold = call.holdBudget(m)
	return stepGo, nil
}

// reserve takes a grant of lim into *g for the request m is about to be
// sent, waiting for it (counted in sl.delay) when the limits make it wait
// and no other model can answer at once. It returns stepGo with *g filled,
// or, having recorded why and leaving *g zero, stepNext (lim refuses, or
// makes the request wait while another model can answer) or stepStop (the
// caller's context ended during the wait).
func (call *call[R]) reserve(ctx context.Context, sl *retrySlot, m *modelState, lim *limiter, tokens int, g *grant) (step, error) {
	now := call.now
	var wait time.Duration
	var err error
	if *g, wait, err = lim.reserve(now, tokens, call.deadline); err != nil {
		err = localLimitError(m.name, err, now)
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	if wait > 0 && call.hasNext(m) {
		// Out of tokens for now, and another model can answer at once:
		// skip this one rather than queue behind its quota.
		err := g.skip(m.name, now, wait)
		*g = grant{}
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	if wait > 0 {
		if err := call.sleep(ctx, wait); err != nil {
			g.cancel()
			*g = grant{}
			return stepStop, call.unsent(m, err, sl.delay+call.now.Sub(now))
		}
		sl.delay += wait
		call.c.tel.limiterWaited(ctx, m, wait)
	}
	return stepGo, nil
}

// unreserve gives back what admit took for m's request before the breaker
// refused it or a panic ended the call before it left: the limiter's
// grants and the leased request.
func (a *admission) unreserve(m *modelState) {
	a.grant.cancel()
	a.alone.cancel()
	if a.leased {
		m.lease.giveBack(a.leasedTokens)
	}
	a.grant, a.alone, a.leased = grant{}, grant{}, false
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
		c.answers.saw(now)
	case outcomeFailure:
		a.m.routes[a.endpoint].failed(now)
		if c.answers.silentFor(now, outageAfter) {
			o = outcomeOutage // no model answers: dead, not degraded
		}
	}
	tr := a.br.done(a.permit, now, o)
	a.m.count(err, v)
	c.stateChanged(a.ctx, a.m.name, a.endpoint, tr)
	c.reportOutcome(a.ctx, a.m, a.endpoint, a.br, o, tr != nil, now) // first: a replica told of a close must not count the failures before it
	c.publishTransition(a.ctx, a.m, a.endpoint, a.br, tr)
}

// abandon settles an admission that a panic left unsettled, saying nothing
// about the model: its permit (a probe's slot included) is freed, and a
// grant whose request never left is given back. Deferred wherever an
// admission is held, it also releases the budget hold, after the response
// was billed; it does nothing else once settle ran.
func (a *admission) abandon() {
	a.hold.release()
	if a.settled || a.br == nil {
		return
	}
	a.settled = true
	if !a.sent {
		a.unreserve(a.m)
	}
	a.br.done(a.permit, time.Now(), outcomeIgnore) // an ignored outcome changes no state
}
