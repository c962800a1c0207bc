package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/pacific"
	"github.com/geminiguard/geminiguard/internal/window"
)

// limStart is an arbitrary instant for limiter tests: a Monday, 05:00 PDT.
var limStart = time.Date(2026, time.June, 1, 12, 0, 0, 0, time.UTC)

// maxInWindow returns the largest number of sends in any half-open window
// [s, s+w) (the worst window starts at a send).
func maxInWindow(sends []time.Time, w time.Duration) int {
	s := slices.Clone(sends)
	slices.SortFunc(s, time.Time.Compare)
	most, j := 0, 0
	for i := range s {
		for j < len(s) && s[j].Before(s[i].Add(w)) {
			j++
		}
		most = max(most, j-i)
	}
	return most
}

// reserveAll makes n reservations of tokens each at now without a deadline
// and returns the send times.
func reserveAll(t *testing.T, l *limiter, now time.Time, n, tokens int) []time.Time {
	t.Helper()
	sends := make([]time.Time, 0, n)
	for i := range n {
		_, wait, err := l.reserve(now, tokens, time.Time{})
		require.NoError(t, err, "reservation %d", i)
		sends = append(sends, now.Add(wait))
	}
	return sends
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		name string
		l    Limits
		want []string
	}{
		{"zero", Limits{}, nil},
		{"set", Limits{RPM: 15, TPM: 250_000, RPD: 500}, nil},
		{"negative RPM", Limits{RPM: -1}, []string{`geminiguard: WithLimits("m"): RPM (-1) is negative: use the model's quota from AI Studio, or 0 for no local limit`}},
		{"all negative", Limits{RPM: -1, TPM: -2, RPD: -3}, []string{"RPM (-1)", "TPM (-2)", "RPD (-3)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.validate("m")
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want))
			for i, w := range tt.want {
				assert.Contains(t, lines[i], w)
			}
		})
	}
}

func TestQuotaDimOf(t *testing.T) {
	tests := []struct {
		quotaID string
		want    quotaDim
		ok      bool
	}{
		{"GenerateRequestsPerMinutePerProjectPerModel-FreeTier", dimRPM, true},
		{"GenerateRequestsPerMinutePerProjectPerModel", dimRPM, true},
		{"GenerateContentInputTokensPerModelPerMinute-FreeTier", dimTPM, true},
		{"GenerateContentPaidTierInputTokensPerModelPerMinute", dimTPM, true},
		{"GenerateRequestsPerDayPerProjectPerModel-FreeTier", dimRPD, true},
		{"GenerateRequestsPerDayPerProjectPerModel", dimRPD, true},
		{"GenerateContentInputTokensPerModelPerDay-FreeTier", 0, false},
		{"", 0, false},
		{"SomethingElsePerMinute", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.quotaID, func(t *testing.T) {
			got, ok := quotaDimOf(tt.quotaID)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
		})
	}
	assert.Equal(t, "RPM", dimRPM.String())
	assert.Equal(t, "TPM", dimTPM.String())
	assert.Equal(t, "RPD", dimRPD.String())
	assert.Equal(t, "quotaDim(7)", quotaDim(7).String())
}

func TestEffective(t *testing.T) {
	tests := []struct {
		limit    int
		headroom float64
		want     int
	}{
		{60, 0.8, 48},
		{50, 0.8, 40},
		{15, 0.8, 12},
		{250_000, 0.8, 200_000},
		{100, 0.29, 29}, // 0.29·100 is 28.999… in floating point
		{1, 0.8, 1},     // never below one request
		{10, 1, 10},
		{math.MaxInt, 1, math.MaxInt},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, effective(tt.limit, tt.headroom), "%d × %v", tt.limit, tt.headroom)
	}
}

func TestLimiterRPMWindow(t *testing.T) {
	tests := []struct {
		rpm, n int
		want   int // effective RPM: the most sends any 60 s window may hold
	}{
		{60, 200, 48},
		{10, 50, 8},
		{15, 60, 12},
		{1000, 2000, 800},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("RPM=%d", tt.rpm), func(t *testing.T) {
			l := newLimiter(Limits{RPM: tt.rpm}, 0.8)
			sends := reserveAll(t, l, limStart, tt.n, 0)
			assert.Equal(t, limStart, sends[0], "the first request leaves at once")
			assert.Equal(t, tt.want, maxInWindow(sends, time.Minute), "most sends in any 60 s window")
			assert.LessOrEqual(t, maxInWindow(sends, time.Minute-time.Nanosecond), tt.want)
			assert.Equal(t, limStart, sends[tt.want-1], "a burst up to the effective RPM leaves at once")
			assert.Equal(t, limStart.Add(time.Minute), sends[tt.want], "the next one when the first leaves the window")
			last := tt.n - 1
			assert.Equal(t, limStart.Add(time.Duration(last/tt.want)*time.Minute), sends[last], "whole bursts a minute apart, not later")
		})
	}
}

