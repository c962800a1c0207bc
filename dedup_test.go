package geminiguard_test

import (
	"context"
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

// askWith sends prompt with config and returns the answer's text, the call
// record, how long the call took and the error.
func askWith(ctx context.Context, c *geminiguard.Client, prompt string, config *genai.GenerateContentConfig) (string, geminiguard.CallRecord, time.Duration, error) {
	var rec geminiguard.CallRecord
	start := time.Now()
	resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(prompt), config)
	took := time.Since(start)
	if err != nil {
		return "", rec, took, err
	}
	return resp.Text(), rec, took, nil
}

func TestDedupFiftyIdenticalCallsSendOneRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))

		const callers = 50
		resps := make([]*genai.GenerateContentResponse, callers)
		recs := make([]geminiguard.CallRecord, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				var err error
				resps[i], err = c.GenerateContent(geminiguard.RecordCall(t.Context(), &recs[i]), "", genai.Text("Say hi"), nil)
				assert.NoError(t, err)
			})
		}
		wg.Wait()

		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "50 identical calls in flight share one request")
		led, deduplicated := 0, 0
		for i, resp := range resps {
			require.NotNil(t, resp)
			assert.Equal(t, srv.FullText(flash), resp.Text(), "every caller gets the answer")
			assert.Equal(t, flash, recs[i].Model)
			if recs[i].Deduplicated {
				deduplicated++
				assert.Empty(t, recs[i].Attempts, "a follower sent nothing")
				assert.Zero(t, recs[i].Cost)
			} else {
				led++
				assert.Len(t, recs[i].Attempts, 1)
			}
		}
		assert.Equal(t, 1, led)
		assert.Equal(t, callers-1, deduplicated)

		resps[0].ModelVersion = "changed by its caller"
		assert.NotEqual(t, "changed by its caller", resps[1].ModelVersion, "each caller has a response of its own")

		_, _, _, err := askWith(t.Context(), c, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "a call after the flight ended sends its own request")
	})
}

func TestDedupOffByDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				_, _, _, err := askWith(t.Context(), c, "Say hi", nil)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestDedupDifferentRequestsSendTheirOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))
		cold, warm := &genai.GenerateContentConfig{Temperature: genai.Ptr[float32](0)}, &genai.GenerateContentConfig{Temperature: genai.Ptr[float32](1)}
		calls := []struct {
			prompt string
			config *genai.GenerateContentConfig
		}{{"Say hi", cold}, {"Say hi", cold}, {"Say hi", warm}, {"Say bye", cold}, {"Say hi", nil}}
		var wg sync.WaitGroup
		for _, call := range calls {
			wg.Go(func() {
				_, _, _, err := askWith(t.Context(), c, call.prompt, call.config)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, 4, srv.Hits(flash, geminitest.VerbGenerate), "only the two identical calls share a request")
	})
}

func TestDedupFollowerThatCancelsLeavesTheOthersAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))

		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				text, _, took, err := askWith(t.Context(), c, "Say hi", nil)
				assert.NoError(t, err)
				assert.Equal(t, srv.FullText(flash), text)
				assert.Equal(t, answerTime, took)
			})
		}
		synctest.Wait() // the shared call waits for the model

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, rec, took, err := askWith(ctx, c, "Say hi", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, took, "a follower leaves as soon as its context ends")
		assert.True(t, rec.Deduplicated)
		wg.Wait()
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestDedupLeaderThatCancelsLeavesTheFollowersAnswered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))

		var wg sync.WaitGroup
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			_, rec, took, err := askWith(ctx, c, "Say hi", nil)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Equal(t, time.Second, took)
			assert.False(t, rec.Deduplicated, "it started the shared call")
		})
		synctest.Wait() // the leader's shared call waits for the model
		for range 3 {
			wg.Go(func() {
				text, rec, took, err := askWith(t.Context(), c, "Say hi", nil)
				require.NoError(t, err, "the leader's cancellation does not fail its followers")
				assert.Equal(t, srv.FullText(flash), text)
				assert.True(t, rec.Deduplicated)
				assert.Equal(t, flash, rec.Model)
				assert.Equal(t, answerTime, took)
			})
		}
		wg.Wait()
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestDedupSharesTheError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.InvalidArgument, Latency: answerTime}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() {
				_, _, _, err := askWith(t.Context(), c, "Say hi", nil)
				assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
			})
		}
		wg.Wait()
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

