package geminiguard

import (
	"context"
	"log/slog"
)

// probeAllOpen makes the call an early probe when it sent nothing because
// every model it may use is out (BreakerSettings.AllOpenProbeEvery): each is
// open or cooling down, at least one is open, and none has a probe in
// flight. The model whose breaker has been open the longest, if for at least
// AllOpenProbeEvery, turns half-open and the call tries it, as its probe; on
// success the call's other open models turn half-open too. At most one call
// per AllOpenProbeEvery across the Client probes early. It returns what tryModel returns, and false,
// having done nothing, when the call does not probe.
func (call *call[R]) probeAllOpen(ctx context.Context) (R, step, error, bool) {
	var zero R
	c := call.c
	every := c.cfg.breaker.AllOpenProbeEvery
	if every < 0 || call.sent() {
		return zero, 0, nil, false
	}
	now := call.now
	var pick *modelState
	var pickUntil int64
	for _, m := range call.order() {
		br := m.breakers[call.endpoint]
		switch {
		case br.state(now) == StateOpen:
			if until := br.openUntilNanos(); pick == nil || until < pickUntil {
				pick, pickUntil = m, until
			}
		case m.cooling(now) == nil:
			return zero, 0, nil, false // a model the call could not use for another reason, or a probe in flight
		}
	}
	due := c.allOpenProbeAt.Load()
	if pick == nil || now.UnixNano() < max(due, pickUntil-int64(c.cfg.breaker.OpenFor-every)) ||
		!c.allOpenProbeAt.CompareAndSwap(due, now.Add(every).UnixNano()) {
		return zero, 0, nil, false
	}
	if l := c.cfg.logger; l != nil {
		l.LogAttrs(ctx, slog.LevelInfo, "geminiguard: every model is open: probing one early",
			slog.String("model", pick.name), slog.String("endpoint", call.endpoint.String()))
	}
	c.stateChanged(pick.name, call.endpoint, pick.breakers[call.endpoint].openEarly(now))
	sl := retrySlot{m: pick}
	resp, next, err := call.tryModel(ctx, &sl)
	if err == nil {
		for _, m := range call.order() {
			if m != pick {
				c.stateChanged(m.name, call.endpoint, m.breakers[call.endpoint].openEarly(call.now))
			}
		}
	}
	return resp, next, err, true
}

// sent reports whether the call made an upstream request so far.
func (call *call[R]) sent() bool {
	for _, a := range call.attempts {
		if !a.Skipped {
			return true
		}
	}
	return false
}
