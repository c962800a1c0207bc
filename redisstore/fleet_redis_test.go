package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// Fleet mode on a real redis-server, which runs in real time: these tests
// never wait on a timer; each one's figures are counts, not durations.

// redisClient returns a go-redis client of srv as a user would configure
// one for fleet mode, closed by t's cleanup.
func redisClient(t *testing.T, srv *redisserver.Server) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// callAll sends calls calls at once, spread over the fleet, and returns
// how many failed.
func callAll(t *testing.T, clients []*geminiguard.Client, calls int) int {
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for i := range calls {
		c := clients[i%len(clients)]
		wg.Go(func() {
			if _, _, err := ask(t.Context(), c, ""); err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// TestRedisFleetSharesTheProjectQuota: 5 replicas, each given the project's
// RPM (30), get a burst of 60 calls. On their own they send the primary
// more than its quota and collect server 429s; sharing Redis, they send it
// the quota at the headroom (24) and get none.
func TestRedisFleetSharesTheProjectQuota(t *testing.T) {
	rdb := redisClient(t, redisserver.Start(t))
	for _, shared := range []bool{false, true} {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Quota: geminitest.Quota{RPM: 30}},
			geminitest.Model{Name: flash},
		)
		var store fleet.SharedState
		if shared {
			store = redisstore.New(rdb, redisstore.WithPrefix(t.Name()))
		}
		clients := newFleet(t, srv, 5, store, geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 30}))
		failed := callAll(t, clients, 60)
		upstream429 := rateLimited(clients, pro)
		proAnswers := srv.Hits(pro, geminitest.VerbGenerate) - int(upstream429)
		t.Logf("shared=%v: %d server 429s, %d failed, the primary answered %d of 60", shared, upstream429, failed, proAnswers)
		assert.Zero(t, failed)
		if !shared {
			assert.Positive(t, upstream429, "replicas on their own overshoot the quota")
			continue
		}
		assert.Zero(t, upstream429)
		// A replica's lease in a burst may hold a request or two no call
		// of its own needed by the time it came back.
		assert.GreaterOrEqual(t, proAnswers, 21, "the primary serves its quota at the headroom")
		assert.LessOrEqual(t, proAnswers, 24)
		assert.True(t, clients[0].Stats().Fleet.Connected)
	}
}

// TestRedisFleetDailyQuotaAndOpenBreakerHoldForAll: a daily-quota 429 seen
// by one replica keeps the model out for all (one request from the fleet),
// and so does a breaker one replica opened.
func TestRedisFleetDailyQuotaAndOpenBreakerHoldForAll(t *testing.T) {
	rdb := redisClient(t, redisserver.Start(t))
	srv := geminitest.New(
		geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.DailyQuota}}},
		geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}},
		geminitest.Model{Name: lite},
	)
	clients := newFleet(t, srv, 5, redisstore.New(rdb, redisstore.WithPrefix(t.Name())),
		geminiguard.WithCascade(pro, flash, lite),
		geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 1000}), geminiguard.WithLimits(flash, geminiguard.Limits{RPM: 1000}),
		geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 3, OpenFor: time.Hour, DeadAfter: -1}),
		geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
	for i := range 3 { // replica 0: pro's daily quota, then flash's 3 failures open its breaker
		_, rec, err := ask(t.Context(), clients[0], "")
		require.NoError(t, err, "call %d", i)
		assert.Equal(t, lite, rec.Model)
	}
	require.Equal(t, geminiguard.StateOpen, clients[0].Stats().Models[1].State)
	for i, c := range clients[1:] {
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, lite, rec.Model, "replica %d", i+1)
		st := c.Stats().Models
		assert.False(t, st[0].CoolDownUntil.IsZero(), "replica %d cools the primary down", i+1)
		assert.Equal(t, geminiguard.StateOpen, st[1].State, "replica %d", i+1)
	}
	assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbGenerate), "requests to the exhausted primary")
	assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate), "requests to the dead secondary")
}

