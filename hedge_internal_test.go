package geminiguard

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestHedgeCutWithItsOriginalKeepsThePairsCut: an original with a learned
// cut of 6s was hedged at 4s to a faster model, whose cut came at 5s: both
// requests were cut (run's pair cut). The cancelled hedge's return reached
// hr before the original was joined (the two goroutines race at one
// instant): before, it cut the original again from its learned cut, 6s,
// later than the 5s it had run, and the call returned the original's bare
// context.Canceled as its error (one call in 400 of the hang family's cell
// 1500026, in some runs).
func TestHedgeCutWithItsOriginalKeepsThePairsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var origCancels, hedgeCancels int
		hr := newHedgeRun()
		hr.hedgeState = hedgeState{clock: newHedgeClock(), start: start, learned: 6 * time.Second, onward: true,
			ocancel: func() { origCancels++ }, hcancel: func() { hedgeCancels++ },
			hstart: start.Add(4 * time.Second), pairAt: start.Add(5 * time.Second), decided: true, runs: 1}

		time.Sleep(5 * time.Second)
		hr.run()
		hr.mu.Lock()
		hr.hedgeEnded(context.Canceled, time.Now())
		hr.mu.Unlock()
		hr.join(false)

		assert.True(t, hr.cutting, "the original is cut")
		assert.Equal(t, 5*time.Second, hr.cut, "at the pair's cut, as long as it ran: a cut, and the call goes on")
		assert.Equal(t, 1, hedgeCancels)
		assert.Equal(t, 1, origCancels, "cut once")
	})
}
