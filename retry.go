package geminiguard

import (
	"context"
	"time"
)

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

// retrySlot is a model's place in a call's rounds: its attempts so far, the
// wait before its next attempt and its previous backoff.
type retrySlot struct {
	m     *modelState
	tries int
	prev  time.Duration // the previous backoff, which decorrelated jitter grows from
	delay time.Duration // the wait before the next attempt, for the record
}

// retry runs sl's model's attempts within one round of the call: admit,
// send, settle, decide, back off, until the model answers (stepDone with
// the answer) or another step is due (with the error that asks for it).
func (call *call[R]) retry(ctx context.Context, sl *retrySlot) (R, step, error) {
	var zero R
	for {
		sl.tries++
		var a admission
		if next, err := call.admit(ctx, sl, &a); next != stepGo {
			return zero, next, err
		}
		resp, v, elapsed, err := call.try(ctx, &a, sl.tries)
		call.c.tel.attempt(ctx, sl.m, a.br, sl.tries, sl.delay, elapsed, v, call.now)
		if err == nil {
			call.answered(sl.m.name, sl.delay, elapsed)
			return resp, stepDone, nil
		}
		next, d, err := call.decide(sl, v, err)
		err = call.fail(sl.m.name, &ModelError{Model: sl.m.name, Verdict: v, Err: err}, sl.delay, elapsed)
		if next != stepRetry {
			return zero, next, err
		}
		if err := call.backoff(ctx, sl, v, err, d); err != nil {
			return zero, stepStop, err
		}
	}
}

// try sends the admitted request (the n-th to its model in this call) and
// settles the admission: at once, or, for a stream that opened, when the
// stream ends (the admission is then handed to call.stream). A panic
// anywhere in between still settles it. A failure's verdict reaches past
// the call (cool-downs, learned limits) before try returns.
func (call *call[R]) try(ctx context.Context, a *admission, n int) (R, Verdict, time.Duration, error) {
	defer a.abandon()
	c, m := call.c, a.m
	c.stateChanged(ctx, m.name, call.endpoint, a.opened)
	if n == 1 {
		c.budget.deposit(call.now)
	} else {
		m.counters.retries.Add(1)
	}
	resp, v, elapsed, err := call.attempt(ctx, a)
	end := call.now
	switch {
	case err == nil && call.stream != nil:
		call.stream.held = *a // its outcome is known when the stream ends
		a.settled, a.hold = true, budgetHold{}
	default:
		c.settle(a, end, err, v)
	}
	call.account(m, resp, end)
	if err != nil {
		c.applyVerdict(ctx, m, v, end)
	} else if call.usage != nil && call.tokens >= 0 {
		m.lim.reconcile(end, call.tokens, int(call.usage(resp)))
		if call.c.fleet != nil && m.lim.limitsTokens() {
			m.lease.owe(int(call.usage(resp)) - max(call.tokens, 0))
		}
	}
	return resp, v, elapsed, err
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
	case v.Class == ClassCanceled, v.Scope == ScopeRequest:
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
