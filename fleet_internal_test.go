package geminiguard

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/inert"
)

// TestRoundTripEndingAtTheCallersDeadlineIsNoStoreFailure: a round trip to
// the shared state is bounded by its own timer, which may fire at the
// caller's deadline's instant before the caller's context is marked done
// (lateContext). The round trip then failed on the caller's deadline, not
// the store's: it says nothing of the store, whose failures and breaker do
// not count it. Before, it counted as the store's failure.
func TestRoundTripEndingAtTheCallersDeadlineIsNoStoreFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := inertClient(t, inert.New())
		f := newFleet(fleet.NewMemoryState(), "project", 1)
		caller := lateContext{Context: t.Context(), deadline: time.Now()} // its timer not fired yet

		answered := f.call(caller, c, func(context.Context) error { return context.DeadlineExceeded })

		assert.False(t, answered)
		assert.Zero(t, f.failures.Load(), "the caller's deadline, not the store's failure")
		assert.Equal(t, int64(1), f.roundTrips.Load())
	})
}
