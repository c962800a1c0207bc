package fleet_test

import (
	"testing"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/sharedtest"
)

// TestMemoryStateConformance holds NewMemoryState to SharedState's
// contract, the suite redisstore passes too.
func TestMemoryStateConformance(t *testing.T) {
	sharedtest.Run(t, func(*testing.T) fleet.SharedState { return fleet.NewMemoryState() })
}
