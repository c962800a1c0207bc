package redisstore_test

import (
	"fmt"
	"testing"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/internal/sharedtest"
	"github.com/geminiguard/geminiguard/redisstore"
)

// TestVectorConformance holds the Store to fleet.VectorStore's contract,
// the suite NewMemoryState passes too.
func TestVectorConformance(t *testing.T) {
	rdb := client(t, redisserver.Start(t))
	n := 0
	sharedtest.RunVectors(t, func(*testing.T) fleet.VectorStore {
		n++
		return redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprint("vectors", n)))
	})
}