func TestLimiterJointSchedule(t *testing.T) {
	// A request held back by TPM must not let the requests behind it bunch
	// up in RPM: every dimension records a request at the time it is sent.
	l := newLimiter(Limits{RPM: 60, TPM: 100_000}, 1)
	var sends []time.Time
	var tokens []int
	for i, n := range append([]int{100_000, 80_000}, slices.Repeat([]int{10}, 120)...) {
		_, wait, err := l.reserve(limStart, n, time.Time{})
		require.NoError(t, err, "reservation %d", i)
		sends = append(sends, limStart.Add(wait))
		tokens = append(tokens, n)
	}
	assert.Equal(t, 48*time.Second, sends[1].Sub(limStart), "80k tokens at 100k/min wait 48 s")
	assert.Equal(t, 60, maxInWindow(sends, time.Minute), "RPM holds in every window, and is used")
	for i := range sends {
		sum := 0
		for j := range sends {
			if !sends[j].Before(sends[i]) && sends[j].Before(sends[i].Add(time.Minute)) {
				sum += tokens[j]
			}
		}
		assert.LessOrEqual(t, sum, 2*100_000, "TPM: a full bucket plus a minute of refill at most")
	}
}

func TestLimiterRPD(t *testing.T) {
	tests := []struct {
		name      string
		now       time.Time // when the effective RPD (40 of 50) is spent
		wantUntil time.Time // the next midnight America/Los_Angeles, in UTC
	}{
		{"standard time", time.Date(2026, time.January, 15, 7, 30, 0, 0, time.UTC), time.Date(2026, time.January, 15, 8, 0, 0, 0, time.UTC)},
		{"daylight time", time.Date(2026, time.June, 1, 12, 0, 0, 0, time.UTC), time.Date(2026, time.June, 2, 7, 0, 0, 0, time.UTC)},
		{"eve of spring forward", time.Date(2026, time.March, 8, 7, 59, 0, 0, time.UTC), time.Date(2026, time.March, 8, 8, 0, 0, 0, time.UTC)},
		{"spring-forward day (23 h)", time.Date(2026, time.March, 8, 8, 0, 0, 0, time.UTC), time.Date(2026, time.March, 9, 7, 0, 0, 0, time.UTC)},
		{"fall-back day, first 01:30", time.Date(2026, time.November, 1, 8, 30, 0, 0, time.UTC), time.Date(2026, time.November, 2, 8, 0, 0, 0, time.UTC)},
		{"fall-back day (25 h), late", time.Date(2026, time.November, 2, 7, 59, 0, 0, time.UTC), time.Date(2026, time.November, 2, 8, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(Limits{RPD: 50}, 0.8)
			sends := reserveAll(t, l, tt.now, 40, 0)
			assert.Equal(t, tt.now, sends[39], "40 requests leave at once: RPD is a counter, not a pace")
			assert.Equal(t, 40, l.snapshot().RequestsToday)

			deadline := tt.now.Add(time.Minute)
			_, _, err := l.reserve(tt.now, 0, deadline)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrRateLimited)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "no context ended")
			assert.ErrorIs(t, err, ErrQuotaExhausted)
			var rle *RateLimitError
			require.ErrorAs(t, err, &rle)
			assert.Equal(t, "RPD", rle.Dimension)
			assert.Equal(t, tt.wantUntil, rle.Until.UTC())
			assert.Contains(t, err.Error(), tt.wantUntil.Format(time.RFC3339))
			assert.Equal(t, 40, l.snapshot().RequestsToday, "a refusal counts nothing")

			_, wait, err := l.reserve(tt.now, 0, time.Time{})
			require.NoError(t, err, "without a deadline the request waits for midnight")
			assert.Equal(t, tt.wantUntil.Sub(tt.now), wait)
			assert.Equal(t, 1, l.snapshot().RequestsToday, "the new day has begun")

			sends = reserveAll(t, l, tt.wantUntil, 39, 0)
			assert.Equal(t, tt.wantUntil, sends[38], "the new day's 40 leave at midnight")
			_, wait, err = l.reserve(tt.wantUntil, 0, time.Time{})
			require.NoError(t, err)
			assert.Greater(t, wait, 23*time.Hour-time.Minute, "the 41st waits for the next midnight")
		})
	}
}

func TestLimiterDeadline(t *testing.T) {
	tests := []struct {
		name     string
		limits   Limits
		tokens   int
		dim      quotaDim
		wantWait time.Duration // of the second request
	}{
		{"RPM", Limits{RPM: 1}, 0, dimRPM, time.Minute},           // one request a minute
		{"TPM", Limits{TPM: 1000}, 500, dimTPM, 15 * time.Second}, // 800/min effective, 300 left: 200 more tokens
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(tt.limits, 0.8)
			_, wait, err := l.reserve(limStart, tt.tokens, limStart.Add(time.Second))
			require.NoError(t, err)
			require.Zero(t, wait)

			for _, deadline := range []time.Time{limStart.Add(tt.wantWait - time.Nanosecond), limStart.Add(tt.wantWait)} {
				_, _, err = l.reserve(limStart, tt.tokens, deadline)
				require.Error(t, err, "deadline %v", deadline.Sub(limStart))
				assert.ErrorIs(t, err, ErrRateLimited)
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "no context ended")
				assert.NotErrorIs(t, err, ErrQuotaExhausted)
				var rle *RateLimitError
				require.ErrorAs(t, err, &rle)
				assert.Equal(t, tt.dim.String(), rle.Dimension)
				assert.Equal(t, limStart.Add(tt.wantWait), rle.Until)
				assert.Equal(t, "geminiguard: rate limited: "+tt.dim.String()+": the request could be sent in "+tt.wantWait.String()+", after the deadline", err.Error())
			}

			_, wait, err = l.reserve(limStart, tt.tokens, limStart.Add(tt.wantWait+time.Nanosecond))
			require.NoError(t, err, "a wait that ends before the deadline is granted")
			assert.Equal(t, tt.wantWait, wait, "the refusals reserved nothing")
		})
	}
}

