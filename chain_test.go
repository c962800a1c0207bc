package geminiguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"
)

func TestRetryOverloadedThenSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 800 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 3, BaseDelay: time.Second, MaxDelay: 4 * time.Second, Jitter: geminiguard.JitterFull}))

		start := time.Now()
		resp, rec, err := ask(t.Context(), c, "")
		elapsed := time.Since(start)

		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), resp.Text())
		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate))
		require.Len(t, rec.Attempts, 3)
		assert.Equal(t, flash, rec.Model)
		// Full jitter: the first wait is in [0, 1s), the second in [0, 2s).
		waits := rec.Attempts[1].Delay + rec.Attempts[2].Delay
		assert.Less(t, rec.Attempts[1].Delay, time.Second)
		assert.Less(t, rec.Attempts[2].Delay, 2*time.Second)
		assert.Equal(t, 800*time.Millisecond+waits, elapsed, "the 503s come at once: the answer's 800ms plus the two waits, nothing else")
	})
}

func TestRetryInfoIsHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second,
			Script: []geminitest.Step{{Fault: geminitest.RateLimitMinute, RetryDelay: 7 * time.Second}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, 7*time.Second+time.Second, time.Since(start), "exactly the 7s the server asked for, then the 1s answer")
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate))
		assert.Equal(t, 7*time.Second, rec.Attempts[1].Delay)
	})
}

func TestRetryInfoLongerThanMaxRetryAfterReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second,
			Script: []geminitest.Step{{Fault: geminitest.RateLimitMinute, RetryDelay: 90 * time.Second}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxRetryAfter: 60 * time.Second}))

		start := time.Now()
		_, _, err := ask(t.Context(), c, "")

		require.Error(t, err)
		assert.Zero(t, time.Since(start), "no sleep at all after the 429")
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
		assert.ErrorIs(t, err, geminiguard.ErrRateLimited)
		assert.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		v := geminiguard.Classify(err)
		assert.Equal(t, geminiguard.ClassRateLimit, v.Class)
		assert.Equal(t, 90*time.Second, v.RetryAfter)
	})
}

func TestFailuresThatRetryingCannotFix(t *testing.T) {
	cases := []struct {
		fault    geminitest.Fault
		class    geminiguard.Class
		sentinel error // nil: none of ours
		scope    geminiguard.Scope
	}{
		{geminitest.DailyQuota, geminiguard.ClassDailyQuota, geminiguard.ErrQuotaExhausted, geminiguard.ScopeModel},
		{geminitest.LimitZero, geminiguard.ClassNoQuota, geminiguard.ErrQuotaExhausted, geminiguard.ScopeModel},
		{geminitest.SpendCap, geminiguard.ClassSpendCap, geminiguard.ErrQuotaExhausted, geminiguard.ScopeProject},
		{geminitest.InvalidArgument, geminiguard.ClassBadRequest, nil, geminiguard.ScopeRequest},
		{geminitest.APIKeyInvalid, geminiguard.ClassAuth, nil, geminiguard.ScopeProject},
		{geminitest.LeakedKey, geminiguard.ClassAuth, nil, geminiguard.ScopeProject},
		{geminitest.ServiceDisabled, geminiguard.ClassServiceDisabled, nil, geminiguard.ScopeProject},
		{geminitest.NotFound, geminiguard.ClassNotFound, nil, geminiguard.ScopeModel},
	}
	for _, tc := range cases {
		t.Run(tc.fault.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second, Script: []geminitest.Step{{Fault: tc.fault}}})
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

				start := time.Now()
				resp, rec, err := ask(t.Context(), c, "")

				require.Error(t, err)
				assert.Nil(t, resp)
				assert.Zero(t, time.Since(start), "no wait of any kind")
				assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "exactly one upstream request")
				require.Len(t, rec.Attempts, 1)
				v := geminiguard.Classify(err)
				assert.Equal(t, tc.class, v.Class)
				assert.Equal(t, tc.scope, v.Scope)
				assert.False(t, v.Retryable)
				if tc.sentinel != nil {
					assert.ErrorIs(t, err, tc.sentinel)
				}
				var apiErr genai.APIError
				assert.True(t, errors.As(err, &apiErr), "the API's error stays reachable")
				requireNoKey(t, err.Error())
			})
		})
	}
}

