package redisstore_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// TestRedisFleetBudgetHoldsAcrossReplicas: five replicas sharing a daily
// budget of 20,000 micro-dollars (ten calls of 2,000) call as fast as the
// fake answers until the budget refuses them. Each call's estimated cost is
// reserved against the project's total at admission, in the same Redis
// script, and settled at its real cost after the answer, so the fleet
// spends at most the budget plus one call's estimate per replica in flight
// — not each replica the budget before it hears of the others' spend.
func TestRedisFleetBudgetHoldsAcrossReplicas(t *testing.T) {
	const (
		replicas = 5
		budget   = 20_000 // micro-dollars
		perCall  = 2_000  // 1000 prompt tokens at $1/M, 100 output tokens at $10/M
	)
	rdb := redisClient(t, redisserver.Start(t))
	step := geminitest.Step{Text: strings.Repeat("abcd", 100), PromptTokens: 1000} // 100 output tokens to the fake
	srv := geminitest.New(geminitest.Model{Name: pro, Decide: func(geminitest.Request, int) geminitest.Step { return step }})
	clients := newFleet(t, srv, replicas, redisstore.New(rdb, redisstore.WithPrefix(t.Name())),
		geminiguard.WithCascade(pro),
		geminiguard.WithPrices(pro, geminiguard.Price{Input: 1 * geminiguard.Dollar, Output: 10 * geminiguard.Dollar}),
		geminiguard.WithBudget(geminiguard.Budget{PerDay: budget, SteerAt: 1}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var other []error
	for _, c := range clients {
		wg.Go(func() {
			for range 100 {
				_, _, err := ask(t.Context(), c, "")
				if errors.Is(err, geminiguard.ErrBudgetExhausted) {
					return
				}
				if err != nil {
					mu.Lock()
					other = append(other, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	require.Empty(t, other, "every call answered or was refused by the budget")
	answered := srv.Hits(pro, geminitest.VerbGenerate)
	t.Logf("%d replicas spent %d micro-dollars (%d calls) of a budget of %d: %.2f× the budget",
		replicas, answered*perCall, answered, budget, float64(answered*perCall)/budget)
	assert.GreaterOrEqual(t, answered*perCall, budget-perCall, "the fleet spends its budget")
	assert.LessOrEqual(t, answered*perCall, budget+replicas*perCall, "at most one call's estimate per replica past the budget")
}