func TestLimiterTPMTooLarge(t *testing.T) {
	l := newLimiter(Limits{TPM: 1000}, 0.8)
	_, _, err := l.reserve(limStart, 801, time.Time{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrRateLimited)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "no deadline was involved: no wait can admit it")
	assert.EqualError(t, err, "geminiguard: rate limited: the request's 801 input tokens exceed the effective TPM (800): no wait admits it")

	_, wait, err := l.reserve(limStart, 800, time.Time{})
	require.NoError(t, err, "a request of the whole effective TPM is admitted")
	assert.Zero(t, wait)
	assert.EqualValues(t, 800, l.snapshot().TokensUsed)
}

func TestLimiterCancel(t *testing.T) {
	t.Run("RPM: the last grant's slot is reused", func(t *testing.T) {
		l := newLimiter(Limits{RPM: 3}, 0.8) // 2 a minute
		_, _, err := l.reserve(limStart, 0, time.Time{})
		require.NoError(t, err)
		g, wait, err := l.reserve(limStart, 0, time.Time{})
		require.NoError(t, err)
		require.Zero(t, wait)
		g.cancel()
		_, wait, err = l.reserve(limStart.Add(200*time.Millisecond), 0, time.Time{})
		require.NoError(t, err)
		assert.Zero(t, wait, "the cancelled slot is free again")
		_, wait, err = l.reserve(limStart.Add(200*time.Millisecond), 0, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, time.Minute-200*time.Millisecond, wait, "and now the window is full")
	})
	t.Run("TPM and token count come back", func(t *testing.T) {
		l := newLimiter(Limits{TPM: 1000}, 1)
		g, _, err := l.reserve(limStart, 1000, time.Time{})
		require.NoError(t, err)
		g.cancel()
		assert.Zero(t, l.snapshot().TokensUsed)
		_, wait, err := l.reserve(limStart, 1000, time.Time{})
		require.NoError(t, err)
		assert.Zero(t, wait)
	})
	t.Run("RPD count comes back", func(t *testing.T) {
		l := newLimiter(Limits{RPD: 50}, 0.8)
		reserveAll(t, l, limStart, 39, 0)
		g, _, err := l.reserve(limStart, 0, time.Time{})
		require.NoError(t, err)
		g.cancel()
		assert.Equal(t, 39, l.snapshot().RequestsToday)
		_, wait, err := l.reserve(limStart, 0, limStart.Add(time.Second))
		require.NoError(t, err)
		assert.Zero(t, wait)
	})
	t.Run("RPD count of another day stays", func(t *testing.T) {
		l := newLimiter(Limits{RPD: 10}, 1)
		g, _, err := l.reserve(limStart, 0, time.Time{})
		require.NoError(t, err)
		tomorrow := limStart.Add(24 * time.Hour)
		reserveAll(t, l, tomorrow, 3, 0)
		g.cancel()
		assert.Equal(t, 3, l.snapshot().RequestsToday)
	})
	t.Run("zero grant", func(t *testing.T) {
		grant{}.cancel() // must not panic
	})
}

