package geminiguard

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/inert"
	"github.com/geminiguard/geminiguard/internal/latency"
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

// TestFleetRecordCarriesAttemptsInFlight: a replica's attempts in flight
// travel in its record (modelRecord, from flightClass on, by start in
// milliseconds modulo flightBuckets) and come back as they were sent, to
// the millisecond, however the start falls against the modulus; the
// answer times and spans read them as neither.
func TestFleetRecordCarriesAttemptsInFlight(t *testing.T) {
	for _, now := range []time.Time{
		time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC),
		time.UnixMilli(flightBuckets * 1000).Add(2 * time.Second), // the modulus wrapped since the starts
	} {
		flights := []latency.Flight{
			{Class: 0, Start: time.UnixMilli(now.Add(-40 * time.Second).UnixMilli()), N: 2},
			{Class: 3, Start: time.UnixMilli(now.Add(-1500 * time.Millisecond).UnixMilli()), N: 1},
		}
		rec := modelRecord([]latency.Count{{Class: 0, Bucket: 40, N: 5}}, flights, nil)
		assert.Equal(t, flights, othersInFlight(rec, now), "at %v", now)
		assert.Equal(t, []latency.Count{{Class: 0, Bucket: 40, N: 5}}, othersLatency(rec))
		assert.Empty(t, othersSpans(rec))
	}
}
