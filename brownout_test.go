package geminiguard_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// The brownout family (issue 19): decisions that hold across brownouts
// drawn at random, pinned here one at a time.

func TestThrottledModelAnswersWhenTheOthersFailTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// For 20s the primary answers one request in ten, often enough
		// that its breaker stays closed and rarely enough that the
		// throttle keeps most calls from it; then it answers every request.
		// From 20s to 30s the secondary fails every request. The throttle
		// still remembers the primary's bad spell when the secondary goes
		// down: a call it kept from the primary meets the secondary's
		// failure, and comes back to the primary. (With one user, the
		// primary answered too rarely to keep its breaker closed: the
		// throttle was met only by a call that happened to end a moment
		// after 20s, and a change of the breaker's open periods lost it.)
		start := time.Now()
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 500 * time.Millisecond,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if time.Since(start) < 20*time.Second && i%10 != 0 {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 500 * time.Millisecond,
			Decide: func(geminitest.Request, int) geminitest.Step {
				if at := time.Since(start); at >= 20*time.Second && at < 30*time.Second {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{}
			}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()))

		var mu sync.Mutex
		var throttled, lost, answeredByPro int
		var users sync.WaitGroup
		for range 4 {
			users.Go(func() {
				for time.Since(start) < 30*time.Second {
					sent := time.Since(start)
					_, rec, err := ask(t.Context(), c, "")
					if sent < 20*time.Second {
						time.Sleep(100 * time.Millisecond)
						continue
					}
					mu.Lock()
					for _, a := range rec.Attempts {
						if a.Skipped && errors.Is(a.Err, geminiguard.ErrCircuitOpen) && a.Model == pro {
							throttled++
							if err == nil && rec.Model == pro {
								answeredByPro++
							}
						}
					}
					if err != nil {
						lost++
					}
					mu.Unlock()
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
		users.Wait()

		require.Positive(t, throttled, "the primary was throttled while the secondary was down")
		assert.Zero(t, lost, "a throttled model that answers is tried again before a call fails")
		assert.Equal(t, throttled, answeredByPro, "each call that skipped the primary was answered by it in its next round")
	})
}

func TestIdleClientIsNotInAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The primary fails one request in four at once (a fast 503) and
		// answers the others in 1s. Twenty users call at once, every 5s:
		// between two waves nothing is asked and so nothing answers, and
		// each wave's failures come back before its answers.
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if i%4 == 3 {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: time.Second})
		changes := &stateChanges{}
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()),
			geminiguard.WithJitterSource(seeded()))
		_, _, err := ask(t.Context(), c, "") // the primary has answered
		require.NoError(t, err)

		const waves, users = 8, 20
		var primary atomic.Int64
		for range waves {
			time.Sleep(5 * time.Second)
			var wg sync.WaitGroup
			for range users {
				wg.Go(func() {
					_, rec, err := ask(t.Context(), c, "")
					assert.NoError(t, err)
					if rec.Model == pro {
						primary.Add(1)
					}
				})
			}
			wg.Wait()
		}

		assert.NotContains(t, changes.get(), pro+":open", "a quiet Client is idle, not in an outage: the primary answers three requests in four")
		assert.GreaterOrEqual(t, primary.Load(), int64(0.7*waves*users), "the primary keeps its share of the answers")
	})
}
