package geminiguard

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCoolDown(t *testing.T) {
	s := time.Second
	type op struct {
		set    time.Duration // set(brkT0+set, reason) when reason != ClassNone
		reason Class
		want   bool          // set's result
		at     time.Duration // then until(brkT0+at)
		until  time.Duration // want end (since brkT0); 0: not cooling
		class  Class
	}
	tests := []struct {
		name string
		ops  []op
	}{
		{"zero value is not cooling", []op{{at: 0}}},
		{"cooling until the end, not at it", []op{
			{set: 10 * s, reason: ClassRateLimit, want: true, at: 0, until: 10 * s, class: ClassRateLimit},
			{at: 10*s - 1, until: 10 * s, class: ClassRateLimit},
			{at: 10 * s},
			{at: 11 * s},
		}},
		{"keeps the later end", []op{
			{set: 10 * s, reason: ClassRateLimit, want: true, at: 0, until: 10 * s, class: ClassRateLimit},
			{set: 5 * s, reason: ClassNotFound, want: false, at: 0, until: 10 * s, class: ClassRateLimit},
			{set: 10 * s, reason: ClassNotFound, want: false, at: 0, until: 10 * s, class: ClassRateLimit},
			{set: 20 * s, reason: ClassDailyQuota, want: true, at: 0, until: 20 * s, class: ClassDailyQuota},
		}},
		{"a new cool-down after the last one ended", []op{
			{set: 10 * s, reason: ClassRateLimit, want: true, at: 0, until: 10 * s, class: ClassRateLimit},
			{set: 25 * s, reason: ClassRateLimit, want: true, at: 15 * s, until: 25 * s, class: ClassRateLimit},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c coolDown
			for i, o := range tt.ops {
				if o.reason != ClassNone {
					assert.Equal(t, o.want, c.set(brkT0.Add(o.set), o.reason), "op %d: set", i)
				}
				end, class, ok := c.until(brkT0.Add(o.at))
				if o.until == 0 {
					assert.False(t, ok, "op %d: cooling", i)
					assert.Zero(t, end, "op %d", i)
					assert.Equal(t, ClassNone, class, "op %d", i)
					continue
				}
				assert.True(t, ok, "op %d: cooling", i)
				assert.Equal(t, brkT0.Add(o.until), end, "op %d: end", i)
				assert.Equal(t, o.class, class, "op %d: reason", i)
			}
		})
	}

	t.Run("zero until changes nothing", func(t *testing.T) {
		var c coolDown
		assert.False(t, c.set(time.Time{}, ClassRateLimit))
		_, _, ok := c.until(time.Time{}.Add(-time.Hour))
		assert.False(t, ok)
	})
	t.Run("clear", func(t *testing.T) {
		var c coolDown
		require.True(t, c.set(coolDownForever, ClassNotFound))
		c.clear()
		_, _, ok := c.until(brkT0)
		assert.False(t, ok)
		assert.True(t, c.set(brkT0.Add(s), ClassRateLimit), "set again after clear")
	})
	t.Run("clearRecheck ends only a cool-down until a recheck", func(t *testing.T) {
		var c coolDown
		require.True(t, c.set(brkT0.Add(time.Hour), ClassDailyQuota))
		c.clearRecheck()
		_, class, ok := c.until(brkT0)
		assert.True(t, ok, "a daily quota runs to its end")
		assert.Equal(t, ClassDailyQuota, class)
		require.True(t, c.set(coolDownForever, ClassNotFound))
		c.clearRecheck()
		_, _, ok = c.until(brkT0)
		assert.False(t, ok, "a 404's cool-down ends")
	})
	t.Run("concurrent sets keep the latest", func(t *testing.T) {
		var c coolDown
		var extended atomic.Int64
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := range 500 {
					if c.set(brkT0.Add(time.Duration(i*8+w)*time.Millisecond), ClassRateLimit) {
						extended.Add(1)
					}
					c.until(brkT0)
				}
			})
		}
		wg.Wait()
		end, _, ok := c.until(brkT0)
		require.True(t, ok)
		assert.Equal(t, brkT0.Add(3999*time.Millisecond), end)
		assert.GreaterOrEqual(t, extended.Load(), int64(500), "each worker's ends move later")
		assert.LessOrEqual(t, extended.Load(), int64(4000))
	})
}

