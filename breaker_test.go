package geminiguard

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard/internal/circuit"
)

var brkT0 = time.Date(2026, time.March, 2, 10, 0, 0, 0, time.UTC)

func TestStateString(t *testing.T) {
	for s, want := range map[State]string{
		StateClosed:   "closed",
		StateOpen:     "open",
		StateHalfOpen: "half-open",
		State(7):      "State(7)",
	} {
		assert.Equal(t, want, s.String())
	}
}

func TestBreakerSettingsWithDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   BreakerSettings
		want BreakerSettings
	}{
		{"zero", BreakerSettings{}, BreakerSettings{FailureThreshold: 5, DeadAfter: 10 * time.Second, OpenFor: 30 * time.Second, MinOpenFor: 2 * time.Second, HalfOpenProbes: 1, AllOpenProbeEvery: 2 * time.Second}},
		{"set fields kept", BreakerSettings{FailureThreshold: 3, DeadAfter: time.Second, OpenFor: time.Minute, HalfOpenProbes: 2, AllOpenProbeEvery: 5 * time.Second},
			BreakerSettings{FailureThreshold: 3, DeadAfter: time.Second, OpenFor: time.Minute, MinOpenFor: 2 * time.Second, HalfOpenProbes: 2, AllOpenProbeEvery: 5 * time.Second}},
		{"failure rate fills window and min requests", BreakerSettings{FailureRate: 0.5},
			BreakerSettings{FailureThreshold: 5, DeadAfter: 10 * time.Second, OpenFor: 30 * time.Second, MinOpenFor: 2 * time.Second, HalfOpenProbes: 1, FailureRate: 0.5, Window: time.Minute, MinRequests: 10, AllOpenProbeEvery: 2 * time.Second}},
		{"negative kept for validate, or to turn early probes and the silence rule off", BreakerSettings{FailureThreshold: -1, DeadAfter: -1, OpenFor: -time.Second, HalfOpenProbes: -2, AllOpenProbeEvery: -1},
			BreakerSettings{FailureThreshold: -1, DeadAfter: -1, OpenFor: -time.Second, HalfOpenProbes: -2, AllOpenProbeEvery: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.in.withDefaults()
			assert.Equal(t, tt.want, got)
			assert.Equal(t, got, got.withDefaults(), "idempotent")
		})
	}
}

func TestBreakerSettingsValidate(t *testing.T) {
	tests := []struct {
		name string
		in   BreakerSettings
		want []string // one substring per expected error, in order; none: valid
	}{
		{"zero", BreakerSettings{}, nil},
		{"defaults", BreakerSettings{}.withDefaults(), nil},
		{"failure rate defaults", BreakerSettings{FailureRate: 0.5}.withDefaults(), nil},
		{"failure rate 1", BreakerSettings{FailureRate: 1, Window: time.Second, MinRequests: 1}, nil},
		{"negative threshold", BreakerSettings{FailureThreshold: -1}, []string{"BreakerSettings.FailureThreshold is -1: use a positive count, or 0 for the default (5)"}},
		{"negative open for", BreakerSettings{OpenFor: -time.Second}, []string{"BreakerSettings.OpenFor is -1s"}},
		{"negative min open for", BreakerSettings{MinOpenFor: -time.Second}, []string{"BreakerSettings.MinOpenFor is -1s"}},
		{"min open for past open for", BreakerSettings{OpenFor: 5 * time.Second, MinOpenFor: 10 * time.Second}, []string{"BreakerSettings.MinOpenFor is 10s, longer than OpenFor (5s)"}},
		{"min open for past the default open for", BreakerSettings{MinOpenFor: time.Minute}, []string{"BreakerSettings.MinOpenFor is 1m0s, longer than OpenFor (30s)"}},
		{"open for shorter than the default min open for", BreakerSettings{OpenFor: time.Second}, nil},
		{"negative probes", BreakerSettings{HalfOpenProbes: -1}, []string{"BreakerSettings.HalfOpenProbes is -1"}},
		{"early probes off", BreakerSettings{AllOpenProbeEvery: -1}, nil},
		{"early probes too often", BreakerSettings{AllOpenProbeEvery: 10 * time.Millisecond}, []string{"BreakerSettings.AllOpenProbeEvery is 10ms: use at least 1s"}},
		{"rate above 1", BreakerSettings{FailureRate: 50}, []string{"BreakerSettings.FailureRate is 50: use a fraction in (0, 1]"}},
		{"rate negative", BreakerSettings{FailureRate: -0.1}, []string{"BreakerSettings.FailureRate is -0.1"}},
		{"rate NaN", BreakerSettings{FailureRate: math.NaN()}, []string{"BreakerSettings.FailureRate is NaN"}},
		{"window negative", BreakerSettings{FailureRate: 0.5, Window: -time.Second}, []string{"BreakerSettings.Window is -1s"}},
		{"window too short", BreakerSettings{FailureRate: 0.5, Window: time.Millisecond}, []string{"BreakerSettings.Window is 1ms: use a duration of at least 1s"}},
		{"window without rate", BreakerSettings{Window: time.Minute}, []string{"BreakerSettings.Window is 1m0s but FailureRate is 0"}},
		{"min requests negative", BreakerSettings{FailureRate: 0.5, MinRequests: -3}, []string{"BreakerSettings.MinRequests is -3"}},
		{"min requests without rate", BreakerSettings{MinRequests: 3}, []string{"BreakerSettings.MinRequests is 3 but FailureRate is 0"}},
		{"every problem at once", BreakerSettings{FailureThreshold: -1, OpenFor: -1, HalfOpenProbes: -1, FailureRate: 2, Window: -1, MinRequests: -1},
			[]string{"FailureThreshold", "OpenFor", "HalfOpenProbes", "FailureRate", "Window", "MinRequests"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.in.validate()
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), err.Error())
			for i, w := range tt.want {
				assert.True(t, strings.HasPrefix(lines[i], "geminiguard: "), lines[i])
				assert.Contains(t, lines[i], w)
			}
		})
	}
}