func TestDeadlineShorterThanRetryInfo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 100 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.RateLimitMinute, RetryDelay: 30 * time.Second}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()

		start := time.Now()
		_, _, err := ask(ctx, c, "")

		assert.Zero(t, time.Since(start), "the 30s wait is not slept")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.ErrorIs(t, err, geminiguard.ErrRateLimited)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestCancelDuringBackoffReturnsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 100 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.RateLimitMinute, RetryDelay: 20 * time.Second}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(3*time.Second, cancel)

		start := time.Now()
		_, _, err := ask(ctx, c, "")

		assert.Equal(t, 3*time.Second, time.Since(start), "returns the moment the caller cancels")
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, geminiguard.ClassCanceled, geminiguard.Classify(err).Class)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestQuietSuccessesAreTypedErrors(t *testing.T) {
	cases := []struct {
		fault  geminitest.Fault
		kind   error
		reason string
		hits   int // SAFETY is final; empty answers are worth a retry: the default's four attempts
	}{
		{geminitest.PromptBlocked, geminiguard.ErrBlocked, "SAFETY", 1},
		{geminitest.FinishSafety, geminiguard.ErrBlocked, "SAFETY", 1},
		{geminitest.FinishRecitation, geminiguard.ErrBlocked, "RECITATION", 1},
		{geminitest.FinishOther, geminiguard.ErrEmptyResponse, "OTHER", 4},
		{geminitest.FinishMalformedFunctionCall, geminiguard.ErrEmptyResponse, "MALFORMED_FUNCTION_CALL", 4},
		{geminitest.MaxTokensEmpty, geminiguard.ErrEmptyResponse, "MAX_TOKENS", 1},
		{geminitest.StopNoParts, geminiguard.ErrEmptyResponse, "NO_PARTS", 4},
		{geminitest.NoCandidates, geminiguard.ErrEmptyResponse, "NO_CANDIDATES", 4},
	}
	for _, tc := range cases {
		t.Run(tc.fault.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				step := geminitest.Step{Fault: tc.fault}
				srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{step, step, step, step}})
				logs := &logBuffer{}
				c := newClient(t, srv, logs, geminiguard.WithCascade(flash))

				_, _, err := ask(t.Context(), c, "")

				require.ErrorIs(t, err, tc.kind)
				var rerr *geminiguard.ResponseError
				require.ErrorAs(t, err, &rerr)
				assert.Equal(t, tc.reason, rerr.Reason)
				assert.NotNil(t, rerr.Response, "the response is kept for inspection")
				assert.Equal(t, tc.hits, srv.Hits(flash, geminitest.VerbGenerate))
				requireNoKey(t, err.Error())
				requireNoKey(t, logs.String())
			})
		})
	}
}

func TestTimeoutsNest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Hour}) // hangs
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithTimeouts(2*time.Second, 5*time.Second),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 10, BaseDelay: 100 * time.Millisecond}))

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		assert.LessOrEqual(t, time.Since(start), 5*time.Second, "the call timeout bounds every attempt and wait")
		assert.Greater(t, time.Since(start), 4*time.Second)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate), "2s attempts: two whole ones and the rest of the budget")
		assert.Equal(t, geminiguard.ClassTimeout, geminiguard.Classify(rec.Attempts[0].Err).Class, "an attempt timeout is the model's failure")
		assert.Equal(t, "2", srv.Requests(flash)[0].Header.Get("X-Server-Timeout"), "the server is told when we stop waiting")
	})
}

