package window

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// t0 is an arbitrary instant on a whole second.
var t0 = time.Date(2026, time.June, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// A second's sends leave the window with its first send, then its last: a
// request waits at most 1 s more than an exact log would make it, never less.
func TestSlidingPerSecond(t *testing.T) {
	var w Sliding
	for _, d := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
		require.Equal(t, at(d), w.Earliest(at(d), 3))
		w.Add(at(d), at(d))
	}
	first := w.Earliest(at(time.Second), 3)
	assert.Equal(t, at(60100*time.Millisecond), first, "exact: the first send leaves at 60.1 s")
	w.Add(first, at(time.Second))
	assert.Equal(t, at(60900*time.Millisecond), w.Earliest(first, 3), "0.4 s late: the send at 0.5 s leaves with the second's last")
}

// A send given back stops counting; a second's first send given back makes
// its last the first.
func TestSlidingRemove(t *testing.T) {
	var w Sliding
	w.Add(at(0), at(0))
	w.Add(at(500*time.Millisecond), at(0))
	assert.Equal(t, at(time.Minute), w.Earliest(at(time.Second), 2))
	w.Remove(at(0))
	assert.Equal(t, at(time.Second), w.Earliest(at(time.Second), 2), "one send counts")
	assert.Equal(t, at(time.Minute+500*time.Millisecond), w.Earliest(at(time.Second), 1), "the second's first is now its last")
	w.Remove(at(time.Hour)) // never added: nothing changes
	w.Remove(at(500 * time.Millisecond))
	assert.Equal(t, at(time.Second), w.Earliest(at(time.Second), 1), "empty")
}

// A send booked more than 61 s ahead takes the slot of a second whose sends
// still count: they move to the spill slot and keep counting.
func TestSlidingSpill(t *testing.T) {
	var w Sliding
	w.Add(at(0), at(0))
	w.Add(at(61*time.Second+100*time.Millisecond), at(0)) // same slot as second 0
	assert.Equal(t, at(time.Minute), w.Earliest(at(time.Second), 1), "the spilled send still counts")
	assert.Equal(t, at(121100*time.Millisecond), w.Earliest(at(61*time.Second), 1), "then the one booked ahead counts")
}

// Random sends and give-backs keep the window's total equal to its slots'
// sends, and no minute holds more than the limit.
func TestSlidingTotal(t *testing.T) {
	const limit = 4
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			var (
				w       Sliding
				now     = t0
				clock   = t0
				pending []time.Time
			)
			for range 3000 {
				switch op := r.IntN(10); {
				case op < 5:
					e := w.Earliest(Later(now, clock), limit)
					w.Add(e, now)
					clock = e
					pending = append(pending, e)
				case op < 8 && len(pending) > 0:
					i := r.IntN(len(pending))
					if pending[i].After(now) {
						w.Remove(pending[i])
					}
					pending = slices.Delete(pending, i, i+1)
				default:
					now = now.Add(time.Duration(r.Int64N(int64(90 * time.Second))))
				}
				n := w.spill.n
				for _, s := range w.slots {
					n += s.n
				}
				require.Equal(t, n, w.n, "the window's total")
			}
		})
	}
}

// A take given back behind a later one comes back as far as the later one
// allows, and in full once that one is given back too: the bucket is then as
// full as before either. This is why the limiter does not use
// golang.org/x/time/rate (bucket.go): its Reservation.CancelAt restores only
// the tokens no later reservation used and forgets the rest, so on this
// script (rate.NewLimiter(1, 60), ReserveN(t0, 60), ReserveN(t0, 30), both
// cancelled at t0) x/time/rate v0.16.0 makes the next 60 tokens wait 30 s.
func TestBucketGiveBackBehindLater(t *testing.T) {
	var b Bucket
	b.Resize(60, time.Time{}) // a token a second
	a := b.Take(t0, 60, false)
	at30 := b.Earliest(t0, 30)
	require.Equal(t, at(30*time.Second), at30, "empty: 30 tokens in 30 s")
	c := b.Take(at30, 30, false) // booked ahead, behind a
	assert.Equal(t, at(90*time.Second), b.Earliest(t0, 60))
	b.GiveBack(a)
	assert.Equal(t, at(60*time.Second), b.Earliest(t0, 60), "a comes back as far as c allows: c needs its 30 s after its own time")
	b.GiveBack(c)
	assert.Equal(t, t0, b.Earliest(t0, 60), "both given back: full again")
	assert.Empty(t, b.given)
}

// The latest take comes back whole; a resize keeps the debt, refilled at the
// new rate; Empty holds every token back until a minute after its time.
func TestBucket(t *testing.T) {
	var b Bucket
	assert.Zero(t, b.PerMinute(), "the zero value is not limited")
	b.Resize(1000, time.Time{})
	assert.Equal(t, 1000, b.PerMinute())
	tk := b.Take(t0, 1000, false)
	assert.False(t, tk.IsZero())
	assert.True(t, Take{}.IsZero())
	b.Resize(500, t0) // owes 1000 tokens: two minutes at 500/min
	assert.Equal(t, at(2*time.Minute), b.Earliest(t0, 500))
	b.GiveBack(tk)
	assert.Equal(t, at(time.Minute), b.Earliest(t0, 500), "the latest take comes back whole, at the rate it was taken at")

	b.Empty(at(10 * time.Second))
	assert.Equal(t, at(70*time.Second), b.Earliest(t0, 500), "drained: full a minute after the block")
	b.GiveBack(b.Take(at(70*time.Second), 500, false))
	assert.Equal(t, at(70*time.Second), b.Earliest(t0, 500), "a give-back never goes behind the drain")
	var off Bucket
	off.Empty(t0)
	assert.Zero(t, off.full, "an unlimited bucket cannot be drained")
}

// Random takes and give-backs remember at most MaxGiven partial give-backs.
func TestBucketGivenBounded(t *testing.T) {
	for seed := range uint64(8) {
		r := rand.New(rand.NewPCG(seed, 2))
		var b Bucket
		b.Resize(10_000, time.Time{})
		now := t0
		var takes []Take
		for range 3000 {
			switch op := r.IntN(10); {
			case op < 5:
				takes = append(takes, b.Take(b.Earliest(now, 100), r.IntN(5000)+1, r.IntN(20) == 0))
			case op < 9 && len(takes) > 0:
				i := r.IntN(len(takes))
				b.GiveBack(takes[i])
				takes = slices.Delete(takes, i, i+1)
			default:
				now = now.Add(time.Duration(r.Int64N(int64(time.Minute))))
			}
			require.LessOrEqual(t, len(b.given), MaxGiven, "seed %d", seed)
		}
	}
}

// TestEarlier: the earlier of two times, a zero time standing for none.
func TestEarlier(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	for _, c := range []struct{ a, b, want time.Time }{
		{t0, t1, t0}, {t1, t0, t0}, {time.Time{}, t1, t1}, {t1, time.Time{}, t1}, {time.Time{}, time.Time{}, time.Time{}},
	} {
		if got := Earlier(c.a, c.b); !got.Equal(c.want) {
			t.Errorf("Earlier(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
