package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// replayOnAnotherReplica runs the fleet-wide idempotency story on two
// replicas sharing store: replica B replays replica A's key and gets A's
// answer, sending nothing; B refuses the key for a different request.
func replayOnAnotherReplica(t *testing.T, srv *geminitest.Server, store fleet.SharedState) {
	t.Helper()
	clients := newFleet(t, srv, 2, store, geminiguard.WithCascade(flash), geminiguard.WithIdempotencyTTL(time.Hour))
	a, b := clients[0], clients[1]

	text, rec, _, err := askWith(keyed(t.Context(), "order-42"), a, "Say hi", nil)
	require.NoError(t, err)
	assert.Equal(t, srv.FullText(flash), text)
	assert.False(t, rec.Replayed)
	require.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))

	for range 2 { // from the store, then from B's own memory
		text, rec, _, err = askWith(keyed(t.Context(), "order-42"), b, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text, "A's answer")
		assert.True(t, rec.Replayed)
		assert.Equal(t, flash, rec.Model)
		assert.Empty(t, rec.Attempts)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "a key replayed on another replica sends nothing")
	}
	assert.Zero(t, b.Stats().Calls, "replays are not counted")

	_, _, _, err = askWith(keyed(t.Context(), "order-42"), b, "Say bye", nil)
	require.ErrorContains(t, err, "reused for a different request")
	assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
	fresh := newFleet(t, srv, 1, store, geminiguard.WithCascade(flash))[0]
	_, _, _, err = askWith(keyed(t.Context(), "order-42"), fresh, "Say bye", nil)
	require.ErrorContains(t, err, "reused for a different request", "refused by a replica that never saw the key")
	assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "a reused key sends nothing")

	_, _, _, err = askWith(keyed(t.Context(), "order-43"), b, "Say hi", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "another key is another call")
}

func TestIdempotencyReplayOnAnotherReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		replayOnAnotherReplica(t, geminitest.New(geminitest.Model{Name: flash}), fleet.NewMemoryState())
	})
}

func TestIdempotencyFleetAnswerExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		clients := newFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(flash), geminiguard.WithIdempotencyTTL(time.Minute))
		_, _, _, err := askWith(keyed(t.Context(), "k"), clients[0], "Say hi", nil)
		require.NoError(t, err)

		time.Sleep(time.Minute - time.Millisecond)
		_, rec, _, err := askWith(keyed(t.Context(), "k"), clients[1], "Say hi", nil)
		require.NoError(t, err)
		assert.True(t, rec.Replayed, "within the TTL")

		time.Sleep(time.Millisecond)
		_, rec, _, err = askWith(keyed(t.Context(), "k"), clients[1], "Say hi", nil)
		require.NoError(t, err)
		assert.False(t, rec.Replayed, "the TTL passed: asked again")
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

// brokenAnswers is a working SharedState whose answers fail.
type brokenAnswers struct {
	fleet.SharedState
}

func (brokenAnswers) StoreAnswer(context.Context, string, string, []byte, time.Duration) error {
	return errors.New("connection refused")
}

func (brokenAnswers) LoadAnswer(context.Context, string, string) ([]byte, error) {
	return nil, errors.New("connection refused")
}

// TestIdempotencyStoreDownKeepsKeysPerClient: a store that cannot keep
// answers fails no call; each replica keeps its keys itself.
func TestIdempotencyStoreDownKeepsKeysPerClient(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		clients := newFleet(t, srv, 2, brokenAnswers{fleet.NewMemoryState()}, geminiguard.WithCascade(flash))
		for i, c := range []*geminiguard.Client{clients[0], clients[1], clients[0]} {
			_, rec, took, err := askWith(keyed(t.Context(), "k"), c, "Say hi", nil)
			require.NoError(t, err)
			assert.Equal(t, i == 2, rec.Replayed, "call %d", i)
			assert.Less(t, took, time.Second, "call %d", i)
		}
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "one call per replica")
	})
}

// TestRedisIdempotencyReplayOnAnotherReplica: the same on a real
// redis-server; the key's answer lives under a digest of the key, for the
// hour of the TTL.
func TestRedisIdempotencyReplayOnAnotherReplica(t *testing.T) {
	rdb := redisClient(t, redisserver.Start(t))
	srv := geminitest.New(geminitest.Model{Name: flash})
	replayOnAnotherReplica(t, srv, redisstore.New(rdb, redisstore.WithPrefix(t.Name())))

	keys, err := rdb.Keys(t.Context(), t.Name()+":*:idem:*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 2, "order-42 and order-43")
	for _, k := range keys {
		assert.NotContains(t, k, "order-4", "the store holds a digest of the key, never the key")
		assert.False(t, strings.Contains(k, geminitest.Key))
		ttl, err := rdb.PTTL(t.Context(), k).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 59*time.Minute)
		assert.LessOrEqual(t, ttl, time.Hour)
	}
}
