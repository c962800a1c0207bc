package geminiguard_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// answerTime is how long the fake's model takes to answer in these tests.
const answerTime = 10 * time.Second

// feature returns a context naming the bulkhead name.
func feature(name string) context.Context {
	return geminiguard.InBulkhead(context.Background(), name)
}

// timedAsk sends one prompt with ctx and returns the error and how long the
// call took.
func timedAsk(ctx context.Context, c *geminiguard.Client) (time.Duration, error) {
	start := time.Now()
	_, err := c.GenerateContent(ctx, "", genai.Text("Say hi"), nil)
	return time.Since(start), err
}

// callBackToBack has workers send calls back to back on c for d of fake
// time and returns how many were made and how many failed.
func callBackToBack(ctx context.Context, c *geminiguard.Client, workers int, d time.Duration) (calls, failed int) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for range workers {
		wg.Go(func() {
			for time.Now().Before(end) {
				_, err := timedAsk(ctx, c)
				mu.Lock()
				calls++
				if err != nil {
					failed++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return calls, failed
}

func TestBulkheadFullRefusesAtOnceWhileAnotherFeatureProceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 2}),
			geminiguard.WithBulkhead("chat", geminiguard.Bulkhead{MaxConcurrent: 2}))

		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				_, err := timedAsk(feature("batch"), c)
				assert.NoError(t, err)
			})
		}
		synctest.Wait() // both batch calls hold their slots, waiting for the model

		took, err := timedAsk(feature("batch"), c)
		require.ErrorIs(t, err, geminiguard.ErrBulkheadFull)
		assert.Equal(t, time.Duration(0), took, "a full bulkhead refuses at once")
		v := geminiguard.Classify(err)
		assert.Equal(t, geminiguard.ClassBulkheadFull, v.Class)
		assert.False(t, v.Retryable)
		assert.Equal(t, geminiguard.ScopeRequest, v.Scope)

		took, err = timedAsk(feature("chat"), c)
		require.NoError(t, err, "another feature's calls proceed")
		assert.Equal(t, answerTime, took)
		wg.Wait()

		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate), "the refused call sent nothing")
		st := c.Stats()
		assert.Equal(t, []geminiguard.BulkheadStats{
			{Name: "batch", Limit: 2, Admitted: 2, Rejected: 1},
			{Name: "chat", Limit: 2, Admitted: 1},
		}, st.Bulkheads)
		assert.Equal(t, int64(3), st.Calls, "a refused call is counted in its bulkhead only")
	})
}

func TestBulkheadQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 1, MaxQueue: 1, QueueTimeout: 3 * time.Second}),
			geminiguard.WithBulkhead("report", geminiguard.Bulkhead{MaxConcurrent: 1, MaxQueue: 1, QueueTimeout: time.Minute}))

		var wg sync.WaitGroup
		for _, name := range []string{"batch", "report"} {
			wg.Go(func() {
				_, err := timedAsk(feature(name), c)
				assert.NoError(t, err)
			})
		}
		synctest.Wait()
		var batchQueued, reportQueued struct {
			took time.Duration
			err  error
		}
		wg.Go(func() { batchQueued.took, batchQueued.err = timedAsk(feature("batch"), c) })
		wg.Go(func() { reportQueued.took, reportQueued.err = timedAsk(feature("report"), c) })
		synctest.Wait()

		assert.Equal(t, []geminiguard.BulkheadStats{
			{Name: "batch", Limit: 1, InFlight: 1, Queued: 1, Admitted: 1},
			{Name: "report", Limit: 1, InFlight: 1, Queued: 1, Admitted: 1},
		}, c.Stats().Bulkheads)
		took, err := timedAsk(feature("batch"), c)
		require.ErrorIs(t, err, geminiguard.ErrBulkheadFull, "the queue is full too")
		assert.Equal(t, time.Duration(0), took)
		wg.Wait()

		require.ErrorIs(t, batchQueued.err, geminiguard.ErrBulkheadFull)
		assert.NotErrorIs(t, batchQueued.err, context.DeadlineExceeded)
		assert.Equal(t, 3*time.Second, batchQueued.took, "refused at the queue timeout")
		require.NoError(t, reportQueued.err, "a queued call gets the slot the first call leaves")
		assert.Equal(t, 2*answerTime, reportQueued.took)

		assert.Equal(t, []geminiguard.BulkheadStats{
			{Name: "batch", Limit: 1, Admitted: 1, Rejected: 2},
			{Name: "report", Limit: 1, Admitted: 2},
		}, c.Stats().Bulkheads)
		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestBulkheadQueueEndsWithTheCallersContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 1, MaxQueue: 5})) // QueueTimeout 0: the call timeout

		var wg sync.WaitGroup
		wg.Go(func() {
			_, err := timedAsk(feature("batch"), c)
			assert.NoError(t, err)
		})
		synctest.Wait()

		ctx, cancel := context.WithTimeout(feature("batch"), 2*time.Second)
		defer cancel()
		took, err := timedAsk(ctx, c)
		require.ErrorIs(t, err, geminiguard.ErrBulkheadFull)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 2*time.Second, took)
		assert.Equal(t, geminiguard.ClassBulkheadFull, geminiguard.Classify(err).Class)

		ctx, cancel = context.WithCancel(feature("batch"))
		time.AfterFunc(time.Second, cancel)
		took, err = timedAsk(ctx, c)
		require.ErrorIs(t, err, context.Canceled)
		assert.NotErrorIs(t, err, geminiguard.ErrBulkheadFull, "the caller gave up: not a refusal")
		assert.Equal(t, geminiguard.ClassCanceled, geminiguard.Classify(err).Class)
		assert.Equal(t, time.Second, took)
		wg.Wait()

		assert.Equal(t, []geminiguard.BulkheadStats{{Name: "batch", Limit: 1, Admitted: 1, Rejected: 1}}, c.Stats().Bulkheads)
	})
}

