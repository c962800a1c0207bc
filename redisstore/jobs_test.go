package redisstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/internal/sharedtest"
	"github.com/geminiguard/geminiguard/redisstore"
)

// TestJobConformance holds the Store to fleet.JobStore's contract, the
// suite NewMemoryState passes too.
func TestJobConformance(t *testing.T) {
	rdb := client(t, redisserver.Start(t))
	n := 0
	sharedtest.RunJobs(t, func(*testing.T) fleet.JobStore {
		n++
		return redisstore.New(rdb, redisstore.WithPrefix(fmt.Sprint("jobs", n)))
	})
}

// TestJobsOneRoundTrip: PutJob, Jobs and DropJob are one command each once
// the server knows the scripts.
func TestJobsOneRoundTrip(t *testing.T) {
	rdb := client(t, redisserver.Start(t))
	var counter commandCounter
	rdb.AddHook(&counter)
	s := redisstore.New(rdb, redisstore.WithPrefix(t.Name()))
	ctx := context.Background()
	for range 2 { // the first loads the scripts
		before := counter.n.Load()
		require.NoError(t, s.PutJob(ctx, "p", "batches/a", []byte(`{}`), time.Hour))
		put := counter.n.Load() - before
		before = counter.n.Load()
		got, err := s.Jobs(ctx, "p")
		require.NoError(t, err)
		assert.Len(t, got, 1)
		list := counter.n.Load() - before
		before = counter.n.Load()
		require.NoError(t, s.DropJob(ctx, "p", "batches/a"))
		drop := counter.n.Load() - before
		if put+list+drop == 3 {
			return
		}
	}
	t.Fatal("PutJob, Jobs and DropJob are not one command each once the scripts are loaded")
}

// batchRequests returns n small requests.
func batchRequests(n int) []*genai.InlinedRequest {
	reqs := make([]*genai.InlinedRequest, n)
	for i := range reqs {
		reqs[i] = &genai.InlinedRequest{Contents: genai.Text(fmt.Sprint("Say hi ", i))}
	}
	return reqs
}

// TestRedisFleetOpenBatchesResumedElsewhere: a Client creates a batch and
// stops without saving its handle; another process's Client of the
// project, on its own connection to Redis, lists the project's open
// batches, resumes the one there and reads it: every request answered
// once, no job created again, the batch no longer listed. A Client of
// another project sees none of it.
func TestRedisFleetOpenBatchesResumedElsewhere(t *testing.T) {
	redisSrv := redisserver.Start(t)
	srv := geminitest.New(geminitest.Model{Name: pro})
	srv.ScriptBatch(pro, geminitest.BatchScript{Queue: time.Nanosecond, Run: time.Nanosecond}) // ended by the first poll
	store := func() fleet.SharedState {
		return redisstore.New(redisClient(t, redisSrv), redisstore.WithPrefix(t.Name()))
	}
	const n = 5
	first := newFleet(t, srv, 1, store(), geminiguard.WithCascade(pro))[0]
	job, err := first.Batches().Create(t.Context(), "", batchRequests(n), nil)
	require.NoError(t, err)
	require.NoError(t, first.Close())

	other := newFleet(t, srv, 1, store(), geminiguard.WithCascade(pro), geminiguard.WithProject("another"))[0]
	open, err := other.Batches().Open(t.Context())
	require.NoError(t, err)
	assert.Empty(t, open, "another project's batches are not listed")

	second := newFleet(t, srv, 1, store(), geminiguard.WithCascade(pro))[0]
	open, err = second.Batches().Open(t.Context())
	require.NoError(t, err)
	require.Len(t, open, 1)
	assert.Equal(t, job.Name(), open[0].Name())
	done, err := second.Batches().Poll(t.Context(), open[0])
	require.NoError(t, err)
	require.True(t, done)
	for i, r := range open[0].Results() {
		require.NoError(t, r.Err, "request %d", i)
		assert.Equal(t, pro, r.Model)
	}
	assert.Equal(t, int64(n), second.Stats().Batch.Answered, "every request answered once")
	assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbBatchCreate))

	open, err = second.Batches().Open(t.Context())
	require.NoError(t, err)
	assert.Empty(t, open, "a finished batch is not listed")
}

// TestRedisFleetBatchWithRedisPaused: a frozen Redis fails neither Create
// nor Poll; Open says the store did not answer.
func TestRedisFleetBatchWithRedisPaused(t *testing.T) {
	redisSrv := redisserver.Start(t)
	srv := geminitest.New(geminitest.Model{Name: pro})
	srv.ScriptBatch(pro, geminitest.BatchScript{Queue: time.Nanosecond, Run: time.Nanosecond})
	c := newFleet(t, srv, 1, redisstore.New(redisClient(t, redisSrv), redisstore.WithPrefix(t.Name())), geminiguard.WithCascade(pro))[0]
	redisSrv.Pause()
	defer redisSrv.Resume()

	job, err := c.Batches().Create(t.Context(), "", batchRequests(3), nil)
	require.NoError(t, err)
	done, err := c.Batches().Poll(t.Context(), job)
	require.NoError(t, err)
	assert.True(t, done)
	_, err = c.Batches().Open(t.Context())
	require.ErrorContains(t, err, "geminiguard: Batches.Open")
}