// keyed returns a context carrying the idempotency key.
func keyed(ctx context.Context, key string) context.Context {
	return geminiguard.Idempotent(ctx, key)
}

func TestIdempotencyReplayedKeySendsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

		// The caller gives up before the answer: the call still ends, and
		// its answer is stored.
		ctx, cancel := context.WithTimeout(keyed(t.Context(), "order-42"), time.Second)
		defer cancel()
		_, _, _, err := askWith(ctx, c, "Say hi", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		// Its retry while the call is in flight waits for it.
		text, rec, took, err := askWith(keyed(t.Context(), "order-42"), c, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text)
		assert.Equal(t, answerTime-time.Second, took)
		assert.True(t, rec.Replayed)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))

		// A retry later gets the stored answer, at once.
		time.Sleep(time.Minute)
		text, rec, took, err = askWith(keyed(t.Context(), "order-42"), c, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text)
		assert.Zero(t, took)
		assert.Equal(t, geminiguard.CallRecord{Model: flash, CostKnown: true, Replayed: true}, rec)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "a replayed key sends nothing")
		assert.Equal(t, int64(1), c.Stats().Calls, "replays are not counted")

		_, _, _, err = askWith(keyed(t.Context(), "order-43"), c, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "another key is another call")
	})
}

func TestIdempotencyKeyReusedForADifferentRequestFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		var wg sync.WaitGroup
		wg.Go(func() {
			_, _, _, err := askWith(keyed(t.Context(), "k"), c, "Say hi", nil)
			assert.NoError(t, err)
		})
		synctest.Wait()
		_, _, took, err := askWith(keyed(t.Context(), "k"), c, "Say bye", nil)
		require.ErrorContains(t, err, "geminiguard: the idempotency key (Idempotent) was reused for a different request")
		assert.Zero(t, took, "a key in flight for another request fails at once")
		wg.Wait()

		for _, config := range []*genai.GenerateContentConfig{nil, {Temperature: genai.Ptr[float32](1)}} {
			prompt := "Say bye"
			if config != nil {
				prompt = "Say hi"
			}
			_, _, _, err = askWith(keyed(t.Context(), "k"), c, prompt, config)
			require.ErrorContains(t, err, "reused for a different request")
			assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
		}
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "a reused key sends nothing")
	})
}

func TestIdempotencyAnswerExpiresAfterTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithIdempotencyTTL(time.Minute))
		ctx := keyed(t.Context(), "k")
		for range 2 {
			_, _, _, err := askWith(ctx, c, "Say hi", nil)
			require.NoError(t, err)
		}
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))

		time.Sleep(time.Minute)
		_, rec, _, err := askWith(ctx, c, "Say hi", nil)
		require.NoError(t, err)
		assert.False(t, rec.Replayed)
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "an expired answer is asked again")

		_, _, _, err = askWith(ctx, c, "Say bye", nil)
		require.Error(t, err, "the new answer binds the key again")
	})
}

func TestIdempotencyFailuresAndFallbacksAreNotStored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.InvalidArgument}, {Fault: geminitest.Internal}}})
		fallback := func(context.Context, geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
			return &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{Content: genai.NewContentFromText("busy", genai.RoleModel)}}}, nil
		}
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithFallback(fallback),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
		ctx := keyed(t.Context(), "k")

		_, _, _, err := askWith(ctx, c, "Say hi", nil)
		require.Error(t, err)
		text, rec, _, err := askWith(ctx, c, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, "busy", text)
		assert.True(t, rec.Fallback)
		text, rec, _, err = askWith(ctx, c, "Say hi", nil)
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text)
		assert.False(t, rec.Replayed)
		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbGenerate), "an error and the Fallback's answer are not replayed")
	})
}

func TestIdempotencyWithDedup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))
		var wg sync.WaitGroup
		for _, key := range []string{"a", "b", "", ""} {
			wg.Go(func() {
				_, _, _, err := askWith(keyed(t.Context(), key), c, "Say hi", nil)
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "keyed and unkeyed identical calls share one request")
		_, rec, _, err := askWith(keyed(t.Context(), "b"), c, "Say hi", nil)
		require.NoError(t, err)
		assert.True(t, rec.Replayed)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestIdempotencyTTLMustBePositive(t *testing.T) {
	_, err := newOffline(t, geminiguard.WithIdempotencyTTL(0))
	require.ErrorContains(t, err, "geminiguard: WithIdempotencyTTL(0s): must be positive")
}

func TestDedupPanicReachesTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.Internal}}})
		fallback := func(context.Context, geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
			panic("fallback broke")
		}
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithFallback(fallback),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}), geminiguard.WithDedup(true))
		require.PanicsWithValue(t, "fallback broke", func() { _, _, _, _ = askWith(t.Context(), c, "Say hi", nil) },
			"the shared call's panic goes on in its caller, not in a goroutine that ends the process")
		_, _, _, err := askWith(t.Context(), c, "Say hi", nil)
		require.NoError(t, err, "the next call starts a new shared call")
	})
}

