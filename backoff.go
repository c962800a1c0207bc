package geminiguard

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/geminiguard/geminiguard/internal/jitter"
)

// Jitter selects how backoff delays are randomised. The zero value is
// JitterFull.
type Jitter int

const (
	// JitterFull waits U(0, min(MaxDelay, BaseDelay·2^(n−1))) before retry n:
	// the least upstream work of the four (AWS Architecture Blog,
	// "Exponential Backoff And Jitter", 2015).
	JitterFull Jitter = iota
	// JitterEqual waits v/2 + U(0, v/2) with v = min(MaxDelay, BaseDelay·2^(n−1)):
	// never less than half the exponential delay.
	JitterEqual
	// JitterDecorrelated waits min(MaxDelay, U(BaseDelay, 3·previous delay)):
	// each delay grows from the previous one rather than from the attempt number.
	JitterDecorrelated
	// JitterNone waits min(MaxDelay, BaseDelay·2^(n−1)) exactly. Clients that
	// failed together retry together: use it only in tests.
	JitterNone
)

// String returns "full", "equal", "decorrelated" or "none".
func (j Jitter) String() string {
	switch j {
	case JitterFull:
		return "full"
	case JitterEqual:
		return "equal"
	case JitterDecorrelated:
		return "decorrelated"
	case JitterNone:
		return "none"
	}
	return fmt.Sprintf("Jitter(%d)", int(j))
}

// Defaults of RetryPolicy; each field's comment says why.
const (
	defaultMaxAttempts        = 4
	defaultBaseDelay          = 500 * time.Millisecond
	defaultMaxDelay           = 8 * time.Second
	defaultMaxRetryAfter      = 60 * time.Second
	defaultBudgetRatio        = 0.1
	defaultBudgetMinPerSecond = 1.0
	maxBudgetRatio            = 1000 // Finagle's and tower's upper bound of percentCanRetry
)

// RetryPolicy says when a Client retries the same model after a retryable
// failure, how long it waits, and how many retries the whole Client may send.
// Whether a failure is retryable at all is the classifier's verdict.
//
// A zero field takes its default; a negative or contradictory value makes New
// fail with an error that names the field. RetryPolicy is a plain value, safe
// to copy and to share between goroutines.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts per model within one call, the
	// first included; 1 never retries. A call walks the cascade in rounds:
	// a retryable failure moves on to the next model at once (it answers
	// sooner than a backoff and a second try of a model that just failed),
	// and after a jittered pause the next round tries again the models that
	// failed that way, primary first. A model is retried in place only when
	// it is the last one that can still answer. Default: 4. The SRE book
	// ("Handling Overload") says "up to three attempts" per request, with a
	// retry budget for the client; the budget is here too (BudgetRatio: the
	// rounds after the first draw on it, so an outage does not multiply
	// load), and with three a call failed when both models of a cascade
	// failed three times each, which a flaky primary and a secondary failing
	// 5–10% of its requests do to one call in a few hundred: in the
	// brownout family (BENCHMARKS.md), success ≥ 99.9% in every cell where
	// an oracle answers every call held in 99.0% of seed 2's cells with
	// three, in all of them with four.
	MaxAttempts int

	// BaseDelay is the backoff before the first retry, doubled for each later
	// one (before jitter). Default: 500ms.
	BaseDelay time.Duration

	// MaxDelay caps one backoff wait. Default: 8s, or BaseDelay when that is
	// longer. A backoff that would overrun the call's deadline is not slept:
	// the next model is tried instead.
	MaxDelay time.Duration

	// MaxRetryAfter is the longest server-stated delay (RetryInfo.retryDelay,
	// "Please retry in 22.5s") the Client waits to retry the same model; a
	// longer one moves to the next model at once. Server-stated delays replace
	// backoff: retrying earlier only earns another 429. Default: 60s, the
	// length of the per-minute quota window, so any per-minute 429 (reported
	// delays run from seconds to 59s) is honoured when no other model can
	// answer, while the call deadline still bounds the wait; with a model left
	// in the cascade, a per-minute 429 moves on without waiting. Set 1ns to
	// never wait on a server-stated delay.
	MaxRetryAfter time.Duration

	// Jitter randomises backoff delays. Default: JitterFull.
	Jitter Jitter

	// BudgetRatio bounds the retries of the whole Client: over the last 10s,
	// retries may not exceed this fraction of first attempts (plus the
	// BudgetMinPerSecond floor), so an outage cannot multiply upstream load.
	// It must be at most 1000. Default: 0.1 (Google SRE book, "Handling
	// Overload": retry only while retries are below 10% of requests, which
	// caps growth at 1.1×).
	BudgetRatio float64

	// BudgetMinPerSecond is a rate of retries the budget always allows on top
	// of BudgetRatio, so a Client with little traffic can still retry (the
	// floor of Finagle's RetryBudget).
	// Default: 1 per second.
	BudgetMinPerSecond float64
}

