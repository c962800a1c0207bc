package geminiguard_test

import (
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// Models of the built-in price table (Prices) the cost tests use.
const (
	flash25 = "gemini-2.5-flash"      // $0.30 in, $2.50 out, $0.03 cached
	pro25   = "gemini-2.5-pro"        // $1.25 / $10 up to 200k prompt tokens, $2.50 / $15 above
	flash38 = "gemini-3.8-flash"      // $0.75 / $3.75 through 2026-12-31, $1.50 / $7.50 from 2027-01-01 (Pacific)
	unknown = "gemini-9-experimental" // in no price table
)

// answer400 is an answer of 400 characters: 100 output tokens to the fake.
var answer400 = strings.Repeat("abcd", 100)

// billedStep answers with 1000 prompt tokens of which 200 cached, 300
// thinking tokens and 100 output tokens.
var billedStep = geminitest.Step{Text: answer400, PromptTokens: 1000, CachedTokens: 200, ThoughtsTokens: 300}

var billedTokens = geminiguard.Tokens{Input: 1000, Output: 100, Thinking: 300, Cached: 200}

// always makes a fake model answer every request with st.
func always(name string, st geminitest.Step) geminitest.Model {
	return geminitest.Model{Name: name, Decide: func(geminitest.Request, int) geminitest.Step { return st }}
}

// modelStats returns the Stats of model.
func modelStats(t *testing.T, c *geminiguard.Client, model string) geminiguard.ModelStats {
	t.Helper()
	for _, m := range c.Stats().Models {
		if m.Model == model {
			return m
		}
	}
	t.Fatalf("no stats for %s", model)
	return geminiguard.ModelStats{}
}

// TestCallCostIsHandComputed: a call's record carries its tokens from
// usageMetadata and their cost at the model's built-in price, to the
// micro-dollar, and the model's Stats the same, with no limits set. Thinking
// is billed as output, cached tokens at the cached rate.
func TestCallCostIsHandComputed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(always(flash25, billedStep))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash25))
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)

		// 800 uncached × $0.30 + 200 cached × $0.03 + (100 + 300) × $2.50, per 1M:
		// 240 + 6 + 1000 micro-dollars.
		want := geminiguard.Micros(1246)
		assert.Equal(t, billedTokens, rec.Tokens)
		assert.Equal(t, want, rec.Cost)
		assert.True(t, rec.CostKnown)
		assert.Equal(t, "$0.001246", rec.Cost.String())

		ms := modelStats(t, c, flash25)
		assert.Equal(t, billedTokens, ms.Tokens)
		assert.Equal(t, want, ms.Cost)
		assert.True(t, ms.CostKnown)
		assert.Zero(t, ms.TokensUsed, "the limiter's count: no TPM limit")
	})
}

// TestStreamCostIsItsLastChunks: a stream is billed once, when it ends, from
// its last chunk's usageMetadata (a running total), not once per chunk.
func TestStreamCostIsItsLastChunks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := always(flash25, billedStep)
		m.Chunks, m.ChunkInterval = 4, 100*time.Millisecond
		srv := geminitest.New(m)
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash25))
		var rec geminiguard.CallRecord
		chunks := 0
		for _, err := range c.GenerateContentStream(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("Tell me a story"), nil) {
			require.NoError(t, err)
			chunks++
		}
		require.Equal(t, 4, chunks)
		assert.Equal(t, billedTokens, rec.Tokens)
		assert.Equal(t, geminiguard.Micros(1246), rec.Cost)
		assert.True(t, rec.CostKnown)
		assert.Equal(t, geminiguard.Micros(1246), modelStats(t, c, flash25).Cost)
	})
}

// TestLongPromptTier: a prompt of more than 200k tokens bills the whole
// response, output included, at the long-prompt rates; 200k exactly does not.
func TestLongPromptTier(t *testing.T) {
	for _, tc := range []struct {
		prompt int
		want   geminiguard.Micros
	}{
		{200_000, 250_000 + 1_000}, // 200k × $1.25 + 100 × $10 per 1M
		{300_000, 750_000 + 1_500}, // 300k × $2.50 + 100 × $15 per 1M
	} {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(always(pro25, geminitest.Step{Text: answer400, PromptTokens: tc.prompt}))
			c := newClient(t, srv, nil, geminiguard.WithCascade(pro25))
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, tc.want, rec.Cost, "prompt of %d tokens", tc.prompt)
		})
	}
}