// TestSharedCallsStayInTheirBulkhead: a call of one bulkhead never joins an
// identical call (WithDedup) or a call with the same idempotency key that
// waits in another bulkhead's full queue: it goes through its own bulkhead,
// which has room, and is answered; the queued call alone meets its
// bulkhead's refusal.
func TestSharedCallsStayInTheirBulkhead(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []geminiguard.Option
		ctx  func(context.Context) context.Context
	}{
		{"dedup", []geminiguard.Option{geminiguard.WithDedup(true)}, func(ctx context.Context) context.Context { return ctx }},
		{"idempotency key", nil, func(ctx context.Context) context.Context { return keyed(ctx, "order-42") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
				c := newClient(t, srv, nil, append(tc.opts, geminiguard.WithCascade(flash),
					geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 1, MaxQueue: 1, QueueTimeout: time.Second}),
					geminiguard.WithBulkhead("chat", geminiguard.Bulkhead{MaxConcurrent: 1}))...)

				var wg sync.WaitGroup
				wg.Go(func() { // holds batch's one slot
					_, _, _, err := askWith(feature("batch"), c, "Summarise the logs", nil)
					assert.NoError(t, err)
				})
				synctest.Wait()
				wg.Go(func() { // waits in batch's queue, then is refused
					_, _, _, err := askWith(tc.ctx(feature("batch")), c, "Say hi", nil)
					assert.ErrorIs(t, err, geminiguard.ErrBulkheadFull)
				})
				synctest.Wait()

				text, rec, took, err := askWith(tc.ctx(feature("chat")), c, "Say hi", nil)
				require.NoError(t, err, "chat's bulkhead has room: batch's full queue is not chat's")
				assert.Equal(t, srv.FullText(flash), text)
				assert.Equal(t, flash, rec.Model)
				assert.False(t, rec.Deduplicated)
				assert.False(t, rec.Replayed)
				assert.Equal(t, answerTime, took)
				wg.Wait()
				assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "batch's first call and chat's")
			})
		})
	}
}

// TestSharedCallShortDeadlineGetsTheFallback: in an outage a call with a
// 300 ms deadline gets the Fallback at once alone (its first backoff, 1 s,
// would overrun its deadline); with an idempotency key
// or under WithDedup (or both: the key's call then shares a call of
// WithDedup) it gets the same, at once, though the shared call it started
// goes on backing off for its longer deadline.
func TestSharedCallShortDeadlineGetsTheFallback(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dedup bool
		ctx   func(context.Context) context.Context
	}{
		{"alone", false, func(ctx context.Context) context.Context { return ctx }},
		{"dedup", true, func(ctx context.Context) context.Context { return ctx }},
		{"idempotency key", false, func(ctx context.Context) context.Context { return keyed(ctx, "order-42") }},
		{"idempotency key and dedup", true, func(ctx context.Context) context.Context { return keyed(ctx, "order-42") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(always(flash, geminitest.Step{Fault: geminitest.Overloaded}))
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(tc.dedup),
					geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: time.Second, Jitter: geminiguard.JitterNone}),
					geminiguard.WithFallback(geminiguard.TextFallback("busy")))
				ctx, cancel := context.WithTimeout(tc.ctx(t.Context()), 300*time.Millisecond)
				defer cancel()
				var rec geminiguard.CallRecord
				start := time.Now()
				resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text("Say hi"), nil)
				require.NoError(t, err)
				assert.True(t, geminiguard.IsFallback(resp))
				assert.Equal(t, "busy", resp.Text())
				assert.True(t, rec.Fallback)
				assert.Zero(t, time.Since(start), "at once, as alone")
			})
		})
	}
}

