package geminiguard

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// limitStep feeds an adaptive limit times calls that each held their slot
// for rtt and ended with inFlight calls in flight, then wants its limit
// within delta (0: exact up to rounding).
type limitStep struct {
	rtt      time.Duration
	inFlight int
	times    int
	want     float64
	delta    float64
	why      string
	dropped  bool // the calls ended on a sign of overload
}

func runLimitScript(t *testing.T, a adaptiveLimit, steps []limitStep) {
	t.Helper()
	for i, s := range steps {
		for range s.times {
			a.update(s.rtt, s.inFlight, s.dropped)
		}
		assert.InDelta(t, s.want, a.limit, max(s.delta, 1e-9), "step %d: %s", i, s.why)
	}
}

func TestAIMDLimit(t *testing.T) {
	a := newAdaptiveLimit(LimitAIMD, 8)
	require.Equal(t, 4, a.current(), "starts at 4")
	runLimitScript(t, a, []limitStep{
		{time.Second, 4, 10, 8, 0, "+1 a fast call while half the limit is in use, up to the ceiling", false},
		{time.Second, 3, 1, 8, 0, "held: less than half the limit in use", false},
		{3 * time.Second, 8, 1, 7, 0, "a call over twice the no-load latency (1s): floor(8 × 0.9)", false},
		{3 * time.Second, 7, 1, 6, 0, "floor(7 × 0.9)", false},
		{3 * time.Second, 6, 3, 3, 0, "6 → 5 → 4 → 3", false},
		{3 * time.Second, 3, 20, 1, 0, "never below 1, while the no-load latency creeps up (1.16s)", false},
		{time.Second, 1, 1, 2, 0, "latency back to normal: +1", false},
		{time.Second, 8, 6, 8, 0, "recovered to the ceiling", false},
		{100 * time.Millisecond, 8, 1, 7, 0, "a fast 503 is no fast answer: floor(8 × 0.9)", true},
		{100 * time.Millisecond, 7, 3, 4, 0, "7 → 6 → 5 → 4", true},
		{time.Second, 4, 1, 5, 0, "the no-load latency did not learn from the 503s: 1s is fast again", false},
	})
}

func TestGradientLimit(t *testing.T) {
	a := newAdaptiveLimit(LimitGradient, 20)
	require.Equal(t, 4, a.current(), "starts at 4")
	runLimitScript(t, a, []limitStep{
		{time.Second, 20, 10, 12, 0, "gradient 1: a fifth of the way to limit + 4, so +0.8 a call", false},
		{time.Second, 5, 1, 12, 0, "held: less than half the limit in use", false},
		{10 * time.Second, 20, 1, 11.6, 0, "gradient 1.5 × 1s / 10s clamped to 0.5: 0.8 × 12 + 0.2 × (6 + 4)", false},
		{10 * time.Second, 20, 30, 8, 0.2, "toward 8, where 0.9 L + 0.8 = L: twice the queue allowance is its floor", false},
		{time.Second, 20, 10, 16.17, 0.02, "latency back to normal: +0.8 a call again", false},
		{time.Second, 20, 10, 20, 0, "up to the ceiling", false},
		{100 * time.Millisecond, 20, 5, 20, 0, "503s: the gradient reads latency alone, and does not learn it from them", true},
		{time.Second, 20, 1, 20, 0, "the no-load latency is still 1s", false},
	})
}

// A no-load latency raised by a long overload comes down by 5% a call
// once calls are back to less than half of it.
func TestAdaptiveBaseDecays(t *testing.T) {
	a := newAdaptiveLimit(LimitGradient, 20)
	for range 10 {
		a.update(10*time.Second, 1, false)
	}
	require.InDelta(t, float64(10*time.Second), a.base, 1)
	a.update(time.Second, 1, false)
	assert.InDelta(t, (float64(10*time.Second)*599/601+float64(time.Second)*2/601)*0.95, a.base, 1)
}

func TestLimitString(t *testing.T) {
	for l, want := range map[BulkheadLimit]string{LimitFixed: "fixed", LimitAIMD: "aimd", LimitGradient: "gradient", BulkheadLimit(9): "BulkheadLimit(9)"} {
		assert.Equal(t, want, l.String())
	}
}

// An adaptive bulkhead holds the slots above its limit: as the limit falls,
// leaving calls' slots are kept; as it rises, they go to the queue.
func TestAdaptiveBulkheadSlots(t *testing.T) {
	b := newBulkhead("batch", Bulkhead{MaxConcurrent: 8, Limit: LimitAIMD}, time.Second)
	assert.Equal(t, 4, b.reserved, "starts at 4 of 8")
	assert.Equal(t, 4, len(b.slots))
	for range 4 {
		b.slots <- struct{}{} // four calls in
	}
	for range 10 {
		b.release(time.Second, false) // a fast call leaves, another comes in
		b.slots <- struct{}{}
	}
	assert.Equal(t, 8, b.lim.current())
	assert.Equal(t, 0, b.reserved, "every slot free to calls")
	b.slots <- struct{}{}
	b.slots <- struct{}{}
	b.slots <- struct{}{}
	b.slots <- struct{}{}
	assert.Equal(t, 8, b.inFlight())
	b.release(5*time.Second, false) // slow: the limit falls to 7, the call's slot is kept
	assert.Equal(t, 7, b.lim.current())
	assert.Equal(t, 1, b.reserved)
	assert.Equal(t, 7, b.inFlight())
	assert.Equal(t, int64(7), b.limit.Load())
}

// Concurrent releases keep the slots consistent with the limit.
func TestAdaptiveBulkheadConcurrent(t *testing.T) {
	for _, algo := range []BulkheadLimit{LimitAIMD, LimitGradient} {
		t.Run(fmt.Sprint(algo), func(t *testing.T) {
			b := newBulkhead("batch", Bulkhead{MaxConcurrent: 16, Limit: algo}, time.Second)
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					for i := range 200 {
						b.slots <- struct{}{}
						b.release(time.Duration(1+(g+i)%5)*time.Second, false)
					}
				})
			}
			wg.Wait()
			assert.Equal(t, 0, b.inFlight())
			assert.Equal(t, b.reserved, len(b.slots))
			assert.LessOrEqual(t, b.reserved, 16-b.lim.current(), "reserves at most the slots above the limit")
		})
	}
}

// Leaving an adaptive bulkhead allocates nothing.
func TestAdaptiveBulkheadLeaveAllocs(t *testing.T) {
	b := newBulkhead("batch", Bulkhead{MaxConcurrent: 4, Limit: LimitGradient}, time.Second)
	var err error
	allocs := testing.AllocsPerRun(100, func() {
		b.slots <- struct{}{}
		bulkheadSlot{b: b, start: time.Now()}.leave(&err)
	})
	assert.Zero(t, allocs)
}
