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
		// For 20s the primary answers one request in twenty (it is throttled),
		// then every request; from 20s to 30s the secondary fails every
		// request. The throttle still remembers the primary's bad spell
		// when the secondary goes down.
		start := time.Now()
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 500 * time.Millisecond,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if time.Since(start) < 20*time.Second && i%20 != 0 {
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

		var throttled, lost int
		for time.Since(start) < 30*time.Second {
			_, rec, err := ask(t.Context(), c, "")
			if time.Since(start) >= 20*time.Second {
				for _, a := range rec.Attempts {
					if a.Skipped && errors.Is(a.Err, geminiguard.ErrCircuitOpen) && a.Model == pro {
						throttled++
					}
				}
				if err != nil {
					lost++
				}
			}
			time.Sleep(100 * time.Millisecond)
		}

		require.Positive(t, throttled, "the primary was throttled while the secondary was down")
		assert.Zero(t, lost, "a throttled model that answers is tried again before a call fails")
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