// A caller's deadline shorter than the attempt timeout bounds the attempt:
// the server is told, and running out of it is the caller's, not the model's.
func TestCallerDeadlineBoundsTheAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Hour}) // hangs
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithTimeouts(10*time.Second, 20*time.Second))
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()

		start := time.Now()
		_, rec, err := ask(ctx, c, "")

		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
		assert.Equal(t, "3", srv.Requests(flash)[0].Header.Get("X-Server-Timeout"), "the server is told when we stop waiting")
		require.Len(t, rec.Attempts, 1)
		assert.Equal(t, geminiguard.ClassCanceled, geminiguard.Classify(rec.Attempts[0].Err).Class, "the caller's deadline says nothing about the model")
		assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State)
		assert.Zero(t, c.Stats().Models[0].Failures[geminiguard.ClassTimeout], "not a timeout of the model")
	})
}

func TestPausedAnswerIsCompletedThroughTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Script: []geminitest.Step{{Continuation: true}}}, geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		cfg := &genai.GenerateContentConfig{AutomaticContinuation: genai.Ptr(true)} // asks for the SDK's own hops

		var rec geminiguard.CallRecord
		resp, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("Tell me a story"), cfg)

		require.NoError(t, err)
		assert.Equal(t, srv.FullText(pro), resp.Text(), "the paused answer is completed, not returned short")
		assert.Equal(t, genai.FinishReasonStop, resp.Candidates[0].FinishReason)
		assert.Equal(t, 2, srv.Hits(pro, geminitest.VerbGenerate), "two requests, both through the chain")
		assert.Contains(t, string(srv.Requests(pro)[1].Body), `"continuationToken"`)
		assert.Zero(t, srv.Total(flash), "the token belongs to the model that answered")
		assert.Len(t, rec.Attempts, 2)
		st := c.Stats()
		assert.Equal(t, int64(1), st.Calls, "one call, however many hops")
		assert.Equal(t, int64(2), st.Models[0].Requests)
	})
}

// The attempts a call hands out (its CallRecord, its *CascadeError) stay as
// they were when it returned, however many calls the Client makes after it.
func TestAttemptsHandedOutStayTheCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		overloaded := []geminitest.Step{{Fault: geminitest.Overloaded}}
		srv := geminitest.New(geminitest.Model{Name: pro, Script: overloaded}, geminitest.Model{Name: flash, Script: overloaded})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
		_, failed, err := ask(t.Context(), c, "")
		var cerr *geminiguard.CascadeError
		require.ErrorAs(t, err, &cerr)
		_, answered, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		check := func(when string) {
			summary := func(as []geminiguard.Attempt) (out []string) {
				for _, a := range as {
					out = append(out, fmt.Sprintf("%s failed=%t", a.Model, a.Err != nil))
				}
				return out
			}
			assert.Equal(t, []string{pro + " failed=true", flash + " failed=true"}, summary(failed.Attempts), when)
			assert.Equal(t, []string{pro + " failed=true", flash + " failed=true"}, summary(cerr.Attempts), when)
			assert.Equal(t, []string{pro + " failed=false"}, summary(answered.Attempts), when)
		}
		check("at once")

		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 10 {
					_, _, err := ask(t.Context(), c, flash)
					assert.NoError(t, err)
				}
			})
		}
		wg.Wait()
		check("after other calls")
	})
}

// A seeded jitter source makes the retry delays of a run repeat.
func TestSeededJitterRepeats(t *testing.T) {
	delays := func(seed uint64) []time.Duration {
		var got []time.Duration
		synctest.Test(t, func(t *testing.T) {
			overloaded := geminitest.Step{Fault: geminitest.Overloaded}
			srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{overloaded, overloaded, overloaded, overloaded}})
			c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithJitterSource(rand.NewPCG(seed, 0)),
				geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 5}), geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 10}))
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			for _, a := range rec.Attempts[1:] {
				got = append(got, a.Delay)
			}
		})
		return got
	}
	first := delays(1)
	require.Len(t, first, 4)
	assert.Equal(t, first, delays(1), "the same seed, the same delays")
	assert.NotEqual(t, first, delays(2))
}
