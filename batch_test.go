package geminiguard_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// batchRequests returns n requests whose prompts differ in length, so that
// the prompt tokens a response reports tell which request it answers
// (batchPromptTokens).
func batchRequests(n int) []*genai.InlinedRequest {
	reqs := make([]*genai.InlinedRequest, n)
	for i := range reqs {
		reqs[i] = &genai.InlinedRequest{Contents: genai.Text("Say hi" + strings.Repeat("abcd", i%50))}
	}
	return reqs
}

// batchPromptTokens is the fake's token count of batchRequests' prompt i.
func batchPromptTokens(i int) int32 { return int32(2 + i%50) }

// halfPrice is what usage u costs at half of model's current rates, in
// Micros (unrounded).
func halfPrice(t *testing.T, model string, u *genai.GenerateContentResponseUsageMetadata) float64 {
	t.Helper()
	prices := geminiguard.Prices()[model]
	require.NotEmpty(t, prices, model)
	var p geminiguard.Price
	for _, q := range prices {
		if !q.EffectiveFrom.After(time.Now()) {
			p = q
		}
	}
	return (float64(u.PromptTokenCount)*float64(p.Input) + float64(u.CandidatesTokenCount)*float64(p.Output)) / 1e6 / 2
}

func costOf(st geminiguard.Stats, model string) geminiguard.Micros {
	for _, m := range st.Models {
		if m.Model == model {
			return m.Cost
		}
	}
	return 0
}

// TestBatchThousandFailedHalfwayResumed is the lane's show: 1,000
// requests as a batch of the primary, whose job fails halfway; the first
// Client reads that, sends the 500 failed requests again as a job of the
// secondary, saves the handle and stops; a second Client resumes it. Every
// request is answered once (the failed half by the secondary), at half
// price, in fake time.
func TestBatchThousandFailedHalfwayResumed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 1000
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptBatch(pro, geminitest.BatchScript{End: geminitest.BatchFailed, FailAfter: 0.5})
		start := time.Now()

		first := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		job, err := first.Batches().Create(t.Context(), "", batchRequests(n), &genai.CreateBatchJobConfig{DisplayName: "thousand"})
		require.NoError(t, err)
		for len(job.Jobs()) < 2 { // until the primary's job failed and its failed half went to the secondary
			done, err := first.Batches().Poll(t.Context(), job)
			require.NoError(t, err)
			require.False(t, done)
			time.Sleep(time.Minute)
		}
		handle, err := job.Handle()
		require.NoError(t, err)
		st1 := first.Stats()
		require.NoError(t, first.Close())
		assert.Equal(t, int64(n), st1.Batch.Requests)
		assert.Equal(t, int64(n/2), st1.Batch.Answered, "the primary's half")
		assert.Equal(t, int64(n/2), st1.Batch.Resubmitted)

		second := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer second.Close()
		resumed, err := second.Batches().Resume(t.Context(), handle)
		require.NoError(t, err)
		results, err := second.Batches().Wait(t.Context(), resumed)
		require.NoError(t, err)

		require.Len(t, results, n)
		var want float64
		answeredBy := map[string]int{}
		for i, r := range results {
			require.NoError(t, r.Err, "request %d", i)
			require.NotNil(t, r.Response, "request %d", i)
			wantModel := pro
			if i >= n/2 {
				wantModel = flash
			}
			assert.Equal(t, wantModel, r.Model, "request %d", i)
			assert.Equal(t, wantModel, r.Response.ModelVersion, "request %d", i)
			assert.Equal(t, batchPromptTokens(i), r.Response.UsageMetadata.PromptTokenCount, "request %d answered by its own response", i)
			answeredBy[r.Model]++
			want += halfPrice(t, r.Model, r.Response.UsageMetadata)
		}
		assert.Equal(t, map[string]int{pro: n / 2, flash: n / 2}, answeredBy)
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbBatchCreate), "one job of the primary")
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbBatchCreate), "one job of the secondary, never sent again by the second Client")
		sdkJob, err := second.GenAI().Batches.Get(t.Context(), resumed.Jobs()[1], nil)
		require.NoError(t, err)
		assert.Len(t, sdkJob.Dest.InlinedResponses, n/2, "the secondary's job holds the failed half only")

		st2 := second.Stats()
		assert.Equal(t, int64(n), st2.Batch.Answered)
		assert.Zero(t, st2.Batch.Failed)
		got := costOf(st2, pro) + costOf(st2, flash)
		assert.Positive(t, got)
		assert.InDelta(t, want, float64(got), n*0.5, "half price, each response rounded to the micro-dollar")
		elapsed := time.Since(start)
		assert.Less(t, elapsed, 30*time.Minute, "fake time: the primary's job failed after 6 minutes, the secondary's took 11")
		t.Logf("%d requests: %v; cost %v (at full price %.0f µ$); %d creates; fake time %v", n, answeredBy, got, 2*want,
			srv.Hits(pro, geminitest.VerbBatchCreate)+srv.Hits(flash, geminitest.VerbBatchCreate), elapsed)
	})
}

