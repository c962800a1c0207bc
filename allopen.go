package geminiguard

import (
	"context"
	"log/slog"
	"time"
)

// probeAllOpen makes the call an early probe when it has no model left to
// try and at least one is open (BreakerSettings.AllOpenProbeEvery): each of
// its models is open, cooling down, or already failed in this call, and
// none has a probe in flight. The call would fail anyway; instead the model
// whose breaker has been open the longest, if for at least
// AllOpenProbeEvery, turns half-open and the call tries it, as its probe. On
// success the call's other open models turn half-open too. At most one call
// per AllOpenProbeEvery across the Client probes early. It returns what
// retry returns, with the model probed; stepNext and no error, having done
// nothing, when the call does not probe.
func (call *call[R]) probeAllOpen(ctx context.Context) (R, *modelState, step, error) {
	var zero R
	c := call.c
	every, now, due := c.cfg.breaker.AllOpenProbeEvery, call.now, c.allOpenProbeAt.Load()
	if every < 0 || due != nil && now.Before(*due) {
		return zero, nil, stepNext, nil
	}
	var pick *modelState
	var pickSince time.Time
	for _, m := range call.order() {
		br := m.breakers[call.endpoint]
		switch {
		case br.state(now) == StateOpen:
			if since := br.openSince(); pick == nil || since.Before(pickSince) {
				pick, pickSince = m, since
			}
		case m.cooling(now) == nil && !call.tried(m):
			return zero, nil, stepNext, nil // usable for all we know, or a probe in flight
		}
	}
	if pick == nil || now.Before(pickSince.Add(every)) {
		return zero, nil, stepNext, nil
	}
	probeAt := now.Add(every) // a variable, not new(expr): the module builds with Go 1.25; made only when a probe is due
	if !c.allOpenProbeAt.CompareAndSwap(due, &probeAt) {
		return zero, nil, stepNext, nil
	}
	if l := c.cfg.logger; l != nil {
		l.LogAttrs(ctx, slog.LevelInfo, "geminiguard: no model left but open ones: probing one early",
			slog.String("model", pick.name), slog.String("endpoint", call.endpoint.String()))
	}
	c.stateChanged(ctx, pick.name, call.endpoint, pick.breakers[call.endpoint].openEarly(now))
	sl := retrySlot{m: pick}
	resp, next, err := call.retry(ctx, &sl)
	if next == stepDone {
		for _, m := range call.order() {
			if m != pick {
				c.stateChanged(ctx, m.name, call.endpoint, m.breakers[call.endpoint].openEarly(call.now))
			}
		}
	}
	return resp, pick, next, err
}

// tried reports whether the call sent m a request.
func (call *call[R]) tried(m *modelState) bool {
	for _, a := range call.attempts {
		if !a.Skipped && a.Model == m.name {
			return true
		}
	}
	return false
}
