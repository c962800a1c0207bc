package geminiguard

import (
	"context"
	"log/slog"
	"time"
)

// The gate of one model: the admission steps of chain.go's admit take what
// a request needs before it may leave (the limiter's grant, the fleet's
// lease, the breaker's permit), and settle gives the breaker the request's
// outcome, the two steps of gobreaker's beforeRequest/afterRequest. Every
// admission is settled exactly once, on every path: by settle when the
// request's outcome is known, by abandon when a panic (the SDK's, a hook's,
// a stream consumer's) ends the call first. A probe permit that was never
// settled would hold its slot for good.

// admission is a model's leave to send one request of a call: a limiter
// grant and a breaker permit, taken together by admit. Its zero value holds
// nothing.
type admission struct {
	m            *modelState
	br           *breaker // m's breaker of the call's endpoint
	grant        grant
	alone        grant // the fleet's limits divided by the replicas, the shared state being unreachable (fleet.go)
	images       grant // the images of an image call, from the model's IPM limiter (images.go)
	leased       bool  // a request (and leasedTokens) was taken from the model's fleet lease
	leasedTokens int
	tokens       int // the request's input token estimate, for the limiter and the lease
	permit       permit
	endpoint     endpoint
	opened       *transition     // the change allow made (open → half-open), reported once the request goes
	hold         budgetHold      // the request's estimated cost, counted against the budget until abandon
	sent         bool            // the request left: its grant is spent whatever comes back
	settled      bool            // the permit was handed back
	ctx          context.Context // the call's, for the reports of settle
}

// admitStep names one defence's say in admit, which runs the steps in the
// order of their constants. Its check (the call's method that admit's
// switch names for it) returns stepGo when the call's next request to sl's
// model may go as far as this defence is concerned, filling its part of a;
// else, having recorded why, stepNext or stepStop with the error. A step
// that refuses may leave in a what it took: admit gives it back
// (unreserve).
type admitStep uint8

// The steps of admit, in the order it runs them.
const (
	admitDeadline admitStep = iota // the call's deadline has not passed
	admitConfig                    // WithModelConfig's adjustment makes a valid request
	admitBudget                    // WithBudget: not spent, or steered to a cheaper model
	admitCooling                   // no quota, 404 or project cool-down
	admitOpen                      // the breaker is not open
	admitThrottle                  // adaptive throttling of a model failing most requests
	admitLimiter                   // RPM, TPM, RPD and IPM tokens, waited for when no other model can answer
	admitFleet                     // the fleet's lease (WithSharedState)
	admitPermit                    // the breaker's permit (a probe when half-open)
	numAdmitSteps
)

// admitStepsFor returns c's admission steps, in order: all of them but
// those of a defence c's options leave out (WithModelConfig, WithBudget,
// WithSharedState), whose checks could only say go.
func admitStepsFor(c *Client) []admitStep {
	steps := make([]admitStep, 0, numAdmitSteps)
	for s := range numAdmitSteps {
		switch {
		case s == admitConfig && len(c.cfg.adjust) == 0,
			s == admitBudget && c.spending == nil,
			s == admitFleet && c.fleet == nil:
			continue
		}
		steps = append(steps, s)
	}
	return steps
}

// String returns the step's name, as the Debug log line of a refusal gives it.
func (s admitStep) String() string {
	return [...]string{"deadline", "config", "budget", "cooling", "open", "throttle", "limiter", "fleet", "permit"}[s]
}

