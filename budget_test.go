package geminiguard_test

import (
	"errors"
	"math"
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

// Models of the budget tests, priced with round rates (WithPrices) so that
// each call costs an exact amount: budgetStep is 1000 prompt tokens and 100
// output tokens.
const (
	dearModel  = "budget-dear"  // $1 in, $10 out per 1M: 1000 + 1000 = 2000 micro-dollars a call
	cheapModel = "budget-cheap" // $0.50 in, $5 out per 1M: 500 + 500 = 1000 micro-dollars a call
)

var budgetStep = geminitest.Step{Text: answer400, PromptTokens: 1000}

// budgetClient returns a Client over a fake serving dearModel and
// cheapModel, with their round prices, cascade dear then cheap, and b.
func budgetClient(t *testing.T, b geminiguard.Budget, opts ...geminiguard.Option) (*geminiguard.Client, *geminitest.Server) {
	t.Helper()
	srv := geminitest.New(always(dearModel, budgetStep), always(cheapModel, budgetStep))
	c := newClient(t, srv, nil, append([]geminiguard.Option{
		geminiguard.WithCascade(dearModel, cheapModel),
		geminiguard.WithPrices(dearModel, geminiguard.Price{Input: 1 * geminiguard.Dollar, Output: 10 * geminiguard.Dollar}),
		geminiguard.WithPrices(cheapModel, geminiguard.Price{Input: 0.50 * geminiguard.Dollar, Output: 5 * geminiguard.Dollar}),
		geminiguard.WithBudget(b),
	}, opts...)...)
	return c, srv
}

// spendCalls makes n calls, each answered by dearModel for 2000 micro-dollars.
func spendCalls(t *testing.T, c *geminiguard.Client, n int) {
	t.Helper()
	for i := range n {
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err, "call %d", i+1)
		require.Equal(t, geminiguard.Micros(2000), rec.Cost)
	}
}

// requireRefused asserts that a call now fails at once with
// ErrBudgetExhausted, sending nothing.
func requireRefused(t *testing.T, c *geminiguard.Client, srv *geminitest.Server) {
	t.Helper()
	before := srv.Total(dearModel) + srv.Total(cheapModel)
	start := time.Now()
	_, rec, err := ask(t.Context(), c, "")
	require.Error(t, err)
	assert.ErrorIs(t, err, geminiguard.ErrBudgetExhausted)
	assert.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
	v := geminiguard.Classify(err)
	assert.Equal(t, geminiguard.ClassBudgetExhausted, v.Class)
	assert.Equal(t, geminiguard.ScopeProject, v.Scope)
	assert.Equal(t, before, srv.Total(dearModel)+srv.Total(cheapModel), "no request sent")
	assert.Zero(t, time.Since(start), "refused at once")
	require.Len(t, rec.Attempts, 1, "the cascade stops at the first model")
	assert.True(t, rec.Attempts[0].Skipped)
}

// TestBudgetDayRefusesUntilPacificMidnight: calls spend until the daily
// budget is reached; the next is refused, sending nothing, in no time, with
// an error saying until when; after midnight Pacific calls go through again.
func TestBudgetDayRefusesUntilPacificMidnight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, srv := budgetClient(t, geminiguard.Budget{PerDay: 10_000, SteerAt: 1})
		spendCalls(t, c, 5)
		assert.Equal(t, 5, srv.Hits(dearModel, geminitest.VerbGenerate))
		requireRefused(t, c, srv)

		_, _, err := ask(t.Context(), c, "")
		// The fake clock starts at 2000-01-01 00:00 UTC, 16:00 PST.
		assert.ErrorContains(t, err, "until 2000-01-01T08:00:00Z")
		assert.ErrorContains(t, err, "of the daily budget", "the window is named in English")
		st := c.Stats().Budget
		assert.Equal(t, geminiguard.Micros(10_000), st.SpentToday)
		assert.Equal(t, geminiguard.Micros(10_000), st.PerDay)

		time.Sleep(8*time.Hour - time.Second)
		requireRefused(t, c, srv)
		time.Sleep(time.Second) // midnight Pacific
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, dearModel, rec.Model)
		assert.Equal(t, geminiguard.Micros(2000), c.Stats().Budget.SpentToday)
	})
}

// TestBudgetExhaustedFallbackAnswers: a spent budget is a project-wide
// refusal: the Fallback answers, and nothing is sent.
func TestBudgetExhaustedFallbackAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, srv := budgetClient(t, geminiguard.Budget{PerDay: 2000},
			geminiguard.WithFallback(geminiguard.TextFallback("over budget")))
		spendCalls(t, c, 1)
		resp, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.True(t, geminiguard.IsFallback(resp))
		assert.Equal(t, "over budget", resp.Text())
		assert.Equal(t, 1, srv.Total(dearModel)+srv.Total(cheapModel))
	})
}