// TestBatchResultsTypedAsUnary: a job's per-request outcomes are typed as
// GenerateContent types them; a quiet failure or a caller's mistake is
// final, an overload per request goes to the next model.
func TestBatchResultsTypedAsUnary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptBatch(pro, geminitest.BatchScript{Each: func(i int) geminitest.Step {
			return geminitest.Step{Fault: [...]geminitest.Fault{geminitest.OK, geminitest.PromptBlocked, geminitest.Overloaded, geminitest.InvalidArgument, geminitest.StopNoParts}[i]}
		}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer c.Close()
		job, err := c.Batches().Create(t.Context(), "", batchRequests(5), nil)
		require.NoError(t, err)
		results, err := c.Batches().Wait(t.Context(), job)
		require.NoError(t, err)
		require.Len(t, results, 5)

		assert.NoError(t, results[0].Err)
		assert.Equal(t, pro, results[0].Model)

		require.ErrorIs(t, results[1].Err, geminiguard.ErrBlocked)
		var re *geminiguard.ResponseError
		require.ErrorAs(t, results[1].Err, &re)
		assert.Equal(t, string(genai.BlockedReasonSafety), re.Reason)
		assert.Equal(t, pro, results[1].Model, "a blocked prompt is not sent to another model")

		assert.NoError(t, results[2].Err)
		assert.Equal(t, flash, results[2].Model, "the overloaded request went to the next model")

		var api genai.APIError
		require.ErrorAs(t, results[3].Err, &api)
		assert.Equal(t, 400, api.Code)
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(results[3].Err).Class)
		assert.Equal(t, pro, results[3].Model)

		unary := geminiguard.Classify(&geminiguard.ResponseError{Kind: geminiguard.ErrEmptyResponse, Model: pro, Reason: "NO_PARTS"})
		require.Equal(t, geminiguard.ScopeModel, unary.Scope, "the unary path tries the next model after an empty answer")
		assert.NoError(t, results[4].Err)
		assert.Equal(t, flash, results[4].Model, "so does the batch")
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbBatchCreate)+srv.Hits(pro, geminitest.VerbBatchCreate))
	})
}

// TestBatchControlRequestsRetried: a create that meets a 503 and a get
// that meets a per-minute 429 are retried through the chain, the get after
// the server's stated delay.
func TestBatchControlRequestsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptBatch(pro, geminitest.BatchScript{Control: []geminitest.Step{
			{Fault: geminitest.Overloaded}, {}, {Fault: geminitest.RateLimitMinute, RetryDelay: 20 * time.Second}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer c.Close()
		job, err := c.Batches().Create(t.Context(), "", batchRequests(3), nil)
		require.NoError(t, err)
		assert.Equal(t, 2, srv.Hits(pro, geminitest.VerbBatchCreate), "the 503, then the job")
		assert.Len(t, srv.BatchJobs(), 1)

		start := time.Now()
		done, err := c.Batches().Poll(t.Context(), job)
		require.NoError(t, err)
		assert.False(t, done)
		assert.Equal(t, 2, srv.Hits(pro, geminitest.VerbBatchGet), "the 429, then the job")
		assert.GreaterOrEqual(t, time.Since(start), 20*time.Second, "the server's stated delay")

		results, err := c.Batches().Wait(t.Context(), job)
		require.NoError(t, err)
		for _, r := range results {
			assert.NoError(t, r.Err)
			assert.Equal(t, pro, r.Model)
		}
	})
}

// TestBatchExpiredAndCancelled: an expired job's requests go to the next
// model; a cancelled job's requests end with a *BatchJobError, not sent
// again.
func TestBatchExpiredAndCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptBatch(pro, geminitest.BatchScript{End: geminitest.BatchExpired})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer c.Close()

		job, err := c.Batches().Create(t.Context(), "", batchRequests(4), nil)
		require.NoError(t, err)
		results, err := c.Batches().Wait(t.Context(), job)
		require.NoError(t, err)
		for _, r := range results {
			assert.NoError(t, r.Err)
			assert.Equal(t, flash, r.Model)
		}

		job, err = c.Batches().Create(t.Context(), flash, batchRequests(2), nil)
		require.NoError(t, err)
		require.NoError(t, c.Batches().Cancel(t.Context(), job))
		results, err = c.Batches().Wait(t.Context(), job)
		require.NoError(t, err)
		for _, r := range results {
			var je *geminiguard.BatchJobError
			require.ErrorAs(t, r.Err, &je)
			assert.Equal(t, genai.JobStateCancelled, je.State)
			assert.Equal(t, flash, r.Model)
		}
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbBatchCreate), "the expired job's requests, then the cancelled job")
		require.NoError(t, c.Batches().Delete(t.Context(), job))
		assert.Len(t, srv.BatchJobs(), 2)
	})
}