// TestPriceDoublesAtPacificMidnight: gemini-3.8-flash's price doubles on
// 2027-01-01 from midnight America/Los_Angeles: an answer at 23:59:59 PST on
// New Year's Eve costs the old price, one a second later the new.
func TestPriceDoublesAtPacificMidnight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pst := time.FixedZone("PST", -8*60*60) // America/Los_Angeles in January
		srv := geminitest.New(always(flash38, billedStep))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash38))

		time.Sleep(time.Until(time.Date(2026, time.December, 31, 23, 59, 59, 0, pst)))
		_, before, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		time.Sleep(time.Second)
		require.Equal(t, time.Date(2027, time.January, 1, 0, 0, 0, 0, pst), time.Now().In(pst))
		_, after, err := ask(t.Context(), c, "")
		require.NoError(t, err)

		// 1000 input tokens (no cache price: all at the input rate) and 400
		// output and thinking tokens.
		assert.Equal(t, geminiguard.Micros(750+1500), before.Cost, "$0.75 / $3.75 through December 31, 2026")
		assert.Equal(t, geminiguard.Micros(1500+3000), after.Cost, "$1.50 / $7.50 starting January 1, 2027")
		assert.Equal(t, geminiguard.Micros(2250+4500), modelStats(t, c, flash38).Cost)
	})
}

// TestCostAddsUpExactly: over 1,000 calls the model's cost in Stats is
// exactly the sum of the calls' records, and 1,000 times one call's cost: no
// drift, as float sums of $0.00014 would have.
func TestCostAddsUpExactly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(always(flash, geminitest.Step{Text: answer400, PromptTokens: 1000}))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithPrices(flash, geminiguard.Price{Input: 0.10 * geminiguard.Dollar, Output: 0.40 * geminiguard.Dollar}))
		const calls = 1000
		var (
			wg  sync.WaitGroup
			mu  sync.Mutex
			sum geminiguard.Micros
		)
		for range 10 {
			wg.Go(func() {
				for range calls / 10 {
					_, rec, err := ask(t.Context(), c, "")
					if !assert.NoError(t, err) {
						return
					}
					assert.Equal(t, geminiguard.Micros(100+40), rec.Cost) // 1000 × $0.10 + 100 × $0.40 per 1M
					mu.Lock()
					sum += rec.Cost
					mu.Unlock()
				}
			})
		}
		wg.Wait()

		ms := modelStats(t, c, flash)
		assert.Equal(t, sum, ms.Cost)
		assert.Equal(t, geminiguard.Micros(calls*140), ms.Cost)
		assert.Equal(t, "$0.140000", ms.Cost.String())
		assert.Equal(t, geminiguard.Tokens{Input: calls * 1000, Output: calls * 100}, ms.Tokens)
	})
}

// TestWithPricesOverrides: WithPrices replaces a model's built-in prices
// with a dated schedule of its own, and prices a model the table lacks.
func TestWithPricesOverrides(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		change := time.Now().Add(time.Hour)
		srv := geminitest.New(always(flash25, billedStep), always(unknown, billedStep))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash25, unknown),
			geminiguard.WithPrices("models/"+flash25,
				geminiguard.Price{EffectiveFrom: change, Input: 2 * geminiguard.Dollar, Output: 4 * geminiguard.Dollar, CachedInput: 1 * geminiguard.Dollar},
				geminiguard.Price{Input: 1 * geminiguard.Dollar, Output: 2 * geminiguard.Dollar}, // since always; no cache price: cached at the input rate
			),
			geminiguard.WithPrices(unknown, geminiguard.Price{Output: 1 * geminiguard.Dollar}))

		_, rec, err := ask(t.Context(), c, flash25)
		require.NoError(t, err)
		assert.Equal(t, geminiguard.Micros(1000+800), rec.Cost) // 1000 × $1 + 400 × $2 per 1M
		time.Sleep(time.Hour)
		_, rec, err = ask(t.Context(), c, flash25)
		require.NoError(t, err)
		assert.Equal(t, geminiguard.Micros(1600+200+1600), rec.Cost) // 800 × $2 + 200 × $1 + 400 × $4
		_, rec, err = ask(t.Context(), c, unknown)
		require.NoError(t, err)
		assert.Equal(t, geminiguard.Micros(400), rec.Cost) // input free, 400 × $1
		assert.True(t, rec.CostKnown)
	})
}