func TestBulkheadStreamHoldsItsSlotUntilItEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithBulkhead("chat", geminiguard.Bulkhead{MaxConcurrent: 1}))
		ctx := feature("chat")

		func() {
			defer func() { assert.Equal(t, "the caller's loop body", recover()) }()
			for _, err := range c.GenerateContentStream(ctx, "", genai.Text("Say hi"), nil) {
				require.NoError(t, err)
				_, err := timedAsk(ctx, c)
				require.ErrorIs(t, err, geminiguard.ErrBulkheadFull, "the open stream holds the slot")
				panic("the caller's loop body")
			}
		}()

		_, err := timedAsk(ctx, c)
		require.NoError(t, err, "the panic gave the slot back")
		assert.Equal(t, []geminiguard.BulkheadStats{{Name: "chat", Limit: 1, Admitted: 2, Rejected: 1}}, c.Stats().Bulkheads)
	})
}

func TestBulkheadNames(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithBulkhead("default", geminiguard.Bulkhead{MaxConcurrent: 1}))

		_, err := timedAsk(t.Context(), c)
		require.NoError(t, err)
		_, err = c.EmbedContent(t.Context(), flash, genai.Text("Say hi"), nil)
		require.NoError(t, err)
		assert.Equal(t, []geminiguard.BulkheadStats{{Name: "default", Limit: 1, Admitted: 2}}, c.Stats().Bulkheads,
			"calls that name no bulkhead go through the default one")

		_, err = timedAsk(feature("chta"), c)
		require.Error(t, err)
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, "a misspelt name fails loudly")
		assert.Contains(t, err.Error(), `"chta"`)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))

		plain := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		_, err = timedAsk(t.Context(), plain)
		require.NoError(t, err)
		assert.Nil(t, plain.Stats().Bulkheads)
	})
}

func TestWithBulkheadValidation(t *testing.T) {
	_, err := newOffline(t, geminiguard.WithBulkhead("", geminiguard.Bulkhead{MaxConcurrent: 1}),
		geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxQueue: -1, QueueTimeout: -time.Second, Limit: geminiguard.BulkheadLimit(7)}))
	require.Error(t, err)
	for _, want := range []string{
		"WithBulkhead: the name is empty",
		`WithBulkhead("batch"): MaxConcurrent (0) must be positive`,
		`WithBulkhead("batch"): MaxQueue (-1) is negative`,
		`WithBulkhead("batch"): QueueTimeout (-1s) is negative`,
		`WithBulkhead("batch"): Limit (BulkheadLimit(7)) is not one of LimitFixed, LimitAIMD, LimitGradient`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestIsFallback(t *testing.T) {
	tests := []struct {
		name string
		own  *genai.GenerateContentResponse // what the Fallback returns, shared by every call
	}{
		{"canned text", &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{
			Content: genai.NewContentFromText("We're busy", genai.RoleModel), FinishReason: genai.FinishReasonStop}}}},
		{"a stored model answer", &genai.GenerateContentResponse{
			ModelVersion:    flash,
			SDKHTTPResponse: &genai.HTTPResponse{Headers: http.Header{"Content-Type": {"application/json"}}},
			Candidates: []*genai.Candidate{{
				Content: genai.NewContentFromText("We're busy", genai.RoleModel), FinishReason: genai.FinishReasonStop}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: flash})
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
					geminiguard.WithFallback(func(context.Context, geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
						return tt.own, nil
					}))
				resp, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err)
				require.False(t, rec.Fallback)
				assert.False(t, geminiguard.IsFallback(resp), "a model's answer")

				srv.SetModel(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
				for range 2 {
					resp, rec, err = ask(t.Context(), c, "")
					require.NoError(t, err)
					require.True(t, rec.Fallback)
					assert.True(t, geminiguard.IsFallback(resp), "the Fallback's answer")
					assert.Equal(t, "We're busy", resp.Text())
				}
				for chunk, err := range c.GenerateContentStream(t.Context(), "", genai.Text("Say hi"), nil) {
					require.NoError(t, err)
					assert.True(t, geminiguard.IsFallback(chunk), "the Fallback's answer to a stream")
				}
				assert.False(t, geminiguard.IsFallback(tt.own), "the Fallback's own value is never written")
				if tt.own.SDKHTTPResponse != nil {
					assert.Equal(t, http.Header{"Content-Type": {"application/json"}}, tt.own.SDKHTTPResponse.Headers)
					assert.Equal(t, "application/json", resp.SDKHTTPResponse.Headers.Get("Content-Type"), "the Fallback's headers are kept")
					assert.Equal(t, flash, resp.ModelVersion, "the Fallback's ModelVersion is kept")
				} else {
					assert.Equal(t, geminiguard.FallbackModelVersion, resp.ModelVersion)
				}
			})
		})
	}
	assert.False(t, geminiguard.IsFallback(nil))
}

