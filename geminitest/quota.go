package geminitest

import (
	"time"

	"github.com/geminiguard/geminiguard/internal/pacific"
)

// window is the length of the per-minute quotas: a sliding 60-second window.
const window = time.Minute

// quotaState is the usage of one model's emulated quota. Its zero value is
// unused quota.
type quotaState struct {
	recent   []admitted // requests admitted in the last window, oldest first
	day      time.Time  // the Pacific day dayCount belongs to
	dayCount int        // requests admitted on day
}

type admitted struct {
	at     time.Time
	tokens int
}

// admit charges one request of tokens input tokens at now. If a limit of lim
// would be exceeded it charges nothing and returns the violated quotas and
// how long until the request would be admitted (the longest of their waits).
func (q *quotaState) admit(lim Quota, now time.Time, tokens int) ([]violation, time.Duration) {
	q.expire(now)
	var (
		vs   []violation
		wait time.Duration
	)
	violate := func(k quotaKind, limit int, w time.Duration) {
		vs = append(vs, violation{kind: k, limit: limit})
		wait = max(wait, w)
	}
	if lim.RPM > 0 && len(q.recent) >= lim.RPM {
		violate(requestsPerMinute, lim.RPM, q.recent[len(q.recent)-lim.RPM].at.Add(window).Sub(now))
	}
	if lim.TPM > 0 {
		if w, ok := q.tokenWait(lim.TPM, now, tokens); !ok {
			violate(tokensPerMinute, lim.TPM, w)
		}
	}
	if lim.RPD > 0 && q.dayCount >= lim.RPD {
		violate(requestsPerDay, lim.RPD, pacific.NextMidnight(now).Sub(now))
	}
	if len(vs) > 0 {
		return vs, wait
	}
	q.recent = append(q.recent, admitted{at: now, tokens: tokens})
	q.dayCount++
	return nil, 0
}

// expire drops the requests that left the window and starts a new day at
// Pacific midnight.
func (q *quotaState) expire(now time.Time) {
	i := 0
	for i < len(q.recent) && !now.Before(q.recent[i].at.Add(window)) {
		i++
	}
	q.recent = q.recent[i:]
	if day := pacific.Day(now); !day.Equal(q.day) {
		q.day, q.dayCount = day, 0
	}
}

// tokenWait reports whether tokens more input tokens fit in the window now,
// and if not, how long until they do (a full window when they never fit).
func (q *quotaState) tokenWait(limit int, now time.Time, tokens int) (time.Duration, bool) {
	if tokens > limit {
		return window, false
	}
	used := 0
	for _, a := range q.recent {
		used += a.tokens
	}
	if used+tokens <= limit {
		return 0, true
	}
	var frees time.Time // when enough of the window has expired
	for _, a := range q.recent {
		used -= a.tokens
		frees = a.at.Add(window)
		if used+tokens <= limit {
			break
		}
	}
	return frees.Sub(now), false
}
