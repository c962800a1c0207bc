package geminiguard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The window's totals count every span's records, whether a record came
// before the totals of its span were read (and cached, as a past span's)
// or after: a call whose clock reading is older than another's records in
// a past span.
func TestAvailabilityTotalsCountLateRecords(t *testing.T) {
	av := newAvailability()
	t0 := av.origin
	total := func(now time.Time) [4]int64 {
		r, a, s, h := av.totals(now)
		return [4]int64{r, a, s, h}
	}
	av.answered(t0)
	av.slowed(t0.Add(routeSpan))
	assert.Equal(t, [4]int64{2, 1, 1, 0}, total(t0.Add(routeSpan)))
	av.failed(t0) // a past span's, after its totals were read
	av.kept(t0.Add(routeSpan / 2))
	assert.Equal(t, [4]int64{4, 1, 1, 1}, total(t0.Add(routeSpan)))
	av.answered(t0.Add(routeSpan))
	assert.Equal(t, [4]int64{5, 2, 1, 1}, total(t0.Add(routeSpan)))
	assert.Equal(t, [4]int64{5, 2, 1, 1}, total(t0.Add(routeWindow-time.Nanosecond)), "the window's last span")
	assert.Equal(t, [4]int64{2, 1, 1, 0}, total(t0.Add(routeWindow)), "the first span out of the window")
	assert.Equal(t, [4]int64{0, 0, 0, 0}, total(t0.Add(routeWindow+routeSpan)))
}

// A fleet's replica counts the other replicas' spans as they last shared
// them, through the fleet's record (modelRecord, othersSpans): a window's
// worth up to the latest of them (a replica shares on its round trips, so
// its latest spans may be seconds old), none older than two windows, none
// from before a recovery that started the window again.
func TestAvailabilityCountsTheOtherReplicasSpans(t *testing.T) {
	one, other := newAvailability(), newAvailability()
	t0 := one.origin
	other.origin = t0.Add(1200 * time.Millisecond) // replicas' spans begin apart
	total := func(now time.Time) [4]int64 {
		r, a, s, h := one.totals(now)
		return [4]int64{r, a, s, h}
	}
	share := func(now time.Time) { one.setOthers(othersSpans(modelRecord(nil, nil, other.spans(now)))) }
	for i := range 12 { // a request every 2.5s, every third slow, the others answered
		at := other.origin.Add(time.Duration(i) * 2500 * time.Millisecond)
		if i%3 == 0 {
			other.slowed(at)
		} else {
			other.answered(at)
		}
	}
	one.failed(t0.Add(31 * time.Second))
	share(other.origin.Add(28 * time.Second))
	assert.Equal(t, [4]int64{13, 8, 4, 0}, total(t0.Add(31*time.Second)), "its own request and the others' last window: up to their latest span")
	sent, slow := one.recent(t0.Add(31 * time.Second))
	assert.Equal(t, [2]int64{2, 0}, [2]int64{sent, slow}, "the recent spans: its own and the others' latest, an answer")
	assert.Equal(t, [4]int64{0, 0, 0, 0}, total(t0.Add(95*time.Second)), "spans older than two windows are not counted")

	one.recovered(t0.Add(31*time.Second), 1)
	assert.Equal(t, [4]int64{13, 8, 4, 0}, total(t0.Add(31*time.Second)), "the fleet's window holds answers: nothing starts again")

	other = newAvailability()
	other.origin = t0
	for i := range 6 { // a spell that opened the breaker
		other.failed(t0.Add(time.Duration(40+i) * time.Second))
	}
	share(t0.Add(46 * time.Second))
	one.recovered(t0.Add(47*time.Second), 1) // its probe answered, and the window holds no other answer
	assert.Equal(t, [4]int64{1, 1, 0, 0}, total(t0.Add(47*time.Second)), "the window starts again from the probe: the others' spell is not counted")
}
