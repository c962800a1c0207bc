package fleet_test

import (
	"testing"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/sharedtest"
)

// TestMemoryStateJobs holds NewMemoryState to JobStore's contract, the
// suite redisstore passes too.
func TestMemoryStateJobs(t *testing.T) {
	sharedtest.RunJobs(t, func(*testing.T) fleet.JobStore { return fleet.NewMemoryState().(fleet.JobStore) })
}
