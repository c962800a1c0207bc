package geminiguard

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lastDraw is the largest draw in [0, 1).
var lastDraw = math.Nextafter(1, 0)

func TestJitterString(t *testing.T) {
	for j, want := range map[Jitter]string{
		JitterFull:         "full",
		JitterEqual:        "equal",
		JitterDecorrelated: "decorrelated",
		JitterNone:         "none",
		Jitter(42):         "Jitter(42)",
	} {
		assert.Equal(t, want, j.String())
	}
}

// wantExponential is min(maxDelay, base·2^(attempt−1)), computed the slow way.
func wantExponential(base, maxDelay time.Duration, attempt int) time.Duration {
	v := float64(base) * math.Pow(2, float64(attempt-1))
	if v >= float64(maxDelay) {
		return maxDelay
	}
	return time.Duration(v)
}

func TestBackoffDelayBounds(t *testing.T) {
	const base, maxDelay = 500 * time.Millisecond, 8 * time.Second
	tests := []struct {
		jitter Jitter
		// lo and hi bound the delay before retry n; spread is the least
		// fraction of [lo, hi] the draws must cover (jitter that does not
		// spread is no jitter).
		bounds func(n int, prev time.Duration) (lo, hi time.Duration)
		spread float64
	}{
		{JitterFull, func(n int, _ time.Duration) (time.Duration, time.Duration) {
			return 0, wantExponential(base, maxDelay, n)
		}, 0.9},
		{JitterEqual, func(n int, _ time.Duration) (time.Duration, time.Duration) {
			v := wantExponential(base, maxDelay, n)
			return v / 2, v
		}, 0.9},
		{JitterDecorrelated, func(_ int, prev time.Duration) (time.Duration, time.Duration) {
			return base, min(maxDelay, 3*max(prev, base))
		}, 0.9},
		{JitterNone, func(n int, _ time.Duration) (time.Duration, time.Duration) {
			v := wantExponential(base, maxDelay, n)
			return v, v
		}, 0},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tt := range tests {
		t.Run(tt.jitter.String(), func(t *testing.T) {
			for n := 1; n <= 8; n++ {
				for _, prev := range []time.Duration{0, base, 1300 * time.Millisecond, maxDelay} {
					lo, hi := tt.bounds(n, prev)
					least, most := hi, lo
					draws := []float64{0, lastDraw}
					for range 1000 {
						draws = append(draws, rng.Float64())
					}
					for _, r := range draws {
						got := backoffDelay(tt.jitter, base, maxDelay, prev, n, r)
						// The top is reached only without jitter, or by
						// decorrelated jitter's cap.
						top := got > hi || got == hi && hi > lo && tt.jitter != JitterDecorrelated
						if got < lo || top {
							t.Fatalf("attempt %d prev %v r %v: got %v, want in [%v, %v)", n, prev, r, got, lo, hi)
						}
						least, most = min(least, got), max(most, got)
					}
					assert.GreaterOrEqual(t, float64(most-least), tt.spread*float64(hi-lo),
						"attempt %d prev %v: draws cover [%v, %v] of [%v, %v]", n, prev, least, most, lo, hi)
				}
			}
		})
	}
}

func TestBackoffDelayGrowsToCap(t *testing.T) {
	const base, maxDelay = 500 * time.Millisecond, 8 * time.Second
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	var got []time.Duration
	for n := 1; n <= len(want); n++ {
		got = append(got, backoffDelay(JitterNone, base, maxDelay, 0, n, 0))
	}
	assert.Equal(t, want, got)
	assert.Equal(t, base, backoffDelay(JitterNone, base, maxDelay, 0, 0, 0), "attempt 0 counts as 1")

	for _, j := range []Jitter{JitterFull, JitterEqual, JitterDecorrelated, JitterNone} {
		prevTop := time.Duration(0)
		for n := 1; n <= 70; n++ {
			top := backoffDelay(j, base, maxDelay, prevTop, n, lastDraw)
			assert.LessOrEqual(t, top, maxDelay, "%v attempt %d", j, n)
			assert.GreaterOrEqual(t, top, prevTop-time.Nanosecond, "%v: the largest delay shrank at attempt %d", j, n)
			prevTop = top
		}
	}
}

func TestBackoffDelayNoOverflow(t *testing.T) {
	huge := time.Duration(math.MaxInt64)
	tests := []struct {
		name           string
		base, maxDelay time.Duration
		prev           time.Duration
		attempt        int
	}{
		{"attempt 100", 500 * time.Millisecond, 8 * time.Second, 0, 100},
		{"attempt 64", time.Nanosecond, huge, 0, 64},
		{"attempt MaxInt", time.Second, time.Hour, 0, math.MaxInt},
		{"huge base", huge / 2, huge, 0, 3},
		{"huge prev", time.Second, huge, huge, 3},
		{"negative attempt", time.Second, time.Minute, 0, -5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, j := range []Jitter{JitterFull, JitterEqual, JitterDecorrelated, JitterNone} {
				for _, r := range []float64{0, 0.5, lastDraw} {
					got := backoffDelay(j, tt.base, tt.maxDelay, tt.prev, tt.attempt, r)
					assert.GreaterOrEqual(t, got, time.Duration(0), "%v r %v", j, r)
					assert.LessOrEqual(t, got, tt.maxDelay, "%v r %v", j, r)
				}
			}
			if tt.attempt >= 64 {
				assert.Equal(t, tt.maxDelay, backoffDelay(JitterNone, tt.base, tt.maxDelay, 0, tt.attempt, 0))
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	p := RetryPolicy{BaseDelay: time.Second, MaxDelay: 10 * time.Second, MaxRetryAfter: 30 * time.Second, Jitter: JitterNone}.withDefaults()
	tests := []struct {
		name    string
		server  time.Duration
		attempt int
		wantD   time.Duration
		wantOK  bool
	}{
		{"server delay is used as is", 22500 * time.Millisecond, 1, 22500 * time.Millisecond, true},
		{"server delay at the cap", 30 * time.Second, 2, 30 * time.Second, true},
		{"server delay over the cap moves on", 30*time.Second + time.Millisecond, 1, 0, false},
		{"daily delay moves on", 39043 * time.Second, 1, 0, false},
		{"no server delay: backoff 1", 0, 1, time.Second, true},
		{"no server delay: backoff 3", 0, 3, 4 * time.Second, true},
		{"no server delay: backoff capped", 0, 9, 10 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := p.retryDelay(tt.server, 0, tt.attempt, 0.5)
			assert.Equal(t, tt.wantOK, ok)
			assert.Equal(t, tt.wantD, d)
		})
	}

	full := RetryPolicy{}.withDefaults()
	d, ok := full.retryDelay(0, 0, 2, 0.5)
	assert.True(t, ok)
	assert.Equal(t, 500*time.Millisecond, d, "full jitter: half of 2×500ms at r=0.5")
}

func TestRetryPolicyWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   RetryPolicy
		want RetryPolicy
	}{
		{"zero", RetryPolicy{}, RetryPolicy{
			MaxAttempts: 4, BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second,
			MaxRetryAfter: 60 * time.Second, Jitter: JitterFull, BudgetRatio: 0.1, BudgetMinPerSecond: 1,
		}},
		{"set fields are kept", RetryPolicy{
			MaxAttempts: 1, BaseDelay: time.Second, MaxDelay: 2 * time.Second,
			MaxRetryAfter: time.Nanosecond, Jitter: JitterDecorrelated, BudgetRatio: 0.2, BudgetMinPerSecond: 10,
		}, RetryPolicy{
			MaxAttempts: 1, BaseDelay: time.Second, MaxDelay: 2 * time.Second,
			MaxRetryAfter: time.Nanosecond, Jitter: JitterDecorrelated, BudgetRatio: 0.2, BudgetMinPerSecond: 10,
		}},
		{"MaxDelay follows a long BaseDelay", RetryPolicy{BaseDelay: 20 * time.Second}, RetryPolicy{
			MaxAttempts: 4, BaseDelay: 20 * time.Second, MaxDelay: 20 * time.Second,
			MaxRetryAfter: 60 * time.Second, Jitter: JitterFull, BudgetRatio: 0.1, BudgetMinPerSecond: 1,
		}},
		{"negatives are kept for validate", RetryPolicy{MaxAttempts: -1, BaseDelay: -time.Second, BudgetRatio: -1}, RetryPolicy{
			MaxAttempts: -1, BaseDelay: -time.Second, MaxDelay: 8 * time.Second,
			MaxRetryAfter: 60 * time.Second, Jitter: JitterFull, BudgetRatio: -1, BudgetMinPerSecond: 1,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.withDefaults()
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, got.withDefaults(), "idempotent")
		})
	}
}

