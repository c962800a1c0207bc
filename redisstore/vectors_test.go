package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// TestVectorsOneRoundTrip: AddVector and Vectors are one command each once
// the server knows the scripts.
func TestVectorsOneRoundTrip(t *testing.T) {
	rdb := client(t, redisserver.Start(t))
	var counter commandCounter
	rdb.AddHook(&counter)
	s := redisstore.New(rdb, redisstore.WithPrefix(t.Name()))
	ctx := context.Background()
	e := fleet.VectorEntry{Key: "gemini-3.5-flash:ab", Vector: []float32{1, 0}, Answer: []byte(`{}`)}
	require.NoError(t, s.AddVector(ctx, "p", "gemini-3.5-flash:cd", e, time.Hour)) // loads the scripts
	_, mark, err := s.Vectors(ctx, "p", "gemini-3.5-flash:cd", "")
	require.NoError(t, err)

	before := counter.n.Load()
	require.NoError(t, s.AddVector(ctx, "p", "gemini-3.5-flash:cd", e, time.Hour))
	assert.Equal(t, int64(1), counter.n.Load()-before, "AddVector")
	before = counter.n.Load()
	got, _, err := s.Vectors(ctx, "p", "gemini-3.5-flash:cd", mark)
	require.NoError(t, err)
	assert.Len(t, got, 1)
	assert.Equal(t, int64(1), counter.n.Load()-before, "Vectors")
}
