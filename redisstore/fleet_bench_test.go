package redisstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// BenchmarkFleetCall is what fleet mode adds to a call at a steady load: a
// Client on the fake (in memory, answering at once) with a limited model,
// calling back to back, on its own, sharing a NewMemoryState, and sharing a
// redisstore on a loopback redis-server. It reports each arm's median and
// p99 call time and the round trips to the store per call:
//
//	go test -run '^$' -bench FleetCall -benchtime 20000x -count 6 ./redisstore/
func BenchmarkFleetCall(b *testing.B) {
	redisSrv := redisserver.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	for _, arm := range []struct {
		name  string
		store fleet.SharedState
	}{
		{"alone", nil},
		{"memory", fleet.NewMemoryState()},
		{"redis", redisstore.New(rdb, redisstore.WithPrefix(b.Name()))},
	} {
		b.Run(arm.name, func(b *testing.B) {
			const model = "gemini-2.5-flash"
			srv := geminitest.New(geminitest.Model{Name: model})
			opts := []geminiguard.Option{
				geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
				geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithStartupCheck(false),
				geminiguard.WithCascade(model), geminiguard.WithLimits(model, geminiguard.Limits{RPM: 10_000_000}),
			}
			if arm.store != nil {
				opts = append(opts, geminiguard.WithSharedState(arm.store))
			}
			c, err := geminiguard.New(context.Background(), opts...)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx, contents := context.Background(), genai.Text("Say hi")
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if _, err := c.GenerateContent(ctx, "", contents, nil); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(c.Stats().Fleet.RoundTrips)/float64(b.N), "roundtrips/call")
		})
	}
}