func TestLimiterDrain(t *testing.T) {
	t.Run("a 429 blocks an unlimited model", func(t *testing.T) {
		l := newLimiter(Limits{}, 0.8)
		until := limStart.Add(22500 * time.Millisecond)
		l.drain(limStart, dimRPM, until)
		assert.Equal(t, until, l.snapshot().BlockedUntil)

		_, _, err := l.reserve(limStart.Add(time.Second), 0, limStart.Add(10*time.Second))
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrRateLimited)
		assert.NotErrorIs(t, err, context.DeadlineExceeded, "no context ended")
		var rle *RateLimitError
		require.ErrorAs(t, err, &rle)
		assert.Equal(t, "RPM", rle.Dimension)
		assert.Equal(t, until, rle.Until)

		_, wait, err := l.reserve(limStart.Add(time.Second), 0, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, 21500*time.Millisecond, wait)
		_, wait, err = l.reserve(until.Add(time.Second), 0, time.Time{})
		require.NoError(t, err)
		assert.Zero(t, wait, "after the block, no limit")
	})
	t.Run("the drained bucket refills from empty", func(t *testing.T) {
		l := newLimiter(Limits{TPM: 1000}, 1)
		until := limStart.Add(10 * time.Second)
		l.drain(limStart, dimTPM, until)
		_, wait, err := l.reserve(limStart, 500, time.Time{})
		require.NoError(t, err)
		assert.Equal(t, 40*time.Second, wait, "10 s blocked, then 500 tokens at 1000/min")
	})
	t.Run("the request the server invited is granted at the end of the block", func(t *testing.T) {
		l := newLimiter(Limits{RPM: 10}, 0.8) // 8 a minute
		_, _, err := l.reserve(limStart, 0, time.Time{})
		require.NoError(t, err)
		until := limStart.Add(7 * time.Second)
		l.drain(limStart, dimRPM, until)
		_, wait, err := l.reserve(until, 0, time.Time{})
		require.NoError(t, err)
		assert.Zero(t, wait, "the server's delay is over: no local wait on top")
	})
	t.Run("an earlier until never shortens a block", func(t *testing.T) {
		l := newLimiter(Limits{}, 1)
		l.drain(limStart, dimTPM, limStart.Add(time.Minute))
		l.drain(limStart, dimTPM, limStart.Add(time.Second))
		assert.Equal(t, limStart.Add(time.Minute), l.snapshot().BlockedUntil)
	})
	t.Run("a daily 429 blocks until midnight", func(t *testing.T) {
		l := newLimiter(Limits{RPM: 60}, 0.8)
		midnight := time.Date(2026, time.June, 2, 7, 0, 0, 0, time.UTC)
		l.drain(limStart, dimRPD, midnight)
		_, _, err := l.reserve(limStart, 0, limStart.Add(time.Hour))
		require.Error(t, err)
		assert.ErrorIs(t, err, ErrQuotaExhausted)
		var rle *RateLimitError
		require.ErrorAs(t, err, &rle)
		assert.Equal(t, "RPD", rle.Dimension)
		assert.Equal(t, midnight, rle.Until)
	})
}

func TestLimiterLearn(t *testing.T) {
	tests := []struct {
		name    string
		limits  Limits
		learn   []int // RPM quotaValues stated by successive 429s
		wantRPM int
	}{
		{"unlimited learns", Limits{}, []int{10}, 8},
		{"never raised", Limits{}, []int{10, 20}, 8},
		{"lowered", Limits{}, []int{10, 5}, 4},
		{"configured is never raised", Limits{RPM: 60}, []int{100}, 48},
		{"configured is lowered", Limits{RPM: 60}, []int{15}, 12},
		{"zero is ignored", Limits{}, []int{0, -3}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(tt.limits, 0.8)
			for _, v := range tt.learn {
				l.learn(dimRPM, v)
			}
			assert.Equal(t, tt.wantRPM, l.snapshot().RPM)
			if tt.wantRPM > 0 {
				sends := reserveAll(t, l, limStart, 3*tt.wantRPM, 0)
				assert.Equal(t, tt.wantRPM, maxInWindow(sends, time.Minute))
			}
		})
	}

	l := newLimiter(Limits{}, 0.8)
	assert.False(t, l.limitsTokens())
	l.learn(dimTPM, 250_000)
	assert.True(t, l.limitsTokens(), "a learned TPM needs token estimates")
	l.learn(dimRPD, 20)
	assert.Equal(t, limiterStats{TPM: 200_000, RPD: 16}, l.snapshot())
}

func TestLimiterReconcile(t *testing.T) {
	l := newLimiter(Limits{TPM: 1000}, 1)
	_, _, err := l.reserve(limStart, 100, time.Time{})
	require.NoError(t, err)
	l.reconcile(limStart, 100, 600) // the request was 500 tokens larger
	assert.EqualValues(t, 600, l.snapshot().TokensUsed)
	_, wait, err := l.reserve(limStart, 500, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 6*time.Second, wait, "400 tokens left: 100 more at 1000/min")

	l.reconcile(limStart, 500, 300)
	assert.EqualValues(t, 900, l.snapshot().TokensUsed, "a smaller count corrects the total")
	l.reconcile(limStart, 500, 0)
	assert.EqualValues(t, 900, l.snapshot().TokensUsed, "no count: nothing to correct")

	l = newLimiter(Limits{TPM: 1000}, 1)
	l.reconcile(limStart, 0, 1_000_000) // far more than the bucket holds
	_, wait, err = l.reserve(limStart, 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 60*time.Millisecond, wait, "the debt is one full bucket: 1 token at 1000/min")
}

func TestLimiterZeroLimits(t *testing.T) {
	l := newLimiter(Limits{}, 0.8)
	assert.False(t, l.limitsTokens())
	now := limStart
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		g, wait, err := l.reserve(now, 1_000_000, now)
		if wait != 0 || err != nil {
			t.Fatalf("reserve = %v, %v; want 0, nil", wait, err)
		}
		g.cancel()
		l.reconcile(now, 10, 20)
	})
	assert.Zero(t, allocs)
	assert.Equal(t, limiterStats{}, l.snapshot())
}