func TestRetryPolicyValidate(t *testing.T) {
	tests := []struct {
		name string
		p    RetryPolicy
		want []string // one entry per expected problem, each a substring of one line
	}{
		{"zero is valid", RetryPolicy{}, nil},
		{"defaults are valid", RetryPolicy{}.withDefaults(), nil},
		{"one attempt is valid", RetryPolicy{MaxAttempts: 1, MaxRetryAfter: time.Nanosecond}, nil},
		{"negative attempts", RetryPolicy{MaxAttempts: -2},
			[]string{"geminiguard: RetryPolicy.MaxAttempts (-2) is negative: use 1 to never retry, or 0 for the default (4)"}},
		{"MaxDelay below BaseDelay", RetryPolicy{BaseDelay: 2 * time.Second, MaxDelay: time.Second},
			[]string{"geminiguard: RetryPolicy.MaxDelay (1s) is below BaseDelay (2s): raise MaxDelay or lower BaseDelay"}},
		{"negative delays", RetryPolicy{BaseDelay: -time.Second, MaxDelay: -time.Second, MaxRetryAfter: -time.Second},
			[]string{"RetryPolicy.BaseDelay (-1s) is negative", "RetryPolicy.MaxDelay (-1s) is negative", "RetryPolicy.MaxRetryAfter (-1s) is negative"}},
		{"unknown jitter", RetryPolicy{Jitter: 9},
			[]string{"RetryPolicy.Jitter (Jitter(9)) is not a known Jitter: use JitterFull, JitterEqual, JitterDecorrelated or JitterNone"}},
		{"negative jitter", RetryPolicy{Jitter: -1}, []string{"RetryPolicy.Jitter (Jitter(-1))"}},
		{"budget ratio out of range", RetryPolicy{BudgetRatio: 1001}, []string{"RetryPolicy.BudgetRatio (1001) must be in (0, 1000]"}},
		{"budget ratio NaN", RetryPolicy{BudgetRatio: math.NaN()}, []string{"RetryPolicy.BudgetRatio (NaN)"}},
		{"budget floor negative", RetryPolicy{BudgetMinPerSecond: -1}, []string{"RetryPolicy.BudgetMinPerSecond (-1) must be a positive number"}},
		{"budget floor infinite", RetryPolicy{BudgetMinPerSecond: math.Inf(1)}, []string{"RetryPolicy.BudgetMinPerSecond (+Inf)"}},
		{"every problem at once", RetryPolicy{MaxAttempts: -1, BaseDelay: 3 * time.Second, MaxDelay: time.Second, Jitter: 7, BudgetRatio: -0.5},
			[]string{"MaxAttempts (-1)", "MaxDelay (1s) is below BaseDelay (3s)", "Jitter (Jitter(7))", "BudgetRatio (-0.5)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.p.validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "one line per problem: %v", err)
			for i, w := range tt.want {
				assert.Contains(t, lines[i], w)
				assert.True(t, strings.HasPrefix(lines[i], "geminiguard: RetryPolicy."), lines[i])
			}
			var joined interface{ Unwrap() []error }
			require.True(t, errors.As(err, &joined), "errors.Join keeps each problem")
		})
	}
}

