package fleet_test

import (
	"testing"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/sharedtest"
)

// TestMemoryStateVectors holds NewMemoryState to VectorStore's contract,
// the suite redisstore passes too.
func TestMemoryStateVectors(t *testing.T) {
	sharedtest.RunVectors(t, func(*testing.T) fleet.VectorStore { return fleet.NewMemoryState().(fleet.VectorStore) })
}