func TestLimiterConcurrent(t *testing.T) {
	l := newLimiter(Limits{RPM: 600, TPM: 1_000_000, RPD: 1000}, 0.8)
	var (
		mu    sync.Mutex
		sends []time.Time
		wg    sync.WaitGroup
	)
	for w := range 8 {
		wg.Go(func() {
			for i := range 120 {
				now := limStart.Add(time.Duration(i) * 10 * time.Millisecond)
				g, wait, err := l.reserve(now, 1000, time.Time{})
				if err != nil {
					t.Errorf("worker %d reservation %d: %v", w, i, err)
					return
				}
				if i%10 == 9 {
					g.cancel()
					continue
				}
				mu.Lock()
				sends = append(sends, now.Add(wait))
				mu.Unlock()
				l.reconcile(now, 1000, 900)
				l.snapshot()
			}
		})
	}
	wg.Wait()
	assert.Len(t, sends, 8*108)
	assert.LessOrEqual(t, maxInWindow(sends, time.Minute), 480)
	assert.LessOrEqual(t, l.snapshot().RequestsToday, 800)
}

func TestRateLimitErrorIs(t *testing.T) {
	other := errors.New("other")
	contexts := []error{context.DeadlineExceeded, context.Canceled}
	tests := []struct {
		name string
		err  *RateLimitError
		is   []error
		not  []error
	}{
		{"too large", &RateLimitError{Dimension: "TPM", Tokens: 9, Limit: 8}, []error{ErrRateLimited}, append([]error{ErrQuotaExhausted, other}, contexts...)},
		{"RPM after the deadline", &RateLimitError{Dimension: "RPM", Until: limStart}, []error{ErrRateLimited}, append([]error{ErrQuotaExhausted}, contexts...)},
		{"RPD after the deadline", &RateLimitError{Dimension: "RPD", Until: limStart}, []error{ErrRateLimited, ErrQuotaExhausted}, append([]error{ErrCircuitOpen}, contexts...)},
		{"skipped", &RateLimitError{Dimension: "TPM", Until: limStart, skipped: true}, []error{ErrRateLimited}, append([]error{ErrQuotaExhausted}, contexts...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, target := range tt.is {
				assert.ErrorIs(t, tt.err, target)
			}
			for _, target := range tt.not {
				assert.NotErrorIs(t, tt.err, target)
			}
			assert.True(t, strings.HasPrefix(tt.err.Error(), "geminiguard: rate limited: "), tt.err.Error())
			assert.Equal(t, ClassLocalRateLimit, Classify(tt.err).Class, "Classify reads a bare refusal as local")
		})
	}
}

// The failure of a model refused by its limiter says when the
// model takes the request, in its Verdict and in the *RateLimitError.
func TestLocalLimitErrorIsNotAContextError(t *testing.T) {
	l := newLimiter(Limits{RPM: 1}, 1)
	_, _, err := l.reserve(limStart, 0, time.Time{})
	require.NoError(t, err)
	_, _, err = l.reserve(limStart.Add(15*time.Second), 0, limStart.Add(20*time.Second))
	require.Error(t, err)

	me := localLimitError("m", err, limStart.Add(15*time.Second))
	assert.Equal(t, Verdict{Class: ClassLocalRateLimit, Scope: ScopeModel, RetryAfter: 45 * time.Second}, me.Verdict)
	assert.Equal(t, me.Verdict, Classify(me))
	assert.ErrorIs(t, me, ErrRateLimited)
	assert.NotErrorIs(t, me, context.DeadlineExceeded)
	var rle *RateLimitError
	require.ErrorAs(t, me, &rle)
	assert.Equal(t, RateLimitError{Dimension: "RPM", Until: limStart.Add(time.Minute), wait: 45 * time.Second}, *rle)

	tooLarge := localLimitError("m", &RateLimitError{Dimension: "TPM", Tokens: 9, Limit: 8}, limStart)
	assert.Zero(t, tooLarge.Verdict.RetryAfter, "no wait admits it")

	l = newLimiter(Limits{TPM: 1000}, 1)
	_, _, err = l.reserve(limStart, 1000, time.Time{})
	require.NoError(t, err)
	g, wait, err := l.reserve(limStart, 500, time.Time{})
	require.NoError(t, err)
	skipped := g.skip("gemini-x", limStart, wait)
	assert.Equal(t, 30*time.Second, skipped.Verdict.RetryAfter)
	assert.EqualError(t, skipped, "geminiguard: model gemini-x: local_rate_limit: rate limited: TPM: the request could be sent in 30s; the next model answers sooner")
	_, wait, err = l.reserve(limStart, 500, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 30*time.Second, wait, "the skipped grant was given back")
}

