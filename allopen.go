package geminiguard

import (
	"context"
	"log/slog"
	"time"

	"github.com/geminiguard/geminiguard/internal/circuit"
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
	pick, oldest := call.open.pick, call.open.oldest
	if o := &call.open; o.left != 0 || !now.Before(o.soonest.Until) {
		// Not every model was refused as open, or one of them no longer
		// is: look at each.
		pick, oldest = nil, nil
		for _, m := range call.order() {
			switch r := m.breakers[call.endpoint].refusing(now); {
			case r != nil:
				if oldest == nil || r.Since().Before(oldest.Since()) {
					pick, oldest = m, r
				}
			case m.cooling(now) == nil && !call.tried(m):
				return zero, nil, stepNext, nil // usable for all we know, or a probe in flight
			}
		}
	}
	if pick == nil || now.Sub(oldest.Since()) < every {
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

// spaceEarlyProbes holds this Client's next early probe (probeAllOpen) to
// AllOpenProbeEvery after at, when another replica of the fleet found a
// model failing then (a FactOpen): a fleet in an outage probes early as one
// process does, one call every AllOpenProbeEvery, not one per replica.
func (c *Client) spaceEarlyProbes(at time.Time) {
	every := c.cfg.breaker.AllOpenProbeEvery
	if every < 0 {
		return
	}
	next := at.Add(every)
	for {
		due := c.allOpenProbeAt.Load()
		if due != nil && !due.Before(next) || c.allOpenProbeAt.CompareAndSwap(due, &next) {
			return
		}
	}
}

// openSeen is what checkOpen saw of the call's models in the current run
// (of chain.go's run, which sets left to the number of models): the
// refusals of their open breakers, for probeAllOpen to read instead of the
// breakers. Once every model was refused as open, and while the soonest
// refusal lasts, every model is still open (nothing but a call's own
// requests changes a breaker, or another call's: as concurrent as a read
// of the breakers).
type openSeen struct {
	left    int              // the models not refused as open
	soonest *circuit.Refusal // the refusal that ends first
	oldest  *circuit.Refusal // the breaker open the longest: the first refused of those that opened first
	pick    *modelState      // oldest's model
}

// saw records checkOpen's refusal r of m.
func (o *openSeen) saw(m *modelState, r *circuit.Refusal) {
	if o.soonest == nil || r.Until.Before(o.soonest.Until) {
		o.soonest = r
	}
	if o.oldest == nil || r.Since().Before(o.oldest.Since()) {
		o.oldest, o.pick = r, m
	}
	o.left--
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