// TestUnpricedModelCostIsUnknown: a model without a price has an unknown
// cost, in the record and in Stats, never a silent zero; its tokens count.
// A price not yet in effect is no price either.
func TestUnpricedModelCostIsUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(always(unknown, billedStep), always(flash25, billedStep))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash25, unknown),
			geminiguard.WithPrices(flash25, geminiguard.Price{EffectiveFrom: time.Now().Add(time.Minute), Input: 1}))
		for _, model := range []string{unknown, flash25} {
			_, rec, err := ask(t.Context(), c, model)
			require.NoError(t, err)
			assert.False(t, rec.CostKnown, model)
			assert.Equal(t, billedTokens, rec.Tokens, model)
			ms := modelStats(t, c, model)
			assert.False(t, ms.CostKnown, model)
			assert.Equal(t, billedTokens, ms.Tokens, model)
		}
	})
}

// TestBlockedPromptIsCounted: a failed answer that reports usageMetadata (a
// blocked prompt) counts in the failed call's record.
func TestBlockedPromptIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(always(flash25, geminitest.Step{Fault: geminitest.PromptBlocked, PromptTokens: 1000}))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash25))
		_, rec, err := ask(t.Context(), c, "")
		require.ErrorIs(t, err, geminiguard.ErrBlocked)
		assert.Equal(t, geminiguard.Tokens{Input: 1000}, rec.Tokens)
		assert.Equal(t, geminiguard.Micros(300), rec.Cost) // 1000 × $0.30 per 1M
		assert.True(t, rec.CostKnown)
	})
}

// TestWithPricesRejectsBadPrices: New reports every bad price at once, each
// saying what to fix.
func TestWithPricesRejectsBadPrices(t *testing.T) {
	at := time.Date(2027, time.January, 1, 8, 0, 0, 0, time.UTC)
	_, err := newOffline(t, geminiguard.WithPrices(""),
		geminiguard.WithPrices(flash, geminiguard.Price{Input: -1}),
		geminiguard.WithPrices(pro, geminiguard.Price{Output: 3_000_000_000 * geminiguard.Dollar}), // $3e9 per 1M: units slipped
		geminiguard.WithPrices(lite, geminiguard.Price{EffectiveFrom: at}, geminiguard.Price{EffectiveFrom: at.In(time.Local)}),
		geminiguard.WithPrices(flash25, geminiguard.Price{LongPrompt: 200_000, LongInput: 1}),
		geminiguard.WithPrices(pro25, geminiguard.Price{LongOutput: 1}),
		geminiguard.WithPrices(flash38, geminiguard.Price{LongPrompt: -1}),
	)
	require.Error(t, err)
	for _, want := range []string{
		`geminiguard: WithPrices(""): give a model name`,
		`geminiguard: WithPrices(""): give at least one Price`,
		`geminiguard: WithPrices("` + flash + `"): price 1: Input -1 is outside [0, 100000000000]`,
		`geminiguard: WithPrices("` + pro + `"): price 1: Output 3000000000000000 is outside`,
		`geminiguard: WithPrices("` + lite + `"): price 2: another price takes effect at the same instant 2027-01-01T08:00:00Z`,
		`geminiguard: WithPrices("` + flash25 + `"): price 1: LongPrompt 200000 needs LongInput and LongOutput`,
		`geminiguard: WithPrices("` + pro25 + `"): price 1: Long rates need LongPrompt`,
		`geminiguard: WithPrices("` + flash38 + `"): price 1: LongPrompt -1 is negative`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestPricesTableIsSourced: every built-in price names its source, and the
// table holds the 2027 change of gemini-3.8-flash at Pacific midnight.
func TestPricesTableIsSourced(t *testing.T) {
	table := geminiguard.Prices()
	for model, prices := range table {
		for _, p := range prices {
			assert.NotEmpty(t, p.Source, model)
		}
	}
	f := table[flash38]
	require.Len(t, f, 2)
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		la = time.FixedZone("PST", -8*60*60)
	}
	assert.Equal(t, time.Date(2027, time.January, 1, 0, 0, 0, 0, la).UTC(), f[1].EffectiveFrom.UTC())
	assert.Equal(t, 2*f[0].Input, f[1].Input)
	assert.Equal(t, 2*f[0].Output, f[1].Output)
}
