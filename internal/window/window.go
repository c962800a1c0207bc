// Package window holds the limiter's time windows: Sliding, the per-minute
// request window kept per second of send time, and Bucket, a token bucket
// kept as the time it is full again, whose takes can be given back. Both
// take every time as an argument, read no clock, are not safe for
// concurrent use (their owner's lock guards them) and allocate nothing on
// their paths, whatever the limit.
package window

import (
	"cmp"
	"math/bits"
	"slices"
	"time"
)

// MaxGiven bounds the give-backs behind later ones that a Bucket remembers:
// beyond it the oldest are forgotten, and the bucket then stops going back at
// them. The limiter bounds its own order of grants by it too.
const MaxGiven = 32

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Later returns the later of a and b.
func Later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Earlier returns the earlier of a and b, a zero time being later than any
// other (none yet).
func Earlier(a, b time.Time) time.Time {
	if a.IsZero() || b.Before(a) && !b.IsZero() {
		return b
	}
	return a
}

// slotCount is the seconds of send time a window keeps in slots: any
// second with a send less than a minute old.
const slotCount = 61

// Sliding counts the sends of the latest minute, per second of send time:
// a fixed 61 slots, whatever the limit, and one more for the sends of
// seconds whose slot a later send took while they could still count (a send
// booked more than 61 s ahead, then given back). A second's sends count until
// its first send is a minute old, all but one until its last one is: never
// fewer than the sends of the latest minute, and exactly those when each
// second's sends were made at one instant (a burst) or one at a time. Sends
// are added in non-decreasing order, except after a give-back (the caller
// grants in order). It is not safe for concurrent use: its owner's lock
// guards it. The zero value is empty.
type Sliding struct {
	slots [slotCount]slot
	spill slot // sends of seconds whose slot was taken, merged; sec unused
	n     int  // sends in slots and spill, counting or not
}

// slot is one second of a window.
type slot struct {
	sec         int64     // the Unix second of its sends, [sec, sec+1)
	n           int       // sends; 0: the slot is free
	first, last time.Time // the earliest and the latest send
}

// at returns the slot of Unix second sec, which may hold another second.
func (w *Sliding) at(sec int64) *slot {
	return &w.slots[(sec%slotCount+slotCount)%slotCount]
}

// counted returns how many of s's sends count at t: all of them until the
// first is a minute old, all but one until the last is.
func (s *slot) counted(t time.Time) int {
	switch {
	case s.n == 0 || !t.Before(s.last.Add(time.Minute)):
		return 0
	case !t.Before(s.first.Add(time.Minute)):
		return s.n - 1
	}
	return s.n
}

// release is a time at which sends stop counting.
type release struct {
	at time.Time
	n  int
}

// Earliest returns the first time at or after t (not before any send) when
// fewer than limit sends count.
func (w *Sliding) Earliest(t time.Time, limit int) time.Time {
	if w.n < limit {
		return t
	}
	sec := t.Unix()
	n := w.spill.counted(t)
	for j := sec - slotCount + 1; j <= sec; j++ {
		if s := w.at(j); s.sec == j {
			n += s.counted(t)
		}
	}
	if n < limit {
		return t
	}
	var buf [2 * (slotCount + 1)]release
	rs := buf[:0]
	releases := func(s *slot) {
		c := s.counted(t)
		if c == s.n && c > 0 {
			rs = append(rs, release{s.first.Add(time.Minute), 1})
			c--
		}
		if c > 0 {
			rs = append(rs, release{s.last.Add(time.Minute), c})
		}
	}
	releases(&w.spill)
	for j := sec - slotCount + 1; j <= sec; j++ {
		if s := w.at(j); s.sec == j {
			releases(s)
		}
	}
	slices.SortFunc(rs, func(a, b release) int { return a.at.Compare(b.at) })
	need := n - limit + 1
	for _, r := range rs {
		if need -= r.n; need <= 0 {
			return r.at
		}
	}
	return t // not reached: every counted send is released
}

// Add records a send at t (not before now). A slot of another second whose
// sends still count at now is merged into the spill slot first.
func (w *Sliding) Add(t, now time.Time) {
	sec := t.Unix()
	s := w.at(sec)
	w.n++
	if s.sec != sec && s.counted(now) > 0 {
		if w.spill.counted(now) == 0 {
			w.n -= w.spill.n
			w.spill = *s
		} else {
			w.spill.n += s.n
			w.spill.first = earlier(w.spill.first, s.first)
			w.spill.last = Later(w.spill.last, s.last)
		}
		*s = slot{}
	}
	if s.sec != sec || s.n == 0 {
		w.n -= s.n
		*s = slot{sec: sec, n: 1, first: t, last: t}
		return
	}
	s.n++
	s.first = earlier(s.first, t)
	s.last = Later(s.last, t)
}

// Remove forgets a send at t: a request booked and then not sent. When it
// was its second's first send, the second's first becomes its last, as the
// next-earliest is not kept (the sends then count a little longer). A send
// merged into the spill slot stays counted.
func (w *Sliding) Remove(t time.Time) {
	sec := t.Unix()
	s := w.at(sec)
	if s.sec != sec || s.n == 0 {
		return
	}
	s.n--
	w.n--
	switch {
	case s.n == 0:
		*s = slot{}
	case t.Equal(s.first):
		s.first = s.last
	}
}