func TestOutcomeOf(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		err  error
		v    Verdict
		want outcome
	}{
		{"nil error", nil, Verdict{}, outcomeSuccess},
		{"nil error wins over a counting verdict", nil, Verdict{counts: true}, outcomeSuccess},
		{"counted failure", boom, Verdict{Class: ClassOverloaded, counts: true}, outcomeFailure},
		{"caller cancel", boom, Verdict{Class: ClassCanceled}, outcomeIgnore},
		{"quota answer", boom, Verdict{Class: ClassDailyQuota, cool: coolUntilMidnight}, outcomeIgnore},
		{"request error", boom, Verdict{Class: ClassBadRequest}, outcomeIgnore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, outcomeOf(tt.err, tt.v))
		})
	}
}

// snapshot returns the breaker's counters at now (circuit.Breaker.Snapshot),
// for the tests that read them.
func (b *breaker) snapshot(now time.Time) circuit.Stats { return b.sm.Snapshot(now) }

// The root's State and the breaker's are one numbering: the glue converts
// between them.
func TestStateIsTheBreakers(t *testing.T) {
	for s, want := range map[circuit.State]State{circuit.Closed: StateClosed, circuit.Open: StateOpen, circuit.HalfOpen: StateHalfOpen} {
		assert.Equal(t, want, State(s))
		assert.Equal(t, s.String(), want.String())
	}
}

func TestBreakerRefusalError(t *testing.T) {
	b := newBreaker(BreakerSettings{FailureThreshold: 1, MinOpenFor: defaultOpenFor})
	p, _, err := b.allow(brkT0)
	require.NoError(t, err)
	require.NotNil(t, b.done(p, brkT0, outcomeFailure))

	_, _, err = b.allow(brkT0.Add(time.Second))
	require.ErrorIs(t, err, ErrCircuitOpen)
	var oe openError
	require.ErrorAs(t, err, &oe)
	assert.Equal(t, brkT0.Add(defaultOpenFor), oe.Until)
	assert.Equal(t, "geminiguard: circuit open until 2026-03-02T10:00:30Z", err.Error())
	_, _, again := b.allow(brkT0.Add(2 * time.Second))
	assert.Same(t, oe.Refusal, again.(openError).Refusal, "one error value per opening")

	_, tr, err := b.allow(brkT0.Add(defaultOpenFor))
	require.NoError(t, err)
	require.NotNil(t, tr)
	_, _, err = b.allow(brkT0.Add(defaultOpenFor))
	require.ErrorIs(t, err, ErrCircuitOpen)
	require.ErrorAs(t, err, &oe)
	assert.True(t, oe.Until.IsZero(), "half-open: no known end")
	assert.Equal(t, "geminiguard: circuit half-open: probes in flight", err.Error())
}

func TestBreakerAllocs(t *testing.T) {
	for _, s := range []BreakerSettings{{}, {FailureRate: 0.5}} {
		b := newBreaker(s)
		now := brkT0
		allocs := testing.AllocsPerRun(1000, func() {
			now = now.Add(time.Millisecond)
			p, _, _ := b.allow(now)
			b.done(p, now, outcomeSuccess)
		})
		assert.Zero(t, allocs, "closed allow+done, FailureRate %v", s.FailureRate)
	}

	b := newBreaker(BreakerSettings{FailureThreshold: 1})
	p, _, _ := b.allow(brkT0)
	require.NotNil(t, b.done(p, brkT0, outcomeFailure))
	allocs := testing.AllocsPerRun(1000, func() {
		if _, _, err := b.allow(brkT0.Add(time.Second)); err == nil {
			t.Fatal("granted while open")
		}
	})
	assert.Zero(t, allocs, "open refusal")

	var c coolDown
	c.set(brkT0.Add(time.Minute), ClassRateLimit)
	allocs = testing.AllocsPerRun(1000, func() { c.until(brkT0) })
	assert.Zero(t, allocs, "cool-down check")
}

func BenchmarkBreakerAllow(b *testing.B) {
	b.Run("closed", func(b *testing.B) {
		br := newBreaker(BreakerSettings{})
		b.ReportAllocs()
		for b.Loop() {
			p, _, _ := br.allow(brkT0)
			br.done(p, brkT0, outcomeSuccess)
		}
	})
	b.Run("closed/parallel", func(b *testing.B) {
		br := newBreaker(BreakerSettings{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, _, _ := br.allow(brkT0)
				br.done(p, brkT0, outcomeSuccess)
			}
		})
	})
	b.Run("closed/rate", func(b *testing.B) {
		br := newBreaker(BreakerSettings{FailureRate: 0.5})
		b.ReportAllocs()
		for b.Loop() {
			p, _, _ := br.allow(brkT0)
			br.done(p, brkT0, outcomeSuccess)
		}
	})
	b.Run("open", func(b *testing.B) {
		br := newBreaker(BreakerSettings{FailureThreshold: 1})
		p, _, _ := br.allow(brkT0)
		br.done(p, brkT0, outcomeFailure)
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := br.allow(brkT0); err == nil {
				b.Fatal("granted while open")
			}
		}
	})
}
