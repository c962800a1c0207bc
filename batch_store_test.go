package geminiguard_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestBatchOpenResumedByAnotherProcess: a Client creates a batch whose
// primary job fails halfway, sends the failed half to the secondary, and
// stops without saving a handle; another Client of the project, on the
// same store, lists the project's open batches, resumes the one there and
// waits: every request is answered once, no job is created again, and the
// finished batch is no longer listed.
func TestBatchOpenResumedByAnotherProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptBatch(pro, geminitest.BatchScript{End: geminitest.BatchFailed, FailAfter: 0.5})
		store := fleet.NewMemoryState()
		first := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro, flash))[0]
		job, err := first.Batches().Create(t.Context(), "", batchRequests(n), nil)
		require.NoError(t, err)
		for len(job.Jobs()) < 2 { // the primary's job failed; its failed half went to the secondary
			done, err := first.Batches().Poll(t.Context(), job)
			require.NoError(t, err)
			require.False(t, done)
			time.Sleep(time.Minute)
		}
		require.NoError(t, first.Close()) // no handle saved

		second := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro, flash))[0]
		open, err := second.Batches().Open(t.Context())
		require.NoError(t, err)
		require.Len(t, open, 1)
		assert.Equal(t, job.Jobs(), open[0].Jobs(), "the store knows the resubmission")
		results, err := second.Batches().Wait(t.Context(), open[0])
		require.NoError(t, err)
		require.Len(t, results, n)
		for i, r := range results {
			require.NoError(t, r.Err, "request %d", i)
			assert.Equal(t, batchPromptTokens(i), r.Response.UsageMetadata.PromptTokenCount, "request %d answered by its own response", i)
		}
		assert.Equal(t, int64(n), second.Stats().Batch.Answered, "every request answered once")
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbBatchCreate))
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbBatchCreate), "the failed half was not sent again")

		open, err = second.Batches().Open(t.Context())
		require.NoError(t, err)
		assert.Empty(t, open, "a finished batch is not listed")
	})
}

// TestBatchOpenPerProject: two projects on one store see their own open
// batches only, and a deleted batch is no longer listed.
func TestBatchOpenPerProject(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro})
		store := fleet.NewMemoryState()
		a := newFleet(t, srv, 2, store, geminiguard.WithCascade(pro), geminiguard.WithProject("project-a"))
		b := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro), geminiguard.WithProject("project-b"))[0]
		jobA, err := a[0].Batches().Create(t.Context(), "", batchRequests(3), nil)
		require.NoError(t, err)
		jobB, err := b.Batches().Create(t.Context(), "", batchRequests(2), nil)
		require.NoError(t, err)

		open, err := a[1].Batches().Open(t.Context())
		require.NoError(t, err)
		require.Len(t, open, 1)
		assert.Equal(t, jobA.Name(), open[0].Name())
		open, err = b.Batches().Open(t.Context())
		require.NoError(t, err)
		require.Len(t, open, 1)
		assert.Equal(t, jobB.Name(), open[0].Name())

		require.NoError(t, a[0].Batches().Delete(t.Context(), jobA))
		open, err = a[1].Batches().Open(t.Context())
		require.NoError(t, err)
		assert.Empty(t, open, "a deleted batch is not listed")
		open, err = b.Batches().Open(t.Context())
		require.NoError(t, err)
		assert.Len(t, open, 1, "the other project's batch stays")
	})
}

// TestBatchOpenWithoutAJobStore: Open is refused without a store that
// keeps jobs.
func TestBatchOpenWithoutAJobStore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro})
		c := newFleet(t, srv, 1, nil, geminiguard.WithCascade(pro))[0]
		open, err := c.Batches().Open(t.Context())
		require.ErrorContains(t, err, "geminiguard: Batches.Open")
		assert.Nil(t, open)
	})
}

// brokenJobs is a JobStore whose job calls fail at once or hang until the
// Client gives up, and count the calls that reached it.
type brokenJobs struct {
	fleet.SharedState
	hang  bool
	calls atomic.Int64
}

func (s *brokenJobs) broken(ctx context.Context) error {
	s.calls.Add(1)
	if s.hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("connection refused")
}

func (s *brokenJobs) PutJob(ctx context.Context, _, _ string, _ []byte, _ time.Duration) error {
	return s.broken(ctx)
}

func (s *brokenJobs) Jobs(ctx context.Context, _ string) ([]fleet.StoredJob, error) {
	return nil, s.broken(ctx)
}

func (s *brokenJobs) DropJob(ctx context.Context, _, _ string) error { return s.broken(ctx) }

// TestBatchJobStoreDownNeverFailsABatch: a store whose job calls fail, or
// hang, fails neither Create nor Wait, and delays each by one bounded round
// trip at most; Open says the store did not answer.
func TestBatchJobStoreDownNeverFailsABatch(t *testing.T) {
	for _, hang := range []bool{false, true} {
		t.Run(map[bool]string{false: "fails", true: "hangs"}[hang], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: pro})
				store := &brokenJobs{SharedState: fleet.NewMemoryState(), hang: hang}
				c := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro))[0]
				start := time.Now()
				job, err := c.Batches().Create(t.Context(), "", batchRequests(3), &genai.CreateBatchJobConfig{DisplayName: "down"})
				require.NoError(t, err)
				assert.Less(t, time.Since(start), time.Second, "one bounded round trip")
				results, err := c.Batches().Wait(t.Context(), job)
				require.NoError(t, err)
				for i, r := range results {
					assert.NoError(t, r.Err, "request %d", i)
				}
				assert.Positive(t, store.calls.Load(), "the Client tried the store")
				_, err = c.Batches().Open(t.Context())
				require.ErrorContains(t, err, "geminiguard: Batches.Open")
			})
		})
	}
}