// TestDedupSharedCallStopsWhenNoCallerWaits: a shared call whose every
// caller left stops sending; one with an idempotency key runs to its end,
// so that a retry of the key finds its answer.
func TestDedupSharedCallStopsWhenNoCallerWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(always(flash, geminitest.Step{Fault: geminitest.Overloaded, Latency: time.Second}))
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(true))
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		_, _, took, err := askWith(ctx, c, "Say hi", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 500*time.Millisecond, took)
		time.Sleep(time.Minute)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "no retry for a caller that left")
	})
}

// sameCtx is a caller's context as it is; withKey gives it the idempotency
// key "order-42".
func sameCtx(ctx context.Context) context.Context { return ctx }
func withKey(ctx context.Context) context.Context { return keyed(ctx, "order-42") }

// TestSharedCallJoinedDuringItsBackoffGivesTheFallback: in an outage, a
// call that joins a shared call already backing off past the newcomer's
// deadline gets the Fallback at once, as it would alone (its own backoff
// would overrun its deadline), sending nothing, rather than wait for the
// backoff until its deadline.
func TestSharedCallJoinedDuringItsBackoffGivesTheFallback(t *testing.T) {
	for _, tc := range []struct {
		name          string
		dedup         bool
		first, joiner func(context.Context) context.Context
	}{
		{"dedup", true, sameCtx, sameCtx},
		{"idempotency key", false, withKey, withKey},
		{"idempotency key joining a call of dedup", true, sameCtx, withKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(always(flash, geminitest.Step{Fault: geminitest.Overloaded}))
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(tc.dedup),
					geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: time.Second, Jitter: geminiguard.JitterNone}),
					geminiguard.WithFallback(geminiguard.TextFallback("busy")))
				var wg sync.WaitGroup
				wg.Go(func() { // no deadline: it backs off 1 s after its first attempt
					_, _, _, err := askWith(tc.first(t.Context()), c, "Say hi", nil)
					assert.NoError(t, err)
				})
				time.Sleep(100 * time.Millisecond)

				ctx, cancel := context.WithTimeout(tc.joiner(t.Context()), 300*time.Millisecond)
				defer cancel()
				var rec geminiguard.CallRecord
				start := time.Now()
				resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text("Say hi"), nil)
				if assert.NoError(t, err) { // not require: the first caller must end before the test
					assert.True(t, geminiguard.IsFallback(resp))
					assert.Equal(t, "busy", resp.Text())
				}
				assert.True(t, rec.Fallback)
				assert.Zero(t, time.Since(start), "at once, as alone")
				assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "the newcomer sent nothing")
				wg.Wait()
			})
		})
	}
}

// TestSharedCallQueuedInItsBulkheadRefusesAtTheDeadline: a call whose
// bulkhead is full waits in its queue and, alone, is refused with
// ErrBulkheadFull when its deadline comes first. Sharing its call (under
// WithDedup, with an idempotency key, or both), it gets the same refusal
// at its deadline while the shared call is still queued, not a bare
// context error; and the shared call, which no caller waits for any more,
// leaves the queue rather than send for nobody once the slot frees.
func TestSharedCallQueuedInItsBulkheadRefusesAtTheDeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		dedup bool
		ctx   func(context.Context) context.Context
	}{
		{"alone", false, sameCtx},
		{"dedup", true, sameCtx},
		{"idempotency key", false, withKey},
		{"idempotency key and dedup", true, withKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: flash, Latency: answerTime})
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithDedup(tc.dedup),
					geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 1, MaxQueue: 1, QueueTimeout: time.Minute}))
				var wg sync.WaitGroup
				wg.Go(func() { // holds batch's one slot for answerTime
					_, _, _, err := askWith(feature("batch"), c, "Summarise the logs", nil)
					assert.NoError(t, err)
				})
				synctest.Wait()

				ctx, cancel := context.WithTimeout(tc.ctx(feature("batch")), 300*time.Millisecond)
				defer cancel()
				_, _, took, err := askWith(ctx, c, "Say hi", nil)
				require.ErrorIs(t, err, geminiguard.ErrBulkheadFull, "as alone: refused by its bulkhead")
				assert.Equal(t, 300*time.Millisecond, took)
				st := c.Stats().Bulkheads
				require.Len(t, st, 1)
				assert.Equal(t, int64(1), st[0].Rejected)

				wg.Wait()
				time.Sleep(time.Minute)
				assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "the slot holder's request only: nothing sent for nobody")
			})
		})
	}
}