// TestBatchRefusals: what Create and Resume refuse before anything is
// sent, and the budget.
func TestBatchRefusals(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: pro})
	c := newClient(t, srv, nil, geminiguard.WithCascade(pro))
	defer c.Close()
	_, err := c.Batches().Create(t.Context(), "", nil, nil)
	assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
	_, err = c.Batches().Create(t.Context(), "", []*genai.InlinedRequest{{}}, nil)
	assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
	_, err = c.Batches().Resume(t.Context(), []byte(`{"version":99}`))
	assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
	assert.Zero(t, srv.Hits(pro, geminitest.VerbBatchCreate))
	assert.False(t, errors.Is(err, geminiguard.ErrBudgetExhausted), fmt.Sprint(err))
}

// TestBatchSpanAndBudget: Wait runs in a span of the GenAI conventions
// (generate_content, there being no batch operation name) marked as the
// batch lane, with the tokens of the results; the half-price spend counts
// against WithBudget, which refuses the next batch once spent.
func TestBatchSpanAndBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro})
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(pro), geminiguard.WithBudget(geminiguard.Budget{PerDay: 1}))...)
		defer c.Close()
		job, err := c.Batches().Create(t.Context(), "", batchRequests(3), nil)
		require.NoError(t, err)
		_, err = c.Batches().Wait(t.Context(), job)
		require.NoError(t, err)

		spans := tel.spans.Ended()
		require.Len(t, spans, 1)
		assert.Equal(t, "generate_content "+pro, spans[0].Name())
		got := map[string]string{}
		for _, kv := range spans[0].Attributes() {
			got[string(kv.Key)] = kv.Value.String()
		}
		assert.Equal(t, "generate_content", got["gen_ai.operation.name"])
		assert.Equal(t, "batch", got["geminiguard.lane"])
		assert.Equal(t, "3", got["geminiguard.batch.requests"])
		assert.NotEqual(t, "0", got["gen_ai.usage.output_tokens"])

		assert.Positive(t, c.Stats().Budget.SpentToday)
		_, err = c.Batches().Create(t.Context(), "", batchRequests(1), nil)
		require.ErrorIs(t, err, geminiguard.ErrBudgetExhausted)
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbBatchCreate))
	})
}

// TestBatchDeferrableOverflow: a Deferrable call whose every model is out
// of its daily quota or overloaded goes to the batch lane and returns a
// *DeferredError with the job, whose Wait answers it; an unmarked call, and
// a marked one that failed for the caller's mistake, are not deferred.
func TestBatchDeferrableOverflow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Faults: []geminitest.Chance{{P: 1, Step: geminitest.Step{Fault: geminitest.DailyQuota}}}},
			geminitest.Model{Name: flash, Faults: []geminitest.Chance{{P: 1, Step: geminitest.Step{Fault: geminitest.Overloaded}}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer c.Close()

		_, err := c.GenerateContent(t.Context(), "", genai.Text("Say hi"), nil)
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		assert.NotErrorIs(t, err, geminiguard.ErrDeferred)
		assert.Zero(t, srv.Hits(pro, geminitest.VerbBatchCreate))

		resp, err := c.GenerateContent(geminiguard.Deferrable(t.Context()), "", genai.Text("Say hi"), nil)
		assert.Nil(t, resp)
		require.ErrorIs(t, err, geminiguard.ErrDeferred)
		require.ErrorIs(t, err, geminiguard.ErrQuotaExhausted, "the call's own error is still there")
		var de *geminiguard.DeferredError
		require.ErrorAs(t, err, &de)
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbBatchCreate))
		results, err := c.Batches().Wait(t.Context(), de.Job)
		require.NoError(t, err)
		require.Len(t, results, 1)
		require.NoError(t, results[0].Err)
		assert.Equal(t, srv.FullText(pro), results[0].Response.Text())

		mistake := geminitest.New(geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.InvalidArgument}}}, geminitest.Model{Name: flash})
		c2 := newClient(t, mistake, nil, geminiguard.WithCascade(pro, flash))
		defer c2.Close()
		_, err = c2.GenerateContent(geminiguard.Deferrable(t.Context()), "", genai.Text("Say hi"), nil)
		require.Error(t, err)
		assert.Zero(t, mistake.Hits(pro, geminitest.VerbBatchCreate))
		assert.NotErrorIs(t, err, geminiguard.ErrDeferred)
	})
}

// TestBatchQuotaIsItsOwn: a daily-quota 429 on a batch create does not
// cool the model down for interactive calls, whose quota is not the Batch
// API's.
func TestBatchQuotaIsItsOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptBatch(pro, geminitest.BatchScript{Control: []geminitest.Step{{Fault: geminitest.DailyQuota}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer c.Close()
		_, err := c.Batches().Create(t.Context(), "", batchRequests(2), nil)
		require.ErrorIs(t, err, geminiguard.ErrQuotaExhausted)

		resp, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, resp.ModelVersion, "the primary still answers interactive calls")
		for _, m := range c.Stats().Models {
			assert.Zero(t, m.CoolDownUntil, m.Model)
		}
	})
}