func TestCoolDownUntil(t *testing.T) {
	pacificTime := func(s string) time.Time { // UTC instant for a Los Angeles wall time given with its offset
		tm, err := time.Parse("2006-01-02 15:04:05 -0700", s)
		require.NoError(t, err)
		return tm
	}
	tests := []struct {
		name string
		v    Verdict
		now  time.Time
		want time.Time
	}{
		{"none", Verdict{Class: ClassOverloaded}, brkT0, time.Time{}},
		{"unknown kind", Verdict{cool: coolDownKind(42)}, brkT0, time.Time{}},
		{"retry after", Verdict{cool: coolRetryAfter, RetryAfter: 22500 * time.Millisecond}, brkT0, brkT0.Add(22500 * time.Millisecond)},
		{"retry after without a stated delay", Verdict{cool: coolRetryAfter}, brkT0, brkT0.Add(30 * time.Second)},
		{"retry after capped", Verdict{cool: coolRetryAfter, RetryAfter: 100 * 365 * 24 * time.Hour}, brkT0, brkT0.Add(5 * time.Minute)},
		{"daily quota just before Pacific midnight", Verdict{cool: coolUntilMidnight},
			pacificTime("2026-01-15 23:59:30 -0800"), pacificTime("2026-01-16 00:00:00 -0800")},
		{"daily quota at Pacific midnight waits a whole day", Verdict{cool: coolUntilMidnight},
			pacificTime("2026-01-16 00:00:00 -0800"), pacificTime("2026-01-17 00:00:00 -0800")},
		{"daily quota the night DST starts", Verdict{cool: coolUntilMidnight},
			pacificTime("2026-03-07 23:30:00 -0800"), pacificTime("2026-03-08 00:00:00 -0800")},
		{"daily quota on the 23-hour day", Verdict{cool: coolUntilMidnight},
			pacificTime("2026-03-08 00:00:00 -0800"), pacificTime("2026-03-09 00:00:00 -0700")},
		{"daily quota on the 25-hour day", Verdict{cool: coolUntilMidnight},
			pacificTime("2026-10-31 23:00:00 -0700"), pacificTime("2026-11-01 00:00:00 -0700")},
		{"daily quota after DST ends", Verdict{cool: coolUntilMidnight},
			pacificTime("2026-11-01 12:00:00 -0800"), pacificTime("2026-11-02 00:00:00 -0800")},
		{"retired model", Verdict{cool: coolUntilRecheck}, brkT0, coolDownForever},
		{"project", Verdict{cool: coolProject, RetryAfter: time.Hour}, brkT0, brkT0.Add(5 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := coolDownUntil(tt.v, tt.now, 5*time.Minute)
			assert.True(t, tt.want.Equal(got), "got %v, want %v", got, tt.want)
		})
	}

	t.Run("a daily cool-down ends at Pacific midnight", func(t *testing.T) {
		now := pacificTime("2026-01-15 23:59:30 -0800")
		var c coolDown
		require.True(t, c.set(coolDownUntil(Verdict{cool: coolUntilMidnight}, now, 0), ClassDailyQuota))
		_, class, ok := c.until(now.Add(29 * time.Second))
		assert.True(t, ok)
		assert.Equal(t, ClassDailyQuota, class)
		_, _, ok = c.until(now.Add(30 * time.Second))
		assert.False(t, ok, "the quota reset at midnight")
	})
	t.Run("a retired model cools for the process lifetime", func(t *testing.T) {
		var c coolDown
		require.True(t, c.set(coolDownUntil(Verdict{cool: coolUntilRecheck}, brkT0, 0), ClassNotFound))
		_, _, ok := c.until(brkT0.AddDate(100, 0, 0))
		assert.True(t, ok)
	})
}

func BenchmarkCoolDownUntil(b *testing.B) {
	var c coolDown
	c.set(brkT0.Add(time.Minute), ClassRateLimit)
	b.ReportAllocs()
	for b.Loop() {
		c.until(brkT0)
	}
}