// budgetStart is an arbitrary start for tests that pass times in.
var budgetStart = time.Date(2026, time.June, 1, 12, 0, 0, 0, time.UTC)

func TestRetryBudgetRatioAndFloor(t *testing.T) {
	tests := []struct {
		name  string
		ratio float64
		floor float64
		want  int // retries allowed for 1000 first attempts over 10s, each followed by a wanted retry
	}{
		{"SRE 10%, no floor", 0.1, 0, 100},
		{"SRE 10% + 1/s", 0.1, 1, 110},
		{"Finagle 20% + 10/s", 0.2, 10, 300},
		{"floor only", 0, 2, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newRetryBudget(tt.ratio, tt.floor, 10*time.Second)
			got := 0
			for i := range 1000 {
				now := budgetStart.Add(time.Duration(i) * 10 * time.Millisecond)
				b.deposit(now)
				if b.withdraw(now) {
					got++
				}
			}
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestRetryBudgetSustained(t *testing.T) {
	// A full outage at 100 first attempts per second for 60 s, every one
	// failing: retries settle at 10% of first attempts + 1/s.
	b := newRetryBudget(0.1, 1, 10*time.Second)
	got := 0
	for i := range 6000 {
		now := budgetStart.Add(time.Duration(i) * 10 * time.Millisecond)
		b.deposit(now)
		if b.withdraw(now) {
			got++
		}
	}
	assert.InEpsilon(t, 0.1*6000+1*60, got, 0.05, "got %d retries", got)
}

func TestRetryBudgetExpiry(t *testing.T) {
	const ttl = 10 * time.Second
	t.Run("deposits count for 0.9 ttl", func(t *testing.T) {
		b := newRetryBudget(0.1, 0, ttl)
		for range 100 {
			b.deposit(budgetStart)
		}
		late := budgetStart.Add(9*ttl/10 - time.Millisecond)
		for i := range 10 {
			require.True(t, b.withdraw(late), "retry %d", i+1)
		}
		assert.False(t, b.withdraw(late), "10 credits spent")
	})
	t.Run("deposits expire after ttl", func(t *testing.T) {
		b := newRetryBudget(0.1, 0, ttl)
		for range 100 {
			b.deposit(budgetStart)
		}
		assert.False(t, b.withdraw(budgetStart.Add(ttl)))
	})
	t.Run("withdrawals expire after ttl", func(t *testing.T) {
		b := newRetryBudget(0, 1, ttl) // floor: 10 retries per 10 s
		for i := range 10 {
			require.True(t, b.withdraw(budgetStart), "retry %d", i+1)
		}
		assert.False(t, b.withdraw(budgetStart.Add(ttl/2)), "the floor is spent for this ttl")
		assert.True(t, b.withdraw(budgetStart.Add(ttl)), "spent floor comes back after ttl")
	})
	t.Run("a long silence clears everything", func(t *testing.T) {
		b := newRetryBudget(0.1, 0, ttl)
		for range 100 {
			b.deposit(budgetStart)
		}
		assert.False(t, b.withdraw(budgetStart.Add(1000*time.Hour)))
		for range 10 {
			b.deposit(budgetStart.Add(1000 * time.Hour))
		}
		assert.True(t, b.withdraw(budgetStart.Add(1000*time.Hour)))
	})
	t.Run("an earlier now counts in the newest slot", func(t *testing.T) {
		b := newRetryBudget(0.1, 0, ttl)
		b.deposit(budgetStart.Add(5 * time.Second))
		for range 9 {
			b.deposit(budgetStart) // a caller that read its clock before the first
		}
		assert.True(t, b.withdraw(budgetStart.Add(14*time.Second)), "all ten deposits live in the slot of 5 s")
		assert.False(t, b.withdraw(budgetStart.Add(15*time.Second)))
	})
}

func TestRetryBudgetConcurrent(t *testing.T) {
	b := newRetryBudget(0.1, 1, 10*time.Second)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 100 {
				b.deposit(budgetStart)
			}
		})
	}
	wg.Wait()
	var mu sync.Mutex
	allowed := 0
	for range 10 {
		wg.Go(func() {
			for range 50 {
				if b.withdraw(budgetStart) {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 110, allowed, "1000 first attempts × 0.1 + 10 s × 1/s")
}

func TestRetryBudgetNoAllocs(t *testing.T) {
	b := newRetryBudget(0.1, 1, 10*time.Second)
	now := budgetStart
	allocs := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		b.deposit(now)
		b.withdraw(now)
	})
	assert.Zero(t, allocs)
}

func BenchmarkRetryBudget(b *testing.B) {
	rb := newRetryBudget(0.1, 1, 10*time.Second)
	now := budgetStart
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		rb.deposit(now)
		rb.withdraw(now)
	}
}

func BenchmarkBackoffDelay(b *testing.B) {
	b.ReportAllocs()
	var sink time.Duration
	for b.Loop() {
		sink += backoffDelay(JitterFull, 500*time.Millisecond, 8*time.Second, 0, 3, 0.5)
	}
	_ = sink
}