// TestRedisFleetRidesOutRedisKilledAndRestarted: with Redis killed mid-run
// every call is still answered, each replica on its share of the limit;
// once Redis is back, the replicas rejoin and share again.
func TestRedisFleetRidesOutRedisKilledAndRestarted(t *testing.T) {
	redisSrv := redisserver.Start(t)
	rdb := redisClient(t, redisSrv)
	srv := geminitest.New(
		geminitest.Model{Name: pro},
		geminitest.Model{Name: flash},
	)
	store := &projectSpy{Store: redisstore.New(rdb, redisstore.WithPrefix(t.Name()), redisstore.WithAloneFor(50*time.Millisecond))}
	clients := newFleet(t, srv, 3, store,
		geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 300}))
	for range 2 { // every replica registers, then hears of the others
		for _, c := range clients {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
		}
	}
	require.Equal(t, 3, clients[0].Stats().Fleet.Replicas)

	redisSrv.Kill()
	require.Zero(t, callAll(t, clients, 30), "calls fail while Redis is down")
	var uncoordinated int64
	for _, c := range clients {
		st := c.Stats().Fleet
		assert.False(t, st.Connected)
		uncoordinated += st.Uncoordinated
	}
	assert.Positive(t, uncoordinated, "requests sent on the replicas' own shares while Redis was down")

	redisSrv.Restart()
	for _, c := range clients { // each replica rejoins on a call once its store breaker lets it try
		deadline := time.Now().Add(10 * time.Second)
		for !c.Stats().Fleet.Connected && time.Now().Before(deadline) {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
		}
		require.True(t, c.Stats().Fleet.Connected, "rejoined")
	}
	// go-redis re-subscribes a moment after Redis is back: until every
	// replica hears a canary fact, what is published may be heard only at
	// the next round trip.
	canary := redisstore.New(rdb, redisstore.WithPrefix(t.Name()))
	require.Eventually(t, func() bool {
		now := time.Now()
		_ = canary.Publish(t.Context(), store.Project(), fleet.Fact{Kind: fleet.FactCoolDown, Model: "canary", At: now, Until: now.Add(time.Hour)})
		for _, c := range clients {
			if !slices.ContainsFunc(c.Stats().Models, func(m geminiguard.ModelStats) bool { return m.Model == "canary" }) {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "every replica hears from Redis again")

	srv.Script(pro, geminitest.Step{Fault: geminitest.DailyQuota})
	before := srv.Hits(pro, geminitest.VerbGenerate)
	_, rec, err := ask(t.Context(), clients[0], "")
	require.NoError(t, err)
	assert.Equal(t, flash, rec.Model)
	// The others hear of it from Redis at once, holding leased requests
	// or not; over a socket "at once" is not "before the next statement".
	require.Eventually(t, func() bool {
		for _, c := range clients {
			if c.Stats().Models[0].CoolDownUntil.IsZero() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "every replica cools the primary down")
	for _, c := range clients[1:] {
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
	}
	assert.Equal(t, before+1, srv.Hits(pro, geminitest.VerbGenerate), "sharing resumed: one request to the exhausted primary")
}

// TestRedisFleetPausedRedisDelaysOneCall: with Redis paused (CLIENT PAUSE),
// three calls wait for the store's bound (doubled after each timeout); the
// calls after them do not ask the store until its breaker lets them try
// again. So also with a go-redis
// client left without ContextTimeoutEnabled, which on its own would hold
// the call for the whole pause.
func TestRedisFleetPausedRedisDelaysOneCall(t *testing.T) {
	for _, ctxTimeouts := range []bool{true, false} {
		t.Run(fmt.Sprint("ContextTimeoutEnabled=", ctxTimeouts), func(t *testing.T) {
			testPausedRedis(t, ctxTimeouts)
		})
	}
}

func testPausedRedis(t *testing.T, ctxTimeouts bool) {
	redisSrv := redisserver.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: redisSrv.Addr(), ContextTimeoutEnabled: ctxTimeouts})
	defer rdb.Close()
	srv := geminitest.New(geminitest.Model{Name: pro})
	c := newFleet(t, srv, 1, redisstore.New(rdb, redisstore.WithPrefix(t.Name())),
		geminiguard.WithCascade(pro), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 1000}))[0]
	_, _, err := ask(t.Context(), c, "")
	require.NoError(t, err)

	admin := redis.NewClient(&redis.Options{Addr: redisSrv.Addr()})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "CLIENT", "PAUSE", "2000", "ALL").Err())
	defer admin.Do(context.Background(), "CLIENT", "UNPAUSE") // the command left in flight then ends
	before := c.Stats().Fleet
	var took []time.Duration
	for range 5 {
		start := time.Now()
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		took = append(took, time.Since(start).Round(time.Millisecond))
	}
	after := c.Stats().Fleet
	t.Logf("calls with Redis paused took %v", took)
	assert.Equal(t, before.RoundTrips+3, after.RoundTrips, "three calls asked the paused store")
	assert.Equal(t, before.Failures+3, after.Failures, "and timed out")
	assert.Equal(t, before.Uncoordinated+5, after.Uncoordinated)
}

