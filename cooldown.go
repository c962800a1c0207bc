package geminiguard

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/pacific"
)

// retryAfterCoolDown is how long a per-minute quota answer without a
// server-stated delay keeps a model out of rotation. Gemini's stated delays
// are mostly 20–60s ("22s", "45.8s", "53s") and a per-minute window is at
// most a minute away, so a shorter pause would mostly earn another 429.
const retryAfterCoolDown = 30 * time.Second

// maxRetryAfterCoolDown caps the cool-down of a per-minute quota answer,
// whatever delay the server states: a per-minute window resets within a
// minute, so a longer delay is a mistake of the server or of a proxy, and
// one answer must not take a model out for hours. If the quota is still
// exhausted when the cap ends, the next 429 cools the model down again.
const maxRetryAfterCoolDown = 5 * time.Minute

// coolDownForever ends a cool-down that lasts for the process lifetime
// (coolUntilRecheck): only clear or clearRecheck ends it.
var coolDownForever = time.Date(9999, time.December, 31, 0, 0, 0, 0, time.UTC)

// coolDown holds a model (or the whole project) out of rotation until a
// time, after a quota answer, without counting breaker failures. It is safe
// for concurrent use; the zero value is not cooling. The check is one atomic
// load and one comparison. It must not be copied after first use.
type coolDown struct {
	cur     atomic.Pointer[coolDownState] // nil: never set, or cleared
	cleared atomic.Int64                  // unix nanoseconds of the last clear; 0: never
}

// coolDownState is one cool-down; values are never modified once stored.
type coolDownState struct {
	until  time.Time
	reason Class
}

// set makes the cool-down last until the later of its current end and until,
// with reason as the cause when until is the later. It reports whether the
// end moved later, which is also the case when the current cool-down had
// already ended (a new end computed from the present is later): the caller
// reports the cool-down once. An until no later than the current end (or the
// zero time) changes nothing and returns false.
func (c *coolDown) set(until time.Time, reason Class) (extended bool) {
	var next *coolDownState
	for {
		old := c.cur.Load()
		var end time.Time
		if old != nil {
			end = old.until
		}
		if !until.After(end) {
			return false
		}
		if next == nil {
			next = &coolDownState{until: until, reason: reason}
		}
		if c.cur.CompareAndSwap(old, next) {
			return true
		}
	}
}

// until reports whether the cool-down is on at now (now is before its end),
// and if so its end and its reason.
func (c *coolDown) until(now time.Time) (time.Time, Class, bool) {
	s := c.cur.Load()
	if s == nil || !now.Before(s.until) {
		return time.Time{}, ClassNone, false
	}
	return s.until, s.reason, true
}

// clear ends the cool-down at once, whatever its cause (CheckCascade listed
// the models: the project's key works).
func (c *coolDown) clear() {
	c.cur.Store(nil)
	c.cleared.Store(time.Now().UnixNano())
}

// clearedSince reports whether clear ran after t.
func (c *coolDown) clearedSince(t time.Time) bool {
	return c.cleared.Load() > t.UnixNano()
}

// clearRecheck ends a cool-down that lasts until a recheck (coolUntilRecheck:
// a 404, a limit of zero) and leaves any other to run to its end: CheckCascade
// listing a model says it exists, not that its quota is back.
// It reports whether it ended one.
func (c *coolDown) clearRecheck() bool {
	if old := c.cur.Load(); old != nil && old.until.Equal(coolDownForever) {
		return c.cur.CompareAndSwap(old, nil) // lost to a set: that one stays
	}
	return false
}

// coolDownUntil returns the end of the cool-down that v asks for at now:
//   - coolRetryAfter: now + v.RetryAfter capped at
//     maxRetryAfterCoolDown, or now + retryAfterCoolDown when the server
//     stated no delay;
//   - coolUntilMidnight: the next midnight America/Los_Angeles, when
//     daily quotas reset;
//   - coolUntilRecheck: a time no process reaches (year 9999): the
//     process lifetime, unless clear ends it when CheckCascade sees the
//     model again;
//   - coolProject: now + projectCoolDown;
//   - coolNone (and any other value): the zero time, no cool-down.
func coolDownUntil(v Verdict, now time.Time, projectCoolDown time.Duration) time.Time {
	switch v.cool {
	case coolRetryAfter:
		if v.RetryAfter > 0 {
			return now.Add(min(v.RetryAfter, maxRetryAfterCoolDown))
		}
		return now.Add(retryAfterCoolDown)
	case coolUntilMidnight:
		return pacific.NextMidnight(now)
	case coolUntilRecheck:
		return coolDownForever
	case coolProject:
		return now.Add(projectCoolDown)
	}
	return time.Time{}
}

// cooling returns a *ModelError when the model is cooling down at now.
func (m *modelState) cooling(now time.Time) error {
	until, reason, ok := m.cool.until(now)
	if !ok {
		return nil
	}
	if e := m.coolErr.Load(); e != nil {
		if ce := e.Err.(*CoolingError); ce.Until.Equal(until) && ce.Reason == reason {
			return e // the same cool-down: share its error, immutable
		}
	}
	e := &ModelError{
		Model:   m.name,
		Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel},
		Err:     &CoolingError{Model: m.name, Until: until, Reason: reason},
	}
	m.coolErr.Store(e)
	return e
}

// projectCooling returns a *ModelError when the whole project is cooling down.
func (c *Client) projectCooling(now time.Time) error {
	until, reason, ok := c.project.until(now)
	if !ok {
		return nil
	}
	return &ModelError{
		Verdict: Verdict{Class: reason, Scope: ScopeProject},
		Err:     &CoolingError{Until: until, Reason: reason},
	}
}

// applyVerdict makes a failure's verdict reach past the call: cool-downs for
// the model or the project, and the limiter learning from a 429.
func (c *Client) applyVerdict(ctx context.Context, m *modelState, v Verdict, now time.Time) {
	if dim, ok := quotaDimOf(v.quotaID); ok {
		if v.quotaLimit > 0 {
			m.lim.learn(dim, v.quotaLimit)
			c.publish(ctx, fleet.Fact{Kind: fleet.FactLimit, Model: m.name, Dimension: strings.ToLower(dim.String()), At: now, Limit: v.quotaLimit})
		}
		if v.Class == ClassRateLimit || v.Class == ClassDailyQuota {
			m.lim.drain(now, dim, coolDownUntil(v, now, c.cfg.projectCoolDown))
		}
	}
	if v.cool == coolNone {
		return
	}
	until := coolDownUntil(v, now, c.cfg.projectCoolDown)
	shared := fleet.Fact{Kind: fleet.FactCoolDown, Model: m.name, At: now, Until: until, Reason: int(v.Class)}
	if v.cool == coolUntilRecheck {
		shared = fleet.Fact{Kind: fleet.FactMissing, Model: m.name, At: now, Reason: int(v.Class)}
	}
	if v.Scope == ScopeProject {
		shared.Model = ""
		if c.project.set(until, v.Class) {
			c.cooledDown(ctx, CoolDownEvent{Until: until, Reason: v.Class})
			c.publish(ctx, shared)
		}
		return
	}
	if m.cool.set(until, v.Class) {
		c.cooledDown(ctx, CoolDownEvent{Model: m.name, Until: until, Reason: v.Class})
		c.publish(ctx, shared)
	}
}