func TestEstimateTokens(t *testing.T) {
	text := func(s string) *genai.Part { return &genai.Part{Text: s} }
	tests := []struct {
		name     string
		contents []*genai.Content
		cfg      *genai.GenerateContentConfig
		want     int
	}{
		{"nothing", nil, nil, 0},
		{"8 bytes", []*genai.Content{{Parts: []*genai.Part{text("abcdefgh")}}}, nil, 2},
		{"9 bytes round up", []*genai.Content{{Parts: []*genai.Part{text("abcdefghi")}}}, nil, 3},
		{"turns add up", []*genai.Content{{Parts: []*genai.Part{text("abcd")}}, {Parts: []*genai.Part{text("efgh"), text("ij")}}}, nil, 3},
		{"system instruction", []*genai.Content{{Parts: []*genai.Part{text("abcd")}}},
			&genai.GenerateContentConfig{SystemInstruction: &genai.Content{Parts: []*genai.Part{text("be brief")}}}, 3},
		{"non-Latin counts bytes", []*genai.Content{{Parts: []*genai.Part{text("日本語です")}}}, nil, 4},
		{"inline image", []*genai.Content{{Parts: []*genai.Part{{InlineData: &genai.Blob{MIMEType: "image/png", Data: make([]byte, 1<<20)}}}}}, nil, 258},
		{"file data", []*genai.Content{{Parts: []*genai.Part{{FileData: &genai.FileData{FileURI: "gs://x"}}, text("abcd")}}}, nil, 259},
		{"function call and response", []*genai.Content{{Parts: []*genai.Part{
			{FunctionCall: &genai.FunctionCall{Name: "get", Args: map[string]any{"city": "Paris", "days": 3.0}}},
			{FunctionResponse: &genai.FunctionResponse{Name: "get", Response: map[string]any{"temps": []any{"warm", 21.5, map[string]any{"k": "v"}}}}},
		}}}, nil, 10}, // "get" "city" "Paris" "days" 3.0 + "get" "temps" "warm" 21.5 "k" "v": 20+18 bytes
		{"code", []*genai.Content{{Parts: []*genai.Part{
			{ExecutableCode: &genai.ExecutableCode{Code: "print(1)"}},
			{CodeExecutionResult: &genai.CodeExecutionResult{Output: "1\n"}},
		}}}, nil, 3},
		{"nil entries", []*genai.Content{nil, {Parts: []*genai.Part{nil, text("abcd")}}}, &genai.GenerateContentConfig{}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, estimateTokens(tt.contents, tt.cfg))
			allocs := testing.AllocsPerRun(100, func() { estimateTokens(tt.contents, tt.cfg) })
			assert.Zero(t, allocs)
		})
	}

	deep := map[string]any{}
	for range 100 {
		deep = map[string]any{"k": deep}
	}
	n := estimateTokens([]*genai.Content{{Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{Args: deep}}}}}, nil)
	assert.Positive(t, n, "deep arguments are counted down to a depth, not forever")
}

