package geminiguard

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genai"
)

// TestPriceCost: the cost of a response's tokens at a price, to the
// micro-dollar, for each tier, service tier and rounding case, and without
// overflow at the largest rate and token counts.
func TestPriceCost(t *testing.T) {
	pro := Price{Input: 1.25 * Dollar, Output: 10 * Dollar, CachedInput: 0.125 * Dollar,
		LongPrompt: 200_000, LongInput: 2.50 * Dollar, LongOutput: 15 * Dollar, LongCachedInput: 0.25 * Dollar}
	maxInt32 := int64(math.MaxInt32)
	for _, tc := range []struct {
		name   string
		p      Price
		tk     Tokens
		prompt int64
		tier   genai.ServiceTier
		want   Micros
	}{
		{"short tier", pro, Tokens{Input: 1000, Output: 100, Thinking: 100}, 1000, "", 1250 + 2000},
		{"cached at the cached rate", pro, Tokens{Input: 1000, Cached: 1000}, 1000, "", 125},
		{"long tier bills output long too", pro, Tokens{Input: 200_001, Output: 1000}, 200_001, "", 500_003 + 15_000}, // 500_002.5 rounds up
		{"long tier, cached", pro, Tokens{Input: 300_000, Cached: 100_000}, 300_000, "", 500_000 + 25_000},
		{"no cache price: the input rate", Price{Input: 1 * Dollar}, Tokens{Input: 10, Cached: 10}, 10, "", 10},
		{"flex costs half", pro, Tokens{Input: 1000, Output: 100}, 1000, genai.ServiceTierFlex, (1250 + 1000) / 2},
		{"priority costs 1.8 times", pro, Tokens{Input: 1000, Output: 100}, 1000, genai.ServiceTierPriority, (1250 + 1000) * 9 / 5},
		{"standard is the price", pro, Tokens{Input: 1000}, 1000, genai.ServiceTierStandard, 1250},
		{"below half a micro-dollar rounds down", Price{Input: 0.30 * Dollar}, Tokens{Input: 1}, 1, "", 0},
		{"half a micro-dollar rounds up", Price{Input: 0.50 * Dollar}, Tokens{Input: 1}, 1, "", 1},
		{"flex rounds the exact half", Price{Input: 1}, Tokens{Input: 1_000_000}, 1, genai.ServiceTierFlex, 1}, // $0.0000005
		{"largest rate and counts", Price{Input: maxRate, Output: maxRate, CachedInput: maxRate},
			Tokens{Input: 2 * maxInt32, Output: maxInt32, Thinking: maxInt32, Cached: maxInt32}, maxInt32, genai.ServiceTierPriority,
			Micros(4 * maxInt32 * 100_000 * 9 / 5)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tc.p.cost(tc.tk, tc.prompt, tc.tier))
		})
	}
}

// TestPriceTableAt: the price in effect at an instant is the latest one
// that took effect, from its very instant; before the first, none.
func TestPriceTableAt(t *testing.T) {
	t0 := time.Date(2027, time.January, 1, 8, 0, 0, 0, time.UTC)
	table := newPriceTable(nil, map[string][]Price{"m": {{EffectiveFrom: t0.Add(time.Hour), Input: 3}, {EffectiveFrom: t0, Input: 2}}})
	for _, tc := range []struct {
		at     time.Time
		want   Micros
		wantOK bool
	}{
		{t0.Add(-time.Nanosecond), 0, false},
		{t0, 2, true},
		{t0.Add(time.Hour - time.Nanosecond), 2, true},
		{t0.Add(time.Hour), 3, true},
		{t0.AddDate(10, 0, 0), 3, true},
	} {
		p, ok := priceAt(table["m"], tc.at)
		assert.Equal(t, tc.wantOK, ok, tc.at)
		assert.Equal(t, tc.want, p.Input, tc.at)
	}
	_, ok := priceAt(table["other"], t0)
	assert.False(t, ok)
}

// TestModelPriceFollowsItsSpan: a model's price, cached for the span it is
// in effect, is the table's at every instant, in whatever order the
// instants come (calls' clock readings race), and a price in effect since
// always covers every instant before the next one.
func TestModelPriceFollowsItsSpan(t *testing.T) {
	t0 := time.Date(2027, time.January, 1, 8, 0, 0, 0, time.UTC)
	table := newPriceTable(nil, map[string][]Price{
		"m":      {{EffectiveFrom: t0.Add(time.Hour), Input: 3}, {EffectiveFrom: t0, Input: 2}},
		"always": {{Input: 1}, {EffectiveFrom: t0, Input: 2}},
	})
	for _, name := range []string{"m", "always"} {
		m := &modelState{name: name, prices: table[name]}
		for _, at := range []time.Time{
			t0.Add(time.Hour), t0, t0.Add(-time.Nanosecond), t0.AddDate(10, 0, 0), t0.Add(time.Hour - time.Nanosecond),
			t0.AddDate(-10, 0, 0), t0.Add(time.Hour), t0, t0.Add(time.Hour - time.Nanosecond), t0.Add(-time.Nanosecond),
		} {
			want, wantOK := priceAt(m.prices, at)
			got, ok := m.price(at)
			assert.Equal(t, wantOK, ok, "%s at %v", name, at)
			assert.Equal(t, want.Input, got.Input, "%s at %v", name, at)
		}
	}
}
