package redisstore_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// gcraScript is go-redis/redis_rate's allowN (v10), the GCRA of a
// redis_rate.Limiter's Allow, copied so that the comparison needs no
// dependency: one key, the theoretical arrival time, on Redis's clock.
var gcraScript = redis.NewScript(`
local rate_limit_key = KEYS[1]
local burst = ARGV[1]
local rate = ARGV[2]
local period = ARGV[3]
local cost = tonumber(ARGV[4])

local emission_interval = period / rate
local increment = emission_interval * cost
local burst_offset = emission_interval * burst

local jan_1_2017 = 1483228800
local now = redis.call("TIME")
now = (now[1] - jan_1_2017) + (now[2] / 1000000)

local tat = redis.call("GET", rate_limit_key)
if not tat then
  tat = now
else
  tat = tonumber(tat)
end
tat = math.max(tat, now)

local new_tat = tat + increment
local allow_at = new_tat - burst_offset
local diff = now - allow_at
local remaining = diff / emission_interval

if remaining < 0 then
  local reset_after = tat - now
  local retry_after = diff * -1
  return {0, 0, tostring(retry_after), tostring(reset_after)}
end

local reset_after = new_tat - now
if reset_after > 0 then
  redis.call("SET", rate_limit_key, new_tat, "EX", math.ceil(reset_after))
end
return {cost, remaining, tostring(-1), tostring(reset_after)}
`)

// gcraResult is redis_rate.Result, as its Allow parses the script's answer.
type gcraResult struct {
	allowed, remaining     int
	retryAfter, resetAfter time.Duration
}

// gcraAllow is redis_rate's Limiter.Allow(ctx, key, PerMinute(rate)): one
// EVALSHA and the parse of its answer.
func gcraAllow(ctx context.Context, rdb redis.Scripter, key string, rate int) (gcraResult, error) {
	v, err := gcraScript.Run(ctx, rdb, []string{"rate:" + key}, rate, rate, 60, 1).Result()
	if err != nil {
		return gcraResult{}, err
	}
	values := v.([]any)
	retryAfter, err := strconv.ParseFloat(values[2].(string), 64)
	if err != nil {
		return gcraResult{}, err
	}
	resetAfter, err := strconv.ParseFloat(values[3].(string), 64)
	if err != nil {
		return gcraResult{}, err
	}
	return gcraResult{
		allowed:    int(values[0].(int64)),
		remaining:  int(values[1].(int64)),
		retryAfter: time.Duration(retryAfter * float64(time.Second)),
		resetAfter: time.Duration(resetAfter * float64(time.Second)),
	}, nil
}

// BenchmarkLeaseVsGCRA is one Lease of one request (RPM, TPM and RPD, the
// replica registered, the facts' version compared), the same carrying the
// next model's request as a Client of a cascade sends it (granted by the
// first: Next's report only), against one redis_rate-style GCRA Allow (one
// limit), on the same loopback
// redis-server. It reports each round trip's median and p99, the
// server's time per script run (server-µs), and allocations; -count runs each arm's rounds back to back, so run it in a
// loop to interleave them:
//
//	for i in 1 2 3; do go test -run '^$' -bench LeaseVsGCRA -benchtime 10000x -benchmem ./redisstore/; done
func BenchmarkLeaseVsGCRA(b *testing.B) {
	srv := redisserver.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store := redisstore.New(rdb, redisstore.WithPrefix(b.Name()))
	ctx := context.Background()
	day := time.Now().Add(24 * time.Hour).Truncate(time.Hour)
	const limit = 1 << 40 // never refuses: the benchmark is of the round trip
	for _, arm := range []struct {
		name string
		call func() error
	}{
		{"lease", func() error {
			_, err := store.Lease(ctx, fleet.LeaseRequest{
				Project: "bench", Replica: "r1", ReplicaTTL: time.Minute, Model: "gemini-2.5-flash",
				Requests: 1, Tokens: 10, RPM: limit, TPM: limit, RPD: limit, DayEnd: day,
			})
			return err
		}},
		{"lease+next", func() error { // as a Client of a cascade asks: the next model's request carried
			_, err := store.Lease(ctx, fleet.LeaseRequest{
				Project: "bench", Replica: "r1", ReplicaTTL: time.Minute, Model: "gemini-2.5-flash",
				Requests: 1, Tokens: 10, RPM: limit, TPM: limit, RPD: limit, DayEnd: day,
				Next: &fleet.LeaseRequest{Model: "gemini-2.5-flash-lite", Requests: 1, Tokens: 10, RPM: limit, TPM: limit, RPD: limit, DayEnd: day},
			})
			return err
		}},
		{"gcra", func() error {
			r, err := gcraAllow(ctx, rdb, "bench:gemini-2.5-flash", 1<<30)
			if err == nil && r.allowed != 1 {
				err = fmt.Errorf("gcra refused: %+v", r)
			}
			return err
		}},
	} {
		b.Run(arm.name, func(b *testing.B) {
			if err := arm.call(); err != nil { // the script loaded
				b.Fatal(err)
			}
			took := make([]time.Duration, 0, b.N)
			if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				if err := arm.call(); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(scriptMicros(b, ctx, rdb), "server-µs")
		})
	}
}

// scriptMicros returns the server's mean time per script run (EVALSHA)
// since its statistics were reset: the part of a round trip the client's
// scheduling does not blur on a busy machine.
func scriptMicros(b *testing.B, ctx context.Context, rdb *redis.Client) float64 {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for field := range strings.SplitSeq(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(field, "usec_per_call="); ok {
					us, err := strconv.ParseFloat(v, 64)
					if err != nil {
						b.Fatal(err)
					}
					return us
				}
			}
		}
	}
	b.Fatalf("no EVALSHA in the server's statistics: %s", info)
	return 0
}