func BenchmarkLimiterReserve(b *testing.B) {
	for _, bm := range []struct {
		name   string
		limits Limits
	}{
		{"zero", Limits{}},
		{"RPM", Limits{RPM: 1 << 40}},
		{"RPM+TPM+RPD", Limits{RPM: 1 << 40, TPM: 1 << 50, RPD: 1 << 50}},
	} {
		b.Run(bm.name, func(b *testing.B) {
			l := newLimiter(bm.limits, 0.8)
			now := limStart
			b.ReportAllocs()
			for b.Loop() {
				now = now.Add(time.Microsecond)
				if _, _, err := l.reserve(now, 1000, time.Time{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestLimiterLearnLowerKeepsTheWindow(t *testing.T) {
	l := newLimiter(Limits{RPM: 100}, 0.8)
	reserveAll(t, l, limStart, 10, 0)
	l.learn(dimRPM, 5) // the server says 5: 4 a minute at 0.8, and 10 already left
	_, wait, err := l.reserve(limStart.Add(time.Second), 0, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, time.Minute-time.Second, wait, "the sends already made still count")
	assert.Equal(t, 4, l.snapshot().RPM)
}

// A cancelled grant gives back its tokens, its RPM slot and its
// place in line; a grant cancelled behind later ones gives back what it can
// without letting any window hold more than the limits.
func TestLimiterCancelGivesBackTime(t *testing.T) {
	type step struct {
		at        time.Duration // since limStart
		tokens    int
		cancel    int           // > 0: cancel the grant of that step (1-based) instead of reserving
		reconcile int           // > 0: reconcile the first step with this many more tokens instead
		want      time.Duration // the wait
	}
	tests := []struct {
		name   string
		limits Limits
		steps  []step
	}{
		{"the latest TPM grant", Limits{RPM: 60, TPM: 10_000}, []step{
			{at: 0, tokens: 9_000},
			{at: 0, tokens: 9_000, want: 48 * time.Second}, // 8,000 more at 10,000/min
			{at: time.Second, cancel: 2},
			{at: time.Second, tokens: 3},                                     // 1,166 tokens: at once
			{at: time.Second, tokens: 1_000, want: 0},                        // 1,163 left
			{at: time.Second, tokens: 9_000, want: 53018 * time.Millisecond}, // 164 left: 8,836 more
		}},
		{"the RPM slot", Limits{RPM: 3, TPM: 10_000}, []step{
			{at: 0, tokens: 9_000},
			{at: 0, tokens: 9_000, want: 48 * time.Second},
			{at: time.Second, cancel: 2},
			{at: time.Second, tokens: 1},
			{at: time.Second, tokens: 1},
			{at: time.Second, tokens: 1, want: 59 * time.Second}, // 3 sends in the window: the first leaves at 60 s
		}},
		{"an RPD-held grant", Limits{RPD: 1}, []step{
			{at: 0},
			{at: 0, want: 19 * time.Hour}, // the Pacific midnight
			{at: time.Hour, cancel: 2},
			{at: time.Hour, want: 18 * time.Hour}, // still the day's second request
		}},
		{"a grant behind later ones", Limits{TPM: 10_000}, []step{
			{at: 0, tokens: 9_000},
			{at: 0, tokens: 6_000, want: 30 * time.Second},
			{at: 0, tokens: 3_000, want: 48 * time.Second},
			{at: time.Second, cancel: 2},
			// The 3,000 stay at 48 s; the 6,000 come back in line behind them.
			{at: time.Second, tokens: 6_000, want: 47 * time.Second},
		}},
		{"every waiting grant, oldest first", Limits{RPM: 60, TPM: 10_000}, []step{
			{at: 0, tokens: 9_000},
			{at: 0, tokens: 9_000, want: 48 * time.Second},
			{at: 0, tokens: 9_000, want: 102 * time.Second},
			{at: 0, tokens: 9_000, want: 156 * time.Second},
			{at: time.Second, cancel: 2},
			{at: time.Second, cancel: 3},
			{at: time.Second, cancel: 4},
			{at: time.Second, tokens: 1_000}, // 1,166 tokens again: at once
			{at: time.Second, tokens: 9_000, want: 53 * time.Second},
		}},
		{"every waiting grant, in any order", Limits{RPM: 60, TPM: 10_000}, []step{
			{at: 0, tokens: 9_000},
			{at: 0, tokens: 9_000, want: 48 * time.Second},
			{at: 0, tokens: 9_000, want: 102 * time.Second},
			{at: 0, tokens: 9_000, want: 156 * time.Second},
			{at: time.Second, cancel: 3},
			{at: time.Second, cancel: 2},
			{at: time.Second, cancel: 4},
			{at: time.Second, tokens: 1_000},
		}},
		{"RPD-held grants, oldest first", Limits{RPD: 1}, []step{
			{at: 0},
			{at: 0, want: 19 * time.Hour},
			{at: 0, want: 43 * time.Hour},
			{at: time.Hour, cancel: 2},
			{at: time.Hour, cancel: 3},
			{at: time.Hour, want: 18 * time.Hour}, // the next day's one request
			{at: time.Hour, want: 42 * time.Hour},
		}},
		{"a reconcile in between", Limits{TPM: 10_000}, []step{
			{at: 0, tokens: 9_000},
			{at: 0, tokens: 9_000, want: 48 * time.Second},
			{at: time.Second, reconcile: 100}, // the first one was 100 tokens larger
			{at: time.Second, cancel: 2},
			{at: time.Second, tokens: 1_000}, // 1,066 tokens
			{at: time.Second, tokens: 9_000, want: 53600 * time.Millisecond},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLimiter(tt.limits, 1)
			grants := make([]grant, len(tt.steps))
			for i, s := range tt.steps {
				now := limStart.Add(s.at)
				if s.cancel > 0 {
					grants[s.cancel-1].cancel()
					continue
				}
				if s.reconcile > 0 {
					l.reconcile(now, tt.steps[0].tokens, tt.steps[0].tokens+s.reconcile)
					continue
				}
				g, wait, err := l.reserve(now, s.tokens, time.Time{})
				require.NoError(t, err, "step %d", i+1)
				assert.Equal(t, s.want, wait, "step %d", i+1)
				grants[i] = g
			}
		})
	}
}

// Random reservations, give-backs, reconciles and server blocks never let
// the requests sent exceed a limit: RPM in any 60 s window, TPM beyond a
// full bucket plus the refill of the interval, RPD in any Pacific day.
func TestLimiterGiveBacksKeepTheLimits(t *testing.T) {
	const rpm, tpm, rpd = 4, 10_000, 300
	for seed := range uint64(8) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 1))
			l := newLimiter(Limits{RPM: rpm, TPM: tpm, RPD: rpd}, 1)
			type send struct {
				at     time.Time
				tokens int
				req    bool // a request (RPM, RPD), not a reconcile's debt
			}
			type booked struct {
				g grant
				send
			}
			var (
				sends   []send
				pending []booked
			)
			now := limStart
			for range 3000 {
				switch op := r.IntN(20); {
				case op < 10:
					n := r.IntN(tpm/2) + 1
					g, wait, err := l.reserve(now, n, time.Time{})
					require.NoError(t, err)
					pending = append(pending, booked{g, send{now.Add(wait), n, true}})
				case op < 16 && len(pending) > 0:
					i := r.IntN(len(pending))
					pending[i].g.cancel()
					pending = slices.Delete(pending, i, i+1)
				case op < 17:
					extra := r.IntN(500) + 1
					l.reconcile(now, 0, extra)
					sends = append(sends, send{now, extra, false})
				case op < 18:
					l.drain(now, quotaDim(r.IntN(2)), now.Add(time.Duration(r.IntN(20))*time.Second))
				default:
					now = now.Add(time.Duration(r.Int64N(int64(3 * time.Minute))))
					if r.IntN(50) == 0 {
						now = now.Add(20 * time.Hour)
					}
				}
				// Grants whose send time has come are sent.
				pending = slices.DeleteFunc(pending, func(b booked) bool {
					if b.at.After(now) {
						return false
					}
					sends = append(sends, b.send)
					return true
				})
			}
			for _, b := range pending {
				sends = append(sends, b.send)
			}
			slices.SortStableFunc(sends, func(a, b send) int { return a.at.Compare(b.at) })

			var reqs []time.Time
			days := map[time.Time]int{}
			for _, s := range sends {
				if s.req {
					reqs = append(reqs, s.at)
					days[pacific.Day(s.at)]++
				}
			}
			assert.LessOrEqual(t, maxInWindow(reqs, time.Minute), rpm, "RPM")
			for day, n := range days {
				assert.LessOrEqual(t, n, rpd, "RPD on %v", day)
			}
			// A reconcile's debt was sent with its request, before anyone
			// knew: it only makes later requests wait longer.
			sends = slices.DeleteFunc(sends, func(s send) bool { return !s.req })
			for i := range sends {
				sum := 0
				for j := i; j < len(sends); j++ {
					sum += sends[j].tokens
					allowed := tpm + float64(tpm)*sends[j].at.Sub(sends[i].at).Minutes()
					if float64(sum) > allowed+1e-6 {
						t.Fatalf("TPM: %d tokens sent in [%v, %v], %.0f allowed", sum, sends[i].at.Sub(limStart), sends[j].at.Sub(limStart), allowed)
					}
				}
			}
			// The window's own bookkeeping is checked in internal/window
			// (TestSlidingTotal, TestBucketGivenBounded).
			assert.LessOrEqual(t, len(l.given), window.MaxGiven)
		})
	}
}

// The RPM window keeps counts per second: a second's sends leave it with its
// first send, then its last, so a request waits at most 1 s more than an
// exact log would make it, never less.
func TestLimiterRPMWindowPerSecond(t *testing.T) {
	l := newLimiter(Limits{RPM: 3}, 1)
	for _, at := range []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 900 * time.Millisecond} {
		_, wait, err := l.reserve(limStart.Add(at), 0, time.Time{})
		require.NoError(t, err)
		require.Zero(t, wait)
	}
	now := limStart.Add(time.Second)
	_, wait, err := l.reserve(now, 0, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 59100*time.Millisecond, wait, "exact: the first send leaves at 60.1 s")
	_, wait, err = l.reserve(now, 0, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 59900*time.Millisecond, wait, "0.4 s late: the send at 0.5 s leaves with the second's last, at 60.9 s")
}

// Limits of any size work in fixed memory; learned ones are capped.
func TestLimiterHugeLimits(t *testing.T) {
	for _, headroom := range []float64{0.8, 1} {
		l := newLimiter(Limits{RPM: math.MaxInt, TPM: math.MaxInt, RPD: math.MaxInt}, headroom)
		sends := reserveAll(t, l, limStart, 1000, 1_000_000)
		assert.Equal(t, limStart, sends[999], "headroom %v: nothing waits", headroom)
		_, wait, err := l.reserve(limStart, effective(math.MaxInt, headroom), time.Time{})
		require.NoError(t, err)
		assert.Positive(t, wait, "a whole bucket waits for the refill")
		l.reconcile(limStart, 0, math.MaxInt)
		assert.Equal(t, int64(math.MaxInt64), l.snapshot().TokensUsed, "the count saturates")
	}

	l := newLimiter(Limits{}, 1)
	bytes := allocatedBytes(func() {
		l.learn(dimRPM, math.MaxInt)
		l.learn(dimTPM, math.MaxInt)
		l.learn(dimRPD, math.MaxInt)
	})
	assert.Less(t, bytes, uint64(16<<10), "no memory in proportion to the limit")
	assert.Equal(t, limiterStats{RPM: maxLearnedRPM, TPM: maxLearnedTPM, RPD: maxLearnedRPD}, l.snapshot())
	sends := reserveAll(t, l, limStart, 1000, 1000)
	assert.Equal(t, limStart, sends[999])

	l = newLimiter(Limits{TPM: 1000}, 1)
	_, _, err := l.reserve(limStart, 1000, time.Time{})
	require.NoError(t, err)
	l.learn(dimTPM, 500) // the bucket owes 1000 tokens: two minutes at 500/min
	_, wait, err := l.reserve(limStart, 500, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, 2*time.Minute, wait, "a lower learned TPM keeps the debt, refilled at the new rate")
}

// allocatedBytes returns the bytes f allocated on the heap.
func allocatedBytes(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
