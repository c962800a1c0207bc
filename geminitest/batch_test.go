package geminitest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

func inlined(n int) *genai.BatchJobSource {
	src := &genai.BatchJobSource{}
	for range n {
		src.InlinedRequests = append(src.InlinedRequests, &genai.InlinedRequest{Contents: prompt("Say hi")})
	}
	return src
}

// A job goes PENDING → RUNNING → SUCCEEDED in fake time, with a result per
// request: responses, a per-request error and a blocked prompt as Each
// says; list, cancel and delete answer as the SDK expects.
func TestBatchLifecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash})
		fake.ScriptBatch(flash, geminitest.BatchScript{Queue: time.Minute, Run: 10 * time.Minute, Each: func(i int) geminitest.Step {
			switch i {
			case 1:
				return geminitest.Step{Fault: geminitest.Overloaded}
			case 2:
				return geminitest.Step{Fault: geminitest.PromptBlocked}
			}
			return geminitest.Step{}
		}})
		c := newClient(t, fake.ClientConfig())
		ctx := t.Context()

		job, err := c.Batches.Create(ctx, flash, inlined(4), &genai.CreateBatchJobConfig{DisplayName: "four"})
		require.NoError(t, err)
		assert.Equal(t, genai.JobStatePending, job.State)
		assert.Equal(t, "four", job.DisplayName)
		assert.Equal(t, "models/"+flash, job.Model)

		time.Sleep(6 * time.Minute)
		job, err = c.Batches.Get(ctx, job.Name, nil)
		require.NoError(t, err)
		assert.Equal(t, genai.JobStateRunning, job.State)
		assert.Nil(t, job.Dest)

		time.Sleep(5 * time.Minute)
		job, err = c.Batches.Get(ctx, job.Name, nil)
		require.NoError(t, err)
		assert.Equal(t, genai.JobStateSucceeded, job.State)
		require.NotNil(t, job.Dest)
		rs := job.Dest.InlinedResponses
		require.Len(t, rs, 4)
		assert.Equal(t, fake.FullText(flash), rs[0].Response.Text())
		require.NotNil(t, rs[1].Error)
		assert.Equal(t, int32(503), *rs[1].Error.Code)
		assert.Equal(t, "The model is overloaded. Please try again later.", rs[1].Error.Message)
		assert.Nil(t, rs[1].Response)
		require.NotNil(t, rs[2].Response.PromptFeedback)
		assert.Equal(t, genai.BlockedReasonSafety, rs[2].Response.PromptFeedback.BlockReason)
		assert.Equal(t, flash, rs[3].Response.ModelVersion)

		page, err := c.Batches.List(ctx, nil)
		require.NoError(t, err)
		require.Len(t, page.Items, 1)
		assert.Equal(t, job.Name, page.Items[0].Name)

		require.NoError(t, c.Batches.Cancel(ctx, job.Name, nil)) // ended: stays SUCCEEDED
		job, err = c.Batches.Get(ctx, job.Name, nil)
		require.NoError(t, err)
		assert.Equal(t, genai.JobStateSucceeded, job.State)

		_, err = c.Batches.Delete(ctx, job.Name, nil)
		require.NoError(t, err)
		_, err = c.Batches.Get(ctx, job.Name, nil)
		assert.Equal(t, 404, apiError(t, err).Code)
		assert.Empty(t, fake.BatchJobs())
		assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbBatchCreate))
		assert.Equal(t, 3, fake.Hits(flash, geminitest.VerbBatchGet))
		assert.Equal(t, 1, fake.Hits("", geminitest.VerbBatchGet))
		assert.Equal(t, 1, fake.Hits("", geminitest.VerbBatchList))
	})
}

// The other endings: FAILED halfway keeps the first half's results,
// EXPIRED and CANCELLED have none; Control scripts the control requests,
// and Limit the concurrent jobs.
func TestBatchEndings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const pro = "gemini-2.5-pro"
		fake := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: pro})
		c := newClient(t, fake.ClientConfig())
		ctx := t.Context()

		fake.ScriptBatch(flash, geminitest.BatchScript{End: geminitest.BatchFailed, FailAfter: 0.5, Limit: 2,
			Control: []geminitest.Step{{Fault: geminitest.Overloaded}}})
		_, err := c.Batches.Create(ctx, flash, inlined(10), nil)
		assert.Equal(t, 503, apiError(t, err).Code)
		failed, err := c.Batches.Create(ctx, flash, inlined(10), nil)
		require.NoError(t, err)
		fake.ScriptBatch(pro, geminitest.BatchScript{End: geminitest.BatchExpired})
		expired, err := c.Batches.Create(ctx, pro, inlined(3), nil)
		require.NoError(t, err)
		_, err = c.Batches.Create(ctx, flash, inlined(1), nil)
		assert.Equal(t, 429, apiError(t, err).Code, "a third concurrent job")

		time.Sleep(2 * time.Minute)
		_, err = c.Batches.Create(ctx, flash, inlined(1), nil)
		assert.Equal(t, 429, apiError(t, err).Code, "both still running")
		require.NoError(t, c.Batches.Cancel(ctx, expired.Name, nil))
		time.Sleep(10 * time.Minute)

		job, err := c.Batches.Get(ctx, failed.Name, nil)
		require.NoError(t, err)
		assert.Equal(t, genai.JobStateFailed, job.State)
		assert.Nil(t, job.Error, "the SDK does not map the operation's error on the Gemini API")
		require.NotNil(t, job.Dest)
		require.Len(t, job.Dest.InlinedResponses, 5)
		assert.Equal(t, fake.FullText(flash), job.Dest.InlinedResponses[4].Response.Text())

		job, err = c.Batches.Get(ctx, expired.Name, nil)
		require.NoError(t, err)
		assert.Equal(t, genai.JobStateCancelled, job.State)
		assert.Nil(t, job.Dest)

		fake.ScriptBatch(pro, geminitest.BatchScript{End: geminitest.BatchExpired})
		exp, err := c.Batches.Create(ctx, pro, inlined(3), nil)
		require.NoError(t, err)
		time.Sleep(12 * time.Minute)
		job, err = c.Batches.Get(ctx, exp.Name, nil)
		require.NoError(t, err)
		assert.Equal(t, genai.JobStateExpired, job.State)
		assert.Nil(t, job.Dest)
	})
}