// Bucket is a token bucket that holds perMinute tokens and refills
// perMinute tokens a minute, kept as the time it is full again (the generic
// cell rate algorithm's "theoretical arrival time"), so that a take can be
// given back. Times may be any: a take at a time before full spends tokens
// the bucket will have by then. It is not safe for concurrent use: the
// owner's lock guards it. The zero value is not limited: use Resize.
type Bucket struct {
	perMinute int           // size and refill a minute; 0: not limited
	full      time.Time     // when the bucket is full again; any time before: full
	floor     time.Time     // full is never given back to before it (empty: drained)
	seq       uint64        // takes made and not given back as the latest
	sum       time.Duration // the cost of those takes
	last      time.Time     // the latest time a take was made at
	given     []partial     // takes given back in part behind later ones, by seq; at most MaxGiven
}

// Take is one take from a Bucket, to give back. Its zero value took nothing.
type Take struct {
	seq  uint64        // Bucket.seq after it
	cost time.Duration // its tokens' refill time; 0: nothing taken
	sum  time.Duration // Bucket.sum after it
}

// partial is a take given back in part: rest is still to give back once
// every take after it is given back.
type partial struct {
	seq        uint64
	cost, rest time.Duration
}

// PerMinute returns the bucket's size and refill a minute; 0 when it is not
// limited.
func (b *Bucket) PerMinute() int { return b.perMinute }

// IsZero reports whether tk took nothing.
func (tk Take) IsZero() bool { return tk.cost == 0 }

// cost returns the time the bucket takes to refill n tokens (0 ≤ n ≤
// perMinute), rounded up to the nanosecond.
func (b *Bucket) cost(n int) time.Duration {
	hi, lo := bits.Mul64(uint64(n), uint64(time.Minute))
	q, r := bits.Div64(hi, lo, uint64(b.perMinute))
	if r > 0 {
		q++
	}
	return time.Duration(q)
}

// Resize makes the bucket hold and refill perMinute (> 0) tokens a minute,
// keeping the tokens it owes at t (when t is not zero). Takes made before
// keep their cost at the old rate, so a give-back after a lower rate returns
// fewer tokens than they took.
func (b *Bucket) Resize(perMinute int, t time.Time) {
	if b.perMinute > 0 && !t.IsZero() && b.full.After(t) {
		owed := float64(b.full.Sub(t)) * float64(b.perMinute) / float64(perMinute)
		b.full = t.Add(time.Duration(min(owed, float64(maxOwed))))
	}
	b.perMinute = perMinute
}

// maxOwed bounds a bucket's debt after a resize: far beyond any wait a call
// can make, far below time.Duration's range.
const maxOwed = 1000 * time.Hour

// Earliest returns the first time at or after t when the bucket holds n
// tokens (0 < n ≤ perMinute).
func (b *Bucket) Earliest(t time.Time, n int) time.Time {
	if e := b.full.Add(b.cost(n) - time.Minute); e.After(t) {
		return e
	}
	return t
}

// Take takes n tokens (0 < n ≤ perMinute) at t, whether the bucket holds
// them or not (a debt the next takes wait for). A take that will not be
// given back (a reconcile's debt) is final: the takes before it are then
// never given back beyond what they were.
func (b *Bucket) Take(t time.Time, n int, final bool) Take {
	c := b.cost(n)
	if t.After(b.full) || final {
		// The bucket is full at t (no earlier take bears on it any more),
		// or the takes before can no longer become the latest.
		b.given = b.given[:0]
		b.full = Later(b.full, t)
	}
	b.full = b.full.Add(c)
	b.last = Later(b.last, t)
	b.seq++
	b.sum += c
	return Take{seq: b.seq, cost: c, sum: b.sum}
}

// GiveBack returns tk's tokens. The latest take comes back whole (the bucket
// is then full again no later than before it), and with it the rest of the
// takes given back before it. An earlier one comes back as far as the takes
// after it allow: each of those still needs its cost after its own time,
// which is at or before b.last; the rest waits in b.given.
func (b *Bucket) GiveBack(tk Take) {
	if tk.seq != b.seq {
		full := Later(Later(b.full.Add(-tk.cost), b.last.Add(b.sum-tk.sum)), b.floor)
		if full.After(b.full) {
			full = b.full
		}
		p := partial{seq: tk.seq, cost: tk.cost, rest: tk.cost - b.full.Sub(full)}
		b.full = full
		i, _ := slices.BinarySearchFunc(b.given, p.seq, func(x partial, seq uint64) int { return cmp.Compare(x.seq, seq) })
		b.given = slices.Insert(b.given, i, p)
		if len(b.given) > MaxGiven {
			b.given = slices.Delete(b.given, 0, 1)
		}
		return
	}
	full := b.full.Add(-tk.cost)
	b.seq, b.sum = b.seq-1, b.sum-tk.cost
	for n := len(b.given); n > 0 && b.given[n-1].seq == b.seq; n-- {
		p := b.given[n-1]
		full = full.Add(-p.rest)
		b.seq, b.sum = b.seq-1, b.sum-p.cost
		b.given = b.given[:n-1]
	}
	b.full = Later(full, b.floor)
}

// Empty makes the bucket empty at t: it holds no token before t and refills
// from t on.
func (b *Bucket) Empty(t time.Time) {
	if b.perMinute == 0 {
		return
	}
	b.floor = t.Add(time.Minute)
	if b.floor.After(b.full) {
		b.full = b.floor
	}
}
