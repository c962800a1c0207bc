package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/internal/sharedtest"
	"github.com/geminiguard/geminiguard/redisstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// client returns a client of srv, closed by t's cleanup.
func client(t *testing.T, srv *redisserver.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

func TestConformance(t *testing.T) {
	rdb := client(t, redisserver.Start(t))
	n := 0
	sharedtest.Run(t, func(*testing.T) fleet.SharedState {
		n++
		return redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprint("conformance", n)))
	})
}

// TestConformanceCluster runs the suite on a one-node Redis Cluster, which
// refuses a script whose keys span slots (CROSSSLOT): every key of a
// project shares its hash tag.
func TestConformanceCluster(t *testing.T) {
	srv := redisserver.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	node := client(t, srv)
	require.NoError(t, node.ClusterAddSlotsRange(ctx, 0, 16383).Err())
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(10 * time.Second); ; {
		info, err := node.ClusterInfo(ctx).Result()
		require.NoError(t, err)
		if strings.Contains(info, "cluster_state:ok") {
			break
		}
		require.True(t, time.Now().Before(deadline), "cluster not ok after 10 s: %s", info)
		<-tick.C
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr()}, MaxRedirects: 1})
	t.Cleanup(func() { rdb.Close() })
	n := 0
	sharedtest.Run(t, func(*testing.T) fleet.SharedState {
		n++
		return redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprint("cluster", n)))
	})
}

// TestEveryKeyExpires: nothing the store writes lives forever, and every
// key of a project shares its hash tag.
func TestEveryKeyExpires(t *testing.T) {
	rdb := client(t, redisserver.Start(t))
	ctx := context.Background()
	s := redisstore.New(rdb)
	now := time.Now()
	_, err := s.Lease(ctx, fleet.LeaseRequest{
		Project: "p1", Replica: "a", ReplicaTTL: time.Minute, Model: "m",
		Requests: 1, Tokens: 10, Debt: 5, RPM: 10, TPM: 1000, RPD: 100, DayEnd: now.Add(time.Hour),
		Probe: time.Second, Endpoint: "generate", Failures: 1,
		Spent: 5, SpendDay: now.Add(time.Hour), SpendMonth: now.Add(time.Hour - time.Minute),
	})
	require.NoError(t, err)
	require.NoError(t, s.Publish(ctx, "p1", fleet.Fact{Kind: fleet.FactCoolDown, Model: "m", Until: now.Add(time.Hour)}))

	keys, err := rdb.Keys(ctx, "*").Result()
	require.NoError(t, err)
	dayEnd := now.Add(time.Hour).Unix()
	assert.ElementsMatch(t, []string{
		"geminiguard:{p1}:version",
		"geminiguard:{p1}:facts",
		"geminiguard:{p1}:replicas",
		"geminiguard:{p1}:m:m:win",
		fmt.Sprint("geminiguard:{p1}:m:m:rpd:", dayEnd),
		"geminiguard:{p1}:m:m:probe:generate",
		"geminiguard:{p1}:m:m:health",
		fmt.Sprint("geminiguard:{p1}:spend:d:", dayEnd),
		fmt.Sprint("geminiguard:{p1}:spend:m:", now.Add(time.Hour-time.Minute).Unix()),
	}, keys)
	for _, k := range keys {
		ttl, err := rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		assert.Positive(t, ttl, "TTL of %s", k)
		assert.LessOrEqual(t, ttl, 2*time.Hour, "TTL of %s", k)
	}
}

// TestRedisDown: with Redis gone the store returns an error promptly (the
// Client then carries on alone); once Redis is back it works again, on the
// empty state a restarted Redis without persistence has.
func TestRedisDown(t *testing.T) {
	srv := redisserver.Start(t)
	rdb := client(t, srv)
	s := redisstore.New(rdb)
	r := fleet.LeaseRequest{Project: "p1", Replica: "a", ReplicaTTL: time.Minute, Model: "m", Requests: 1, RPM: 1}
	ctx := context.Background()
	l, err := s.Lease(ctx, r)
	require.NoError(t, err)
	require.Equal(t, 1, l.Requests)

	srv.Kill()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Lease(short, r)
	require.Error(t, err)
	assert.Less(t, time.Since(start), time.Second, "an error comes promptly")
	require.Error(t, s.Publish(short, "p1", fleet.Fact{Kind: fleet.FactCoolDown, Until: time.Now().Add(time.Hour)}))

	srv.Restart()
	l, err = s.Lease(ctx, r)
	require.NoError(t, err, "the store works again once Redis is back (the script is loaded again)")
	assert.Equal(t, 1, l.Requests)
}

func TestEmptyProject(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	s := redisstore.New(rdb)
	_, err := s.Lease(context.Background(), fleet.LeaseRequest{Model: "m", Requests: 1})
	require.ErrorContains(t, err, "empty project")
	require.ErrorContains(t, s.Publish(context.Background(), "", fleet.Fact{Kind: fleet.FactCoolDown}), "empty project")
}