// withDefaults returns p with every zero field set to its default. Negative
// and invalid values are kept for validate to report.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts == 0 {
		p.MaxAttempts = defaultMaxAttempts
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = defaultBaseDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = max(defaultMaxDelay, p.BaseDelay)
	}
	if p.MaxRetryAfter == 0 {
		p.MaxRetryAfter = defaultMaxRetryAfter
	}
	if p.Jitter == JitterFull {
		p.Jitter = JitterFull
	}
	if p.BudgetRatio == 0 {
		p.BudgetRatio = defaultBudgetRatio
	}
	if p.BudgetMinPerSecond == 0 {
		p.BudgetMinPerSecond = defaultBudgetMinPerSecond
	}
	return p
}

// validate reports every problem of p (after its defaults) at once, each
// naming the field and what to do, joined with errors.Join; nil when none.
func (p RetryPolicy) validate() error {
	p = p.withDefaults()
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("geminiguard: RetryPolicy."+format, args...))
	}
	if p.MaxAttempts < 0 {
		add("MaxAttempts (%d) is negative: use 1 to never retry, or 0 for the default (%d)", p.MaxAttempts, defaultMaxAttempts)
	}
	if p.BaseDelay < 0 {
		add("BaseDelay (%v) is negative: use a positive delay, or 0 for the default (%v)", p.BaseDelay, defaultBaseDelay)
	}
	if p.MaxDelay < 0 {
		add("MaxDelay (%v) is negative: use a positive delay, or 0 for the default (%v)", p.MaxDelay, defaultMaxDelay)
	}
	if p.BaseDelay > 0 && p.MaxDelay > 0 && p.MaxDelay < p.BaseDelay {
		add("MaxDelay (%v) is below BaseDelay (%v): raise MaxDelay or lower BaseDelay", p.MaxDelay, p.BaseDelay)
	}
	if p.MaxRetryAfter < 0 {
		add("MaxRetryAfter (%v) is negative: use 0 for the default (%v), or 1ns to never wait on a server-stated delay", p.MaxRetryAfter, defaultMaxRetryAfter)
	}
	if p.Jitter < JitterFull || p.Jitter > JitterNone {
		add("Jitter (%v) is not a known Jitter: use JitterFull, JitterEqual, JitterDecorrelated or JitterNone", p.Jitter)
	}
	if !(p.BudgetRatio > 0 && p.BudgetRatio <= maxBudgetRatio) {
		add("BudgetRatio (%v) must be in (0, %d]: 0.1 lets retries add at most 10%% to first attempts", p.BudgetRatio, maxBudgetRatio)
	}
	if !(p.BudgetMinPerSecond > 0 && !math.IsInf(p.BudgetMinPerSecond, 1)) {
		add("BudgetMinPerSecond (%v) must be a positive number of retries per second, or 0 for the default (%v)", p.BudgetMinPerSecond, defaultBudgetMinPerSecond)
	}
	return errors.Join(errs...)
}

// retryDelay decides the wait before retrying the same model after a
// retryable failure on attempt number attempt (1 for the wait before the
// second attempt). A server-stated delay (serverDelay > 0) is used as it is,
// or, when it exceeds MaxRetryAfter, refused: ok is false and the caller moves
// to the next model now. Without one it is backoffDelay with p's jitter; prev
// is the previous wait (for JitterDecorrelated) and r a uniform draw in [0, 1).
// p must have its defaults applied. Pure: safe for concurrent use.
func (p RetryPolicy) retryDelay(serverDelay, prev time.Duration, attempt int, r float64) (d time.Duration, ok bool) {
	if serverDelay > 0 {
		if serverDelay > p.MaxRetryAfter {
			return 0, false
		}
		return serverDelay, true
	}
	return backoffDelay(p.Jitter, p.BaseDelay, p.MaxDelay, prev, attempt, r), true
}

