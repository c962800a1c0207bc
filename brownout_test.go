package geminiguard_test

import (
	"errors"
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
		// For 20s the primary answers one request in twelve (it is throttled),
		// then every request; from 20s to 30s the secondary fails every
		// request. The throttle still remembers the primary's bad spell
		// when the secondary goes down.
		start := time.Now()
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 500 * time.Millisecond,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if time.Since(start) < 20*time.Second && i%12 != 0 {
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
