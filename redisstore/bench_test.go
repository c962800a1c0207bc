package redisstore_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// commandCounter counts the commands a client sends: each is one round
// trip (the store pipelines nothing).
type commandCounter struct{ n atomic.Int64 }

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// BenchmarkLease measures one Lease on a loopback redis-server as a Client
// calls it on its hot path (all limits on, a heartbeat, facts unchanged):
// its latency (ns/op, p50-ns, p99-ns) and round trips per Lease.
func BenchmarkLease(b *testing.B) {
	srv := redisserver.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	b.Cleanup(func() { rdb.Close() })
	counter := &commandCounter{}
	rdb.AddHook(counter)
	s := redisstore.New(rdb)
	ctx := context.Background()
	r := fleet.LeaseRequest{
		Project: "bench", Replica: "a", ReplicaTTL: 10 * time.Second, Model: "gemini-3.5-flash",
		Requests: 1, Tokens: 100, RPM: 1 << 30, TPM: 1 << 40, RPD: 1 << 30, DayEnd: time.Now().Add(time.Hour).Truncate(time.Second),
	}
	if _, err := s.Lease(ctx, r); err != nil { // loads the script
		b.Fatal(err)
	}
	counter.n.Store(0)
	took := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		if _, err := s.Lease(ctx, r); err != nil {
			b.Fatal(err)
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(counter.n.Load())/float64(len(took)), "roundtrips/op")
	b.ReportMetric(float64(took[len(took)/2]), "p50-ns")
	b.ReportMetric(float64(took[len(took)*99/100]), "p99-ns")
}
