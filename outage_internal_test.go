package geminiguard

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestFailuresAtOneInstantAfterAQuietSpellAreNoOutage: a Client's models
// failed, one answered, and after 20s of quiet two failures come back at
// one instant (a burst's fast 503s, on two goroutines). They begin one new
// spell, 0s long: neither may read the new spell's latest failure with the
// spell before it's beginning, which made it an outage 22s long (the
// breaker opened for OpenFor: 1 run in about 16,000 of
// TestFleetBurstAfterAQuietSpellKeepsAModelThatAnswersMost).
func TestFailuresAtOneInstantAfterAQuietSpellAreNoOutage(t *testing.T) {
	c := &Client{}
	c.answers.Origin = time.Now()
	var outages int
	for i := range 50000 {
		base := c.answers.Origin.Add(time.Duration(i) * time.Minute)
		c.outage(base)
		c.outage(base.Add(time.Second))
		c.answers.Saw(base.Add(2 * time.Second))
		burst := base.Add(22 * time.Second)
		var wg sync.WaitGroup
		var mu sync.Mutex
		start := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				<-start
				if c.outage(burst) {
					mu.Lock()
					outages++
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
	}
	assert.Zero(t, outages, "failures at one instant after a quiet spell read as an outage")
}
