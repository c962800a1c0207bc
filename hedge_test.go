package geminiguard_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// Issue 19: brownouts the project never rehearsed. Start-up brownouts and
// hedged requests.

func TestStartupBrownoutKeepsThePrimaryInRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// From the Client's start the primary fails its first six requests
		// in a row (a bad spell), then answers two requests in three.
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 500 * time.Millisecond,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if i < 6 || i%3 == 0 {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 500 * time.Millisecond})
		changes := &stateChanges{}
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()),
			geminiguard.WithJitterSource(seeded()))

		const calls = 60
		answered := askEvery(t, c, calls, 250*time.Millisecond, pro) // 15s, half the default OpenFor

		assert.Empty(t, changes.get(), "the primary answers most of its requests: its breaker stays closed")
		assert.GreaterOrEqual(t, answered, calls/2, "the bad spell over, the primary answers its share (got %d of %d)", answered, calls)
	})
}