// checkDeadline refuses the request of a call whose deadline has passed
// (admit lets the others go without asking): with the caller's error when
// it is the caller's deadline, else the call timeout's.
func (call *call[R]) checkDeadline(ctx context.Context, sl *retrySlot) (step, error) {
	m := sl.m
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

// checkConfig refuses a model whose WithModelConfig adjustment makes the
// request malformed (model.go).
func (call *call[R]) checkConfig(sl *retrySlot) (step, error) {
	if err := call.adjustFlaw(sl.m); err != nil {
		call.skip(sl.m, err, sl.delay)
		return stepNext, err
	}
	return stepGo, nil
}

// checkBudget refuses when the spend budget is spent, or steers the call to
// a cheaper model; else it reserves the request's estimated cost, in fleet
// mode against the project's total (budget.go). Its shared read and
// reservation may take a round trip each: the clock is read after them.
func (call *call[R]) checkBudget(ctx context.Context, sl *retrySlot, a *admission) (step, error) {
	next, err := call.overBudget(ctx, sl.m)
	if next == stepGo {
		next, err = call.holdBudget(ctx, sl.m, a)
	}
	if next != stepGo {
		call.skip(sl.m, err, sl.delay)
	}
	return next, err
}

// checkCooling refuses a model cooling down after a quota answer or a 404
// (cooldown.go).
func (call *call[R]) checkCooling(sl *retrySlot) (step, error) {
	if !call.endpoint.cools() {
		return stepGo, nil
	}
	if err := sl.m.cooling(call.now); err != nil {
		call.skip(sl.m, err, sl.delay)
		return stepNext, err
	}
	return stepGo, nil
}

// checkOpen refuses a model whose breaker is open (breaker.go), before any
// token is taken for it, and keeps the breaker's refusal for probeAllOpen
// (call.open).
func (call *call[R]) checkOpen(sl *retrySlot) (step, error) {
	m := sl.m
	r := m.breakers[call.endpoint].refusing(call.now)
	if r == nil {
		return stepGo, nil
	}
	call.open.saw(m, r)
	call.skip(m, m.openErr, sl.delay)
	return stepNext, m.openErr
}

// checkThrottle refuses, at random, a model failing most of its recent
// requests while another model can answer (route.go), on the call's first
// try of it only: the call comes back to it in its next round (stepLater),
// once the models it went to instead failed too, and the throttle no longer
// applies then. A model that answers a fraction of its requests is a better
// bet than failing the call.
func (call *call[R]) checkThrottle(sl *retrySlot) (step, error) {
	if sl.tries > 1 {
		return stepGo, nil
	}
	if skip, err := call.throttled(sl.m); skip {
		call.skip(sl.m, err, sl.delay)
		return stepLater, err
	}
	return stepGo, nil
}

// takeTokens takes the model's limiter grant (bucket.go), and an image
// call's images from the model's IPM limiter, waiting for them when no
// other model can answer at once (reserve).
func (call *call[R]) takeTokens(ctx context.Context, sl *retrySlot, a *admission) (step, error) {
	m := sl.m
	if call.endpoint.metered() && m.lim.enforces() {
		if next, err := call.reserve(ctx, sl, m, m.lim, a.tokens, &a.grant); next != stepGo {
			return next, err
		}
	}
	if lim := call.c.imageLimits[m.name]; lim != nil && call.images > 0 {
		return call.reserve(ctx, sl, m, lim, call.images, &a.images)
	}
	return stepGo, nil
}

// takeLease takes the request from the model's fleet lease (fleet.go),
// with a round trip to the shared state when the lease is spent: the clock
// is read after it.
func (call *call[R]) takeLease(ctx context.Context, sl *retrySlot, a *admission) (step, error) {
	if call.c.fleet == nil || !call.endpoint.metered() {
		return stepGo, nil
	}
	next, err := call.fleetAdmit(ctx, sl, sl.m, a.tokens, a)
	call.now = time.Now()
	return next, err
}

// takePermit takes the breaker's permit (breaker.go): a probe's slot when
// half-open, which in fleet mode only one replica of the fleet takes.
func (call *call[R]) takePermit(ctx context.Context, sl *retrySlot, a *admission) (step, error) {
	m := sl.m
	br := m.breakers[call.endpoint]
	p, tr, err := br.allow(call.now)
	if err == nil && p.Probe() && call.c.fleet != nil && !call.fleetProbe(ctx, m) {
		br.done(p, call.now, outcomeIgnore) // another replica probes the model
		err = ErrCircuitOpen
	}
	if err != nil {
		err = &ModelError{Model: m.name, Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel}, Err: err}
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	a.br, a.permit, a.opened = br, p, tr
	if p.Early() && call.endpoint == endpointGenerate && call.c.reportAwaiting(ctx, m, call.now) {
		call.now = time.Now() // after the round trip: the request starts now
	}
	return stepGo, nil
}

// logRefusal logs, at Debug, the admission step that refused m's request.
func (c *Client) logRefusal(ctx context.Context, m *modelState, step admitStep, err error) {
	if l := c.cfg.logger; l != nil && l.Enabled(ctx, slog.LevelDebug) {
		l.LogAttrs(ctx, slog.LevelDebug, "geminiguard: not admitted", slog.String("model", m.name),
			slog.String("step", step.String()), slog.Any("err", err))
	}
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

// holds reports whether a holds anything unreserve gives back.
func (a *admission) holds() bool {
	return a.grant.l != nil || a.alone.l != nil || a.images.l != nil || a.leased || a.hold.s != nil
}

// unreserve gives back what admit took for m's request before the breaker
// refused it or a panic ended the call before it left: the limiter's
// grants, the leased request and the budget's hold.
func (a *admission) unreserve(m *modelState) {
	for _, g := range [...]*grant{&a.grant, &a.alone, &a.images} {
		if g.l != nil { // nothing to copy or clear for a grant not taken
			g.cancel()
			*g = grant{}
		}
	}
	if a.leased {
		m.lease.giveBack(a.leasedTokens)
		a.leased = false
	}
	a.hold.release()
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