// An adaptive limit (LimitAIMD) rises to its ceiling while the model
// answers in its usual time, falls when the model slows down, so that fewer
// of the feature's calls wait on it, and comes back when the model does.
func TestBulkheadAdaptiveLimitFollowsLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second})
		// Hedging off: the shift's first slow answers would be hedged, within
		// the hedge budget (TestHedgesOfALatencyShiftStayWithinTheBudget).
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithTimeouts(30*time.Second, time.Minute), hedgingOff,
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 16, MaxQueue: 16, QueueTimeout: 5 * time.Minute, Limit: geminiguard.LimitAIMD}))
		limit := func() int { return c.Stats().Bulkheads[0].Limit }
		require.Equal(t, 4, limit(), "an adaptive limit starts at 4")

		phase := func(d time.Duration) (calls, failed int) { return callBackToBack(feature("batch"), c, 16, d) }

		calls, failed := phase(30 * time.Second)
		assert.Zero(t, failed)
		assert.Equal(t, 16, limit(), "1s answers: the limit rises to its ceiling")
		assert.Greater(t, calls, 400, "up to 16 calls at a time: about 16 a second")

		srv.SetModel(geminitest.Model{Name: flash, Latency: 2500 * time.Millisecond})
		calls, failed = phase(60 * time.Second)
		assert.Zero(t, failed)
		assert.Equal(t, 1, limit(), "2.5s answers: the limit falls to 1")
		assert.Less(t, calls, 16*60/5, "far fewer requests on the slow model than 16 at a time would send (384)")

		srv.SetModel(geminitest.Model{Name: flash, Latency: time.Second})
		calls, failed = phase(30 * time.Second)
		assert.Zero(t, failed)
		assert.Equal(t, 16, limit(), "1s answers again: the limit recovers")
		assert.Greater(t, calls, 400)
		assert.Equal(t, int(c.Stats().Calls), srv.Hits(flash, geminitest.VerbGenerate), "one request a call: none cut, none retried")
	})
}

// TestBulkheadAIMDBacksOffOnFastOverloadAnswers: a model that answers 503
// at once is overloaded, not fast: an AIMD bulkhead's limit falls on those
// answers instead of rising to its ceiling, and so fewer calls at a time
// reach the struggling model.
func TestBulkheadAIMDBacksOffOnFastOverloadAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 1 << 20}), // the breaker stays out of it
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 16, MaxQueue: 64, QueueTimeout: 5 * time.Minute, Limit: geminiguard.LimitAIMD}))
		limit := func() int { return c.Stats().Bulkheads[0].Limit }
		ask16 := func(rounds int) {
			for range rounds {
				var wg sync.WaitGroup
				for range 16 {
					wg.Go(func() { _, _ = timedAsk(feature("batch"), c) })
				}
				wg.Wait()
			}
		}
		ask16(4)
		require.Equal(t, 16, limit(), "1s answers: the limit rises to its ceiling")

		srv.SetModel(geminitest.Model{Name: flash, Latency: 50 * time.Millisecond,
			Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
		ask16(2)
		assert.LessOrEqual(t, limit(), 2, "fast 503s: the limit falls as on slow answers (16 × 0.9 per call)")
	})
}