// backoffDelay returns the backoff before retry number attempt (1 for the
// delay before the second attempt; values below 1 count as 1), never more
// than maxDelay. prev is the previous delay (JitterDecorrelated only; below base it
// counts as base) and r a uniform draw in [0, 1). With v = min(maxDelay,
// base·2^(attempt−1)):
//
//	JitterFull (and JitterFull)  U(0, v)
//	JitterEqual                     v/2 + U(0, v/2)
//	JitterDecorrelated              min(maxDelay, U(base, 3·prev))
//	JitterNone                      v
//
// The formulas are those of Marc Brooker's "Exponential Backoff And Jitter"
// (AWS Architecture Blog, 2015). Large attempts and delays saturate at maxDelay
// instead of overflowing. Pure: safe for concurrent use.
func backoffDelay(j Jitter, base, maxDelay, prev time.Duration, attempt int, r float64) time.Duration {
	return jitter.Delay(j.kind(), base, maxDelay, prev, attempt, r)
}

// kind maps j to its formula; JitterFull is full jitter.
func (j Jitter) kind() jitter.Kind {
	switch j {
	case JitterEqual:
		return jitter.Equal
	case JitterDecorrelated:
		return jitter.Decorrelated
	case JitterNone:
		return jitter.None
	}
	return jitter.Full
}

// budgetSlots is the number of slots the retry budget's ttl is divided into,
// as in Finagle's and tower's windowed token bucket.
const budgetSlots = 10

// budgetScale turns fractional credit into integers: 1 retry = budgetScale.
const budgetScale = 1_000_000

// retryBudget bounds the retries of a whole Client in the manner of Finagle's
// RetryBudget (https://finagle.github.io/blog/2016/02/08/retry-budgets): each
// first attempt deposits ratio credit, each retry withdraws 1, and a floor of
// minPerSecond·ttl retries per ttl is always allowed. Deposits and withdrawals
// expire after ttl (kept in budgetSlots slots of ttl/budgetSlots, so an entry
// counts for between 0.9·ttl and ttl). Over any ttl, retries ≤ ratio·first
// attempts + minPerSecond·ttl.
//
// A second budget of the same first attempts and ttl may keep its ledger
// beside the first, under the same lock and slot clock (fundCuts): a first
// attempt's deposit then funds both at once.
//
// Time is an argument. A retryBudget is safe for concurrent use; each call is
// O(1) and allocates nothing. Use newRetryBudget: the zero value allows no
// retries.
type retryBudget struct {
	width time.Duration // length of one slot

	mu        sync.Mutex   // guards the fields below
	epoch     time.Time    // first time seen; slot numbers count from it
	head      int64        // number of the newest slot
	own, cuts budgetLedger // cuts: fundCuts's ledger (funded by nothing without it)
}

// budgetLedger is one budget's credit in its retryBudget's slots.
type budgetLedger struct {
	deposits int64              // credit of one first attempt, in budgetScale units
	reserve  int64              // the floor: minPerSecond·ttl withdrawals, in budgetScale units
	slots    [budgetSlots]int64 // credit per slot, indexed by slot number mod budgetSlots
	sum      int64              // sum of slots
}

// newRetryBudget returns a budget that allows, over any ttl, ratio retries per
// first attempt plus minPerSecond retries per second. ratio and minPerSecond
// must be finite and non-negative, and ttl at least budgetSlots nanoseconds
// (Finagle allows 1s to 60s); RetryPolicy.validate checks the first two.
func newRetryBudget(ratio, minPerSecond float64, ttl time.Duration) *retryBudget {
	b := &retryBudget{width: ttl / budgetSlots}
	b.own.fund(ratio, minPerSecond, ttl)
	return b
}

// allows reports whether the ledger allows a withdrawal, its slots advanced
// to the present. b.mu of its retryBudget must be held.
func (l *budgetLedger) allows() bool { return l.sum+l.reserve >= budgetScale }

// fund sets the ledger's credit per first attempt (ratio) and its floor
// (minPerSecond over ttl).
func (l *budgetLedger) fund(ratio, minPerSecond float64, ttl time.Duration) {
	l.deposits = saturate(ratio * budgetScale)
	l.reserve = saturate(minPerSecond * ttl.Seconds() * budgetScale)
}

// fundCuts gives b a second budget of the same first attempts and ttl, the
// cut budget (latency.go), which allows ratio withdrawals per first attempt
// deposited in b plus minPerSecond a second, and returns it. Call it before
// b is shared.
func (b *retryBudget) fundCuts(ratio, minPerSecond float64) cutBudget {
	b.cuts.fund(ratio, minPerSecond, b.width*budgetSlots)
	return cutBudget{b}
}

