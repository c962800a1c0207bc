package geminiguard

import (
	"fmt"
	"time"
)

// BulkheadLimit is how a Bulkhead sets the number of its calls that run at once
// (Bulkhead.Limit). The zero value is LimitFixed.
//
// It is one exported type with three values, not a policy interface: the
// two adaptive algorithms are those issue 13 asked to measure against a
// fixed limit (BENCHMARKS.md, "Adaptive bulkhead limits"), their parameters are
// the published defaults, and a caller chooses among them without tuning
// anything but the ceiling.
type BulkheadLimit int

const (
	// LimitFixed runs MaxConcurrent calls at once, always. It is the
	// default: measured against the adaptive limits (BENCHMARKS.md,
	// "Adaptive bulkhead limits"), a fixed limit sized for the model keeps
	// the other features' latency lowest (about half the adaptive limits'
	// p95), the same on every run; the adaptive limits win only against a
	// fixed limit set too high.
	LimitFixed BulkheadLimit = iota
	// LimitAIMD is an additive-increase, multiplicative-decrease limit, as
	// Netflix concurrency-limits' AIMDLimit: each call that returns within
	// twice the bulkhead's no-load latency (a slow average of its calls'
	// latencies) raises the limit by one while at least half of it is in
	// use; each slower call cuts it to 0.9 times. Netflix's AIMD backs off
	// past a fixed timeout; a Gemini call's latency depends on the model
	// and the prompt, so the threshold follows the bulkhead's own latency.
	// The choice when the right MaxConcurrent cannot be known: under a
	// generous ceiling it kept the other features' p95 at about twice a
	// well-sized fixed limit's, where a fixed limit set too high let it
	// grow fourfold or more.
	LimitAIMD
	// LimitGradient is Netflix concurrency-limits' Gradient2Limit: after
	// each call, the limit moves a fifth of the way toward
	// limit × gradient + 4, the gradient being 1.5 times the no-load
	// latency over the call's latency, kept within [0.5, 1]; it holds
	// still while less than half of it is in use. Under any overload it
	// settles no lower than 8 (or MaxConcurrent), twice its allowance of
	// 4 queued calls.
	LimitGradient
)

// String returns the BulkheadLimit's name: "fixed", "aimd" or "gradient".
func (l BulkheadLimit) String() string {
	switch l {
	case LimitFixed:
		return "fixed"
	case LimitAIMD:
		return "aimd"
	case LimitGradient:
		return "gradient"
	}
	return fmt.Sprintf("BulkheadLimit(%d)", int(l))
}

// The adaptive limits' parameters: Netflix concurrency-limits' defaults
// (AIMDLimit, Gradient2Limit, ExpAvgMeasurement), except where noted.
const (
	// adaptiveStart is the limit an adaptive bulkhead starts at (at most
	// MaxConcurrent), as Netflix's initialLimit is 20: small enough that a
	// first burst meets a limit that has already learned something.
	adaptiveStart = 4
	baseWarmup    = 10  // calls whose plain mean starts the no-load latency
	baseWindow    = 600 // the no-load latency's moving average spans this many calls
	aimdBackoff   = 0.9 // the limit after a slow call, as a share of the limit
	aimdSlow      = 2.0 // a call slower than this times the no-load latency is slow (Netflix: a fixed timeout)
	gradTolerance = 1.5 // latency up to this times the no-load one does not lower the limit
	gradSmoothing = 0.2 // the share of the way to its new value the limit moves after each call
	gradQueue     = 4   // calls the gradient lets queue at the model
)

// adaptiveLimit is the algorithm of an adaptive bulkhead: a pure machine
// fed each call's latency and the calls in flight when it ended. It is not
// safe for concurrent use (the bulkhead's mu guards it) and reads no
// clock. Its zero value is not valid: see newAdaptiveLimit.
type adaptiveLimit struct {
	algo    BulkheadLimit
	ceiling float64
	limit   float64 // now; within [1, ceiling]
	base    float64 // the no-load latency, in nanoseconds: a slow moving average
	samples int     // calls seen, up to baseWarmup
}

// newAdaptiveLimit returns the algo limit under ceiling (≥ 1).
func newAdaptiveLimit(algo BulkheadLimit, ceiling int) adaptiveLimit {
	return adaptiveLimit{algo: algo, ceiling: float64(ceiling), limit: float64(min(ceiling, adaptiveStart))}
}

// current returns the number of calls that may run at once now.
func (a *adaptiveLimit) current() int { return int(a.limit) }

// update learns from one call that held its slot for rtt and ended with
// inFlight calls holding slots, itself included; dropped when it ended on a
// sign of overload (see overloaded). AIMD backs off on a dropped call as on
// a slow one (Netflix's AIMDLimit does on didDrop); the gradient reads
// latency alone, as Gradient2Limit does. A dropped call's latency (a 503
// comes fast) does not teach the no-load latency.
func (a *adaptiveLimit) update(rtt time.Duration, inFlight int, dropped bool) {
	if dropped {
		if a.algo == LimitAIMD {
			a.limit = min(max(float64(int(a.limit*aimdBackoff)), 1), a.ceiling)
		}
		return
	}
	r := max(float64(rtt), 1)
	if a.samples < baseWarmup {
		a.samples++
		a.base += (r - a.base) / float64(a.samples)
	} else {
		const f = 2.0 / (baseWindow + 1)
		a.base = a.base*(1-f) + r*f
	}
	// Latency back to normal after a long overload: the average, raised
	// by the overload, comes down faster (Gradient2Limit's rule).
	if a.base/r > 2 {
		a.base *= 0.95
	}
	switch a.algo {
	case LimitAIMD:
		if r > aimdSlow*a.base {
			a.limit = float64(int(a.limit * aimdBackoff))
		} else if 2*inFlight >= int(a.limit) {
			a.limit++
		}
	case LimitGradient:
		if float64(inFlight) < a.limit/2 {
			return // the feature sends too little to tell
		}
		gradient := min(max(gradTolerance*a.base/r, 0.5), 1)
		next := a.limit*gradient + gradQueue
		a.limit = a.limit*(1-gradSmoothing) + next*gradSmoothing
	}
	a.limit = min(max(a.limit, 1), a.ceiling)
}

// release gives an adaptive bulkhead's slot back after its call held it for
// rtt, and sets the slots free to the new limit: the bulkhead holds
// cap(slots) - limit slots itself (reserved), taking them as calls leave
// when the limit falls and handing them to the queue, longest waiting first,
// when it rises. Nothing here blocks: it receives only slots it knows are
// held and sends only where there is room.
func (b *bulkhead) release(rtt time.Duration, dropped bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lim.update(rtt, len(b.slots)-b.reserved, dropped)
	want := cap(b.slots) - b.lim.current()
	if b.reserved < want {
		b.reserved++ // the call's own slot
	} else {
		<-b.slots
	}
	for ; b.reserved > want; b.reserved-- {
		<-b.slots
	}
	for b.reserved < want {
		select {
		case b.slots <- struct{}{}:
			b.reserved++
		default:
			want = b.reserved // the rest, from the next calls to leave
		}
	}
	b.limit.Store(int64(b.lim.current()))
}

// overloaded reports whether a call that ended with err met a sign that the
// models behind the bulkhead are overloaded: answers of 503, 5xx or 429, or
// attempts that timed out. A refused request, a blocked prompt or the
// caller giving up says nothing of their load.
func overloaded(err error) bool {
	if err == nil {
		return false
	}
	switch Classify(err).Class {
	case ClassOverloaded, ClassServerError, ClassRateLimit, ClassTimeout:
		return true
	}
	return false
}
