package redisstore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// BenchmarkVectors measures, on a loopback redis-server, AddVector of one
// entry of 768 dimensions and a small answer, and Vectors reading a full
// page (fleet.VectorsPerRead such entries): what a replica's first lookup
// of a scope costs the fleet's bound.
func BenchmarkVectors(b *testing.B) {
	const dims = 768
	rdb := redis.NewClient(&redis.Options{Addr: redisserver.Start(b).Addr()})
	defer rdb.Close()
	s := redisstore.New(rdb, redisstore.WithPrefix(b.Name()))
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	entry := func(i int) fleet.VectorEntry {
		v := make([]float32, dims)
		for j := range v {
			v[j] = float32(rng.NormFloat64())
		}
		return fleet.VectorEntry{Key: fmt.Sprintf("gemini-3.5-flash:%064x", i), Vector: v, Answer: []byte(`{"candidates":[{"content":{"parts":[{"text":"Sunny, 24 degrees."}]}}]}`)}
	}
	b.Run("AddVector", func(b *testing.B) {
		e := entry(0)
		for b.Loop() {
			if err := s.AddVector(ctx, "p", "add", e, time.Hour); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("Vectors/page=%d", fleet.VectorsPerRead), func(b *testing.B) {
		for i := range fleet.VectorsPerRead {
			if err := s.AddVector(ctx, "p", "read", entry(i), time.Hour); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportAllocs()
		for b.Loop() {
			got, _, err := s.Vectors(ctx, "p", "read", "")
			if err != nil || len(got) != fleet.VectorsPerRead {
				b.Fatal(len(got), err)
			}
		}
	})
}
