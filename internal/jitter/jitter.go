// Package jitter holds the backoff formulas of Marc Brooker's "Exponential
// Backoff And Jitter" (AWS Architecture Blog, 2015) as pure functions, so
// that the library and the retry-storm reproduction in
// examples/internal/scenario compute exactly the same delays.
package jitter

import (
	"math"
	"time"
)

// Kind selects a formula.
type Kind int

const (
	Full         Kind = iota // U(0, min(max, base·2^(attempt-1)))
	Equal                    // v/2 + U(0, v/2), v = min(max, base·2^(attempt-1))
	Decorrelated             // min(max, U(base, 3·prev))
	None                     // min(max, base·2^(attempt-1))
)

// Delay returns the wait before attempt+1: attempt is 1 for the wait after
// the first failure; prev is the previous wait (Decorrelated only); r is a
// uniform draw in [0, 1). It never overflows and never exceeds maxDelay.
func Delay(k Kind, base, maxDelay, prev time.Duration, attempt int, r float64) time.Duration {
	if k == Decorrelated {
		prev = max(prev, base)
		hi := time.Duration(math.MaxInt64)
		if prev <= math.MaxInt64/3 {
			hi = 3 * prev
		}
		return min(maxDelay, base+scale(hi-base, r))
	}
	v := maxDelay
	attempt = max(attempt, 1)
	if shift := attempt - 1; shift < 63 && base <= maxDelay>>shift {
		v = base << shift
	}
	switch k {
	case Equal:
		return v - v/2 + scale(v/2, r)
	case None:
		return v
	}
	return scale(v, r)
}

// scale returns d·r for r in [0, 1), rounded down.
func scale(d time.Duration, r float64) time.Duration {
	return time.Duration(float64(d) * r)
}
