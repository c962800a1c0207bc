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