// saturate rounds f to an int64 credit no larger than a quarter of the int64
// range, so sums of several cannot overflow.
func saturate(f float64) int64 {
	const limit = math.MaxInt64 / 4
	if f >= limit {
		return limit
	}
	return int64(math.Round(f))
}

// deposit records a first attempt made at now, in b and in its cut budget.
func (b *retryBudget) deposit(now time.Time) {
	b.mu.Lock()
	i := b.advance(now)
	b.own.slots[i] += b.own.deposits
	b.own.sum += b.own.deposits
	b.cuts.slots[i] += b.cuts.deposits
	b.cuts.sum += b.cuts.deposits
	b.mu.Unlock()
}

// allows reports whether withdraw would succeed at now, recording nothing.
func (b *retryBudget) allows(now time.Time) bool { return b.allowsOf(&b.own, now) }

// credits returns how many retries withdraw would allow at now, were no
// other withdrawal made meanwhile.
func (b *retryBudget) credits(now time.Time) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return max(0, (b.own.sum+b.own.reserve)/budgetScale)
}

// withdraw reports whether a retry may be sent at now, and if so records it.
func (b *retryBudget) withdraw(now time.Time) bool { return b.withdrawFrom(&b.own, now) }

// refund gives back, at now, the credit of a withdrawal from b that
// another budget paid for after all.
func (b *retryBudget) refund(now time.Time) {
	b.mu.Lock()
	i := b.advance(now)
	b.own.slots[i] += budgetScale
	b.own.sum += budgetScale
	b.mu.Unlock()
}

// allowsOf reports whether l, one of b's ledgers, allows a withdrawal at now.
func (b *retryBudget) allowsOf(l *budgetLedger, now time.Time) bool {
	b.mu.Lock()
	b.advance(now)
	ok := l.allows()
	b.mu.Unlock()
	return ok
}

// withdrawFrom reports whether l, one of b's ledgers, allows a withdrawal
// at now, and if so records it.
func (b *retryBudget) withdrawFrom(l *budgetLedger, now time.Time) bool {
	b.mu.Lock()
	i := b.advance(now)
	ok := l.allows()
	if ok {
		l.slots[i] -= budgetScale
		l.sum -= budgetScale
	}
	b.mu.Unlock()
	return ok
}

// advance expires the slots older than ttl at now and returns the index of
// the slot now falls in. A now before the newest slot (a caller that read its
// clock before another) counts in the newest slot. b.mu must be held.
func (b *retryBudget) advance(now time.Time) int {
	if b.epoch.IsZero() {
		b.epoch = now
	}
	n := int64(now.Sub(b.epoch) / b.width)
	if n > b.head {
		for s := max(b.head+1, n-budgetSlots+1); s <= n; s++ {
			i := s % budgetSlots
			b.own.sum -= b.own.slots[i]
			b.own.slots[i] = 0
			b.cuts.sum -= b.cuts.slots[i]
			b.cuts.slots[i] = 0
		}
		b.head = n
	}
	return int(b.head % budgetSlots)
}

// cutBudget is the cut budget of a retryBudget (fundCuts): its ledger, in
// the retryBudget's slots, funded by the retryBudget's deposits.
type cutBudget struct{ b *retryBudget }

// allows reports whether withdraw would succeed at now, recording nothing.
func (v cutBudget) allows(now time.Time) bool { return v.b.allowsOf(&v.b.cuts, now) }

// allowsWithRetry reports whether, at now, the cut budget allows a cut and
// its retryBudget the retry the cut leads to: both ledgers read under one
// lock.
func (v cutBudget) allowsWithRetry(now time.Time) bool {
	b := v.b
	b.mu.Lock()
	b.advance(now)
	ok := b.cuts.allows() && b.own.allows()
	b.mu.Unlock()
	return ok
}

// withdraw reports whether a cut may be made at now, and if so records it.
func (v cutBudget) withdraw(now time.Time) bool { return v.b.withdrawFrom(&v.b.cuts, now) }

// jitterDraws draws the uniform numbers in [0, 1) that randomise retry
// delays: from math/rand/v2's global generator, or, with a source
// (WithJitterSource), from it under a lock. Safe for concurrent use. The
// zero value draws from the global generator; it must not be copied.
type jitterDraws struct {
	mu  sync.Mutex
	rnd *rand.Rand // nil: the global generator
}

// float64 returns the next draw.
func (j *jitterDraws) float64() float64 {
	if j.rnd == nil {
		return rand.Float64()
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rnd.Float64()
}
