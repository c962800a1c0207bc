package geminiguard_test

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// warmRequests returns n distinct requests.
func warmRequests(n int) []geminiguard.WarmRequest {
	reqs := make([]geminiguard.WarmRequest, n)
	for i := range reqs {
		reqs[i] = geminiguard.WarmRequest{Contents: genai.Text(fmt.Sprintf("Question %d", i))}
	}
	return reqs
}

// bulkheadStats returns the Stats of the bulkhead named name.
func bulkheadStats(c *geminiguard.Client, name string) geminiguard.BulkheadStats {
	for _, b := range c.Stats().Bulkheads {
		if b.Name == name {
			return b
		}
	}
	return geminiguard.BulkheadStats{}
}

func TestWarmStopsAtTheBudgetAndLeavesInteractiveCapacityAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		step := budgetStep
		step.Latency = time.Second
		start := time.Now()
		srv := geminitest.New(always(dearModel, step))
		cache := geminiguard.NewAnswerCache(2048, time.Hour)
		c := newClient(t, srv, nil, geminiguard.WithCascade(dearModel),
			geminiguard.WithPrices(dearModel, geminiguard.Price{Input: 1 * geminiguard.Dollar, Output: 10 * geminiguard.Dollar}),
			geminiguard.WithBudget(geminiguard.Budget{PerDay: 10 * 2000}), // ten calls
			geminiguard.WithBulkhead("default", geminiguard.Bulkhead{MaxConcurrent: 1}),
			geminiguard.WithBulkhead("warm", geminiguard.Bulkhead{MaxConcurrent: 1}),
			geminiguard.WithAnswerCache(cache), geminiguard.WithFallback(geminiguard.TextFallback("Busy.")))

		type result struct {
			n   int
			err error
		}
		done := make(chan result, 1)
		go func() {
			n, err := c.Warm(t.Context(), warmRequests(1000), geminiguard.WarmConfig{Bulkhead: "warm", Every: 2 * time.Second})
			done <- result{n, err}
		}()
		time.Sleep(500 * time.Millisecond) // the warm-up's first request is in flight
		assert.Equal(t, 1, bulkheadStats(c, "warm").InFlight)
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err, "the interactive call takes its own bulkhead's slot, free")
		assert.Equal(t, dearModel, rec.Model)

		r := <-done
		require.ErrorIs(t, r.err, geminiguard.ErrBudgetExhausted)
		assert.Equal(t, 9, r.n, "nine warm answers and the interactive one spend the day's budget")
		assert.Equal(t, 10, srv.Total(dearModel), "the rest of the 1000 requests never left")
		assert.Equal(t, int64(1), bulkheadStats(c, "default").Admitted, "the interactive call alone took the interactive bulkhead")
		assert.Equal(t, int64(10), bulkheadStats(c, "warm").Admitted, "nine answered, one refused by the budget")
		assert.Zero(t, bulkheadStats(c, "default").Rejected)
		assert.Equal(t, 9*2*time.Second, time.Since(start), "paced at one request every 2 s: the tenth, refused, at 18 s")

		resp, rec, err := send(t.Context(), c, "Question 3")
		require.NoError(t, err)
		assert.Equal(t, answer400, resp.Text(), "the warmed answer")
		assert.Equal(t, geminiguard.CacheExact, rec.Cache.Kind)
	})
}

func TestWarmOwnBudgetAndSkipsWhatTheCacheHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, srv := budgetClient(t, geminiguard.Budget{PerDay: 1000 * geminiguard.Dollar}, geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(16, time.Hour)))
		n, err := c.Warm(t.Context(), warmRequests(2), geminiguard.WarmConfig{})
		require.NoError(t, err)
		assert.Equal(t, 2, n)

		n, err = c.Warm(t.Context(), warmRequests(1000), geminiguard.WarmConfig{Budget: 5000})
		require.ErrorIs(t, err, geminiguard.ErrBudgetExhausted, "the warm-up's own budget")
		assert.Equal(t, 3, n, "three calls of 2000 reach 5000; the two held already are skipped")
		assert.Equal(t, 5, srv.Total(dearModel))

		_, err = newClient(t, srv, nil, geminiguard.WithCascade(dearModel)).Warm(t.Context(), warmRequests(1), geminiguard.WarmConfig{})
		require.ErrorContains(t, err, "no answer cache")
	})
}

func TestFrequentRequestsAreWhatTheCacheWasAskedMost(t *testing.T) {
	caches := map[string]func() geminiguard.AnswerCache{
		"exact": func() geminiguard.AnswerCache { return geminiguard.NewAnswerCache(16, time.Hour) },
		"semantic": func() geminiguard.AnswerCache {
			return geminiguard.NewSemanticCache(geminiguard.SemanticCacheConfig{Size: 16, TTL: time.Hour})
		},
	}
	for name, newCache := range caches {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(always(dearModel, budgetStep))
				cache := newCache()
				c := newClient(t, srv, nil, geminiguard.WithCascade(dearModel), geminiguard.WithAnswerCache(cache))
				for q, times := range map[string]int{"Question A": 5, "Question B": 3, "Question C": 1} {
					for range times {
						_, _, err := send(t.Context(), c, q)
						require.NoError(t, err)
					}
				}
				time.Sleep(3 * 24 * time.Hour)
				for range 2 {
					_, _, err := send(t.Context(), c, "Question D")
					require.NoError(t, err)
				}
				texts := func(reqs []geminiguard.WarmRequest) []string {
					var out []string
					for _, r := range reqs {
						out = append(out, r.Contents[0].Parts[0].Text)
					}
					return out
				}
				assert.Equal(t, []string{"Question A", "Question B", "Question D"}, texts(geminiguard.FrequentRequests(cache, 3, 7)), "the last 7 days, most frequent first")
				assert.Equal(t, []string{"Question D"}, texts(geminiguard.FrequentRequests(cache, 3, 1)), "today's")

				time.Sleep(2 * time.Hour) // the answers expired
				warmed := srv.Total(dearModel)
				n, err := c.Warm(t.Context(), geminiguard.FrequentRequests(cache, 2, 7), geminiguard.WarmConfig{})
				require.NoError(t, err)
				assert.Equal(t, 2, n)
				assert.Equal(t, 2, srv.Total(dearModel)-warmed)
				assert.Equal(t, []string{"Question A", "Question B", "Question D"}, texts(geminiguard.FrequentRequests(cache, 3, 7)), "the warm-up's own requests are not counted")
			})
		})
	}
	assert.Nil(t, geminiguard.FrequentRequests(nil, 3, 7))
}