// TestBudgetSteersToCheaperModel: past SteerAt of the budget, calls skip the
// healthy but dearer primary for the cheaper secondary, until the budget is
// spent.
func TestBudgetSteersToCheaperModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, srv := budgetClient(t, geminiguard.Budget{PerDay: 10_000}) // steers from 8000
		spendCalls(t, c, 4)
		for i := range 2 {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err, "call %d", i+5)
			assert.Equal(t, cheapModel, rec.Model)
			assert.Equal(t, geminiguard.Micros(1000), rec.Cost)
			require.Len(t, rec.Attempts, 2)
			assert.Equal(t, dearModel, rec.Attempts[0].Model)
			assert.True(t, rec.Attempts[0].Skipped)
			assert.NotErrorIs(t, rec.Attempts[0].Err, geminiguard.ErrBudgetExhausted, "steered, not refused")
		}
		assert.Equal(t, 4, srv.Hits(dearModel, geminitest.VerbGenerate))
		assert.Equal(t, 2, srv.Hits(cheapModel, geminitest.VerbGenerate))
		requireRefused(t, c, srv)
	})
}

// TestBudgetMonthRefusesUntilTheFirst: a monthly budget spent holds across
// the Pacific midnights of the month and ends on the 1st.
func TestBudgetMonthRefusesUntilTheFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pst := time.FixedZone("PST", -8*3600)
		time.Sleep(time.Until(time.Date(2000, time.January, 30, 12, 0, 0, 0, pst)))
		c, srv := budgetClient(t, geminiguard.Budget{PerMonth: 10_000, SteerAt: 1})
		spendCalls(t, c, 5)
		requireRefused(t, c, srv)
		_, _, err := ask(t.Context(), c, "")
		assert.ErrorContains(t, err, "until 2000-02-01T08:00:00Z")
		assert.ErrorContains(t, err, "of the monthly budget")

		time.Sleep(time.Until(time.Date(2000, time.January, 31, 12, 0, 0, 0, pst))) // a new day, the same month
		requireRefused(t, c, srv)
		assert.Equal(t, geminiguard.Micros(0), c.Stats().Budget.SpentToday)
		assert.Equal(t, geminiguard.Micros(10_000), c.Stats().Budget.SpentThisMonth)

		time.Sleep(time.Until(time.Date(2000, time.February, 1, 0, 0, 0, 0, pst)))
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, dearModel, rec.Model)
		assert.Equal(t, geminiguard.Micros(2000), c.Stats().Budget.SpentThisMonth)
	})
}

// TestBudgetBadValuesAreNewErrors: New says what to fix in a Budget.
func TestBudgetBadValuesAreNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    geminiguard.Budget
		want string
	}{
		{"zero", geminiguard.Budget{}, "give PerDay or PerMonth"},
		{"negative day", geminiguard.Budget{PerDay: -1}, "must not be negative"},
		{"negative month", geminiguard.Budget{PerDay: 1, PerMonth: -1}, "must not be negative"},
		{"steer above 1", geminiguard.Budget{PerDay: 1, SteerAt: 1.5}, "SteerAt 1.5 is outside [0, 1]"},
		{"steer NaN", geminiguard.Budget{PerDay: 1, SteerAt: math.NaN()}, "SteerAt NaN is outside [0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := newOffline(t, geminiguard.WithBudget(tc.b))
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
			assert.False(t, errors.Is(err, geminiguard.ErrBudgetExhausted))
		})
	}
}

// TestBudgetCountsCallsInFlight: 48 callers call at once until the daily
// budget refuses them; the calls in flight count against it from their
// admission (their estimated cost), so the day ends at most one call's
// worth above the budget, not up to 47 calls above it.
func TestBudgetCountsCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			perCall = geminiguard.Micros(2000) // 1000 prompt tokens at $1/1M, 100 output tokens at $10/1M
			budget  = 50 * perCall
			callers = 48
		)
		srv := geminitest.New(always(dearModel, geminitest.Step{Text: answer400, Latency: time.Second}))
		c := newClient(t, srv, nil, geminiguard.WithCascade(dearModel),
			geminiguard.WithPrices(dearModel, geminiguard.Price{Input: 1 * geminiguard.Dollar, Output: 10 * geminiguard.Dollar}),
			geminiguard.WithBudget(geminiguard.Budget{PerDay: budget, SteerAt: 1}))
		prompt := genai.Text(strings.Repeat("word", 1000)) // 1000 tokens, to the fake and to the estimate

		var wg sync.WaitGroup
		for range callers {
			wg.Go(func() {
				for {
					var rec geminiguard.CallRecord
					_, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", prompt, nil)
					if err != nil {
						assert.ErrorIs(t, err, geminiguard.ErrBudgetExhausted)
						return
					}
					assert.Equal(t, perCall, rec.Cost)
				}
			})
		}
		wg.Wait()

		spent := c.Stats().Budget.SpentToday
		t.Logf("spent %s of %s with %d callers", spent, budget, callers)
		assert.LessOrEqual(t, spent, budget+perCall, "at most one call's worth above the budget")
		assert.GreaterOrEqual(t, spent, budget-perCall, "the budget is spent, not left unused")
		assert.Equal(t, int(spent/perCall), srv.Hits(dearModel, geminitest.VerbGenerate))
	})
}