// TestRedisFleetColdStartWithRedisStopped: ten replicas start together
// while their Redis is stopped (SIGSTOP) for its first 200 ms, each with a
// connection of its own, and each sends its share of a burst of 60 calls at
// once: none gets a server 429, and the primary serves no more than its
// quota at the headroom (24 of RPM 30). A replica that has not seen the
// fleet takes a small share of each limit, never the whole.
func TestRedisFleetColdStartWithRedisStopped(t *testing.T) {
	redisSrv := redisserver.Start(t)
	srv := geminitest.New(
		geminitest.Model{Name: pro, Quota: geminitest.Quota{RPM: 30}},
		geminitest.Model{Name: flash},
	)
	const replicas, calls = 10, 60
	redisSrv.Pause()
	resumed := time.AfterFunc(200*time.Millisecond, redisSrv.Resume)
	defer resumed.Stop()
	defer redisSrv.Resume()

	clients := make([]*geminiguard.Client, replicas)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var errs []error
	for i := range clients {
		wg.Go(func() {
			store := redisstore.New(redisClient(t, redisSrv), redisstore.WithPrefix(t.Name()))
			c, err := geminiguard.New(t.Context(),
				geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
				geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithStartupCheck(false),
				geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 30}),
				geminiguard.WithSharedState(store))
			mu.Lock()
			clients[i] = c
			errs = append(errs, err)
			mu.Unlock()
			if err != nil {
				return
			}
			var cw sync.WaitGroup
			for range calls / replicas {
				cw.Go(func() {
					if _, _, err := ask(t.Context(), c, ""); err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
					}
				})
			}
			cw.Wait()
		})
	}
	wg.Wait()
	for _, c := range clients {
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
	}
	require.NoError(t, errors.Join(errs...))
	upstream429 := rateLimited(clients, pro)
	proAnswers := srv.Hits(pro, geminitest.VerbGenerate) - int(upstream429)
	var uncoordinated int64
	for _, c := range clients {
		uncoordinated += c.Stats().Fleet.Uncoordinated
	}
	t.Logf("%d server 429s, %d failed, the primary answered %d of %d, %d uncoordinated", upstream429, failed, proAnswers, calls, uncoordinated)
	assert.Zero(t, failed)
	assert.Zero(t, upstream429, "server 429s")
	// What the fleet granted stays within the quota at the headroom; a
	// replica that lost the store under load adds its own small share,
	// which the headroom absorbs.
	assert.LessOrEqual(t, proAnswers-int(uncoordinated), 24, "the primary within its quota at the headroom")
	assert.LessOrEqual(t, proAnswers, 30, "the primary within its quota")
}

// TestRedisFleetNilStoresRefused: New refuses a nil store of any shape
// with an error (it used to panic at the first call).
func TestRedisFleetNilStoresRefused(t *testing.T) {
	var nilClient *redis.Client
	for name, store := range map[string]fleet.SharedState{
		"redisstore.New(nil)":         redisstore.New(nil),
		"redisstore.New(nil *Client)": redisstore.New(nilClient),
		"(*redisstore.Store)(nil)":    (*redisstore.Store)(nil),
	} {
		_, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithStartupCheck(false),
			geminiguard.WithSharedState(store))
		assert.ErrorContains(t, err, "geminiguard: WithSharedState", name)
	}
}

// TestRedisFleetNewDoesNotBlockOnAStoppedRedis: with Redis stopped
// (SIGSTOP), New returns after its warm-up bound (and subscribes in the
// background), calls are answered, and Close ends the subscription's
// goroutine (goleak, at the package's end).
func TestRedisFleetNewDoesNotBlockOnAStoppedRedis(t *testing.T) {
	redisSrv := redisserver.Start(t)
	srv := geminitest.New(geminitest.Model{Name: pro})
	redisSrv.Pause()
	defer redisSrv.Resume()
	start := time.Now()
	c := newClient(t, srv, geminiguard.WithStartupCheck(false), geminiguard.WithCascade(pro),
		geminiguard.WithSharedState(redisstore.New(redisClient(t, redisSrv), redisstore.WithWarmUp(200*time.Millisecond))))
	took := time.Since(start)
	_, _, err := ask(t.Context(), c, "")
	require.NoError(t, err)
	c.Close()
	t.Logf("New took %v with Redis stopped", took)
	assert.Less(t, took, time.Second, "New waits for its warm-up bound, not for Redis")
	assert.False(t, c.Stats().Fleet.Connected, "the replica starts alone")
}
