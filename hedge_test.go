package geminiguard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// Issue 19: brownouts the project never rehearsed: hedged requests.

func TestHedgeAnswersAndItsLoserIsCancelledAndSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(stallEvery(pro, time.Second, 10, 45*time.Second), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		changes := &stateChanges{}
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()),
			geminiguard.WithJitterSource(seeded()), geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
		warmAtOnce(t, c, askedRec) // pro's answer times are learned: 1s

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "") // pro's 21st request stalls 45s

		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "a second request to pro, the better bet (flash's times are unknown), answers")
		assert.InDelta(t, 3.0, time.Since(start).Seconds(), 0.3,
			"hedged at twice pro's median, answered 1s later; the stalled request cancelled and joined, not waited out")
		require.Len(t, rec.Attempts, 2)
		assert.ErrorContains(t, rec.Attempts[0].Err, "its hedge answered first")
		assert.Equal(t, 22, srv.Total(pro))
		assert.Zero(t, srv.Total(flash))
		assert.Empty(t, changes.get(), "a cancelled loser says nothing about the model")
		st := c.Stats().Models[0]
		assert.Equal(t, geminiguard.StateClosed, st.State)
		assert.Empty(t, st.Failures, "the loser is not counted as a failure")

		_, rec, err = ask(t.Context(), c, "") // and pro goes on answering
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model)
	})
}

// TestHedgeThatLosesItsRaceIsRecordedAsTheLoser: pro's 21st request
// answers in 2.6s, a long answer, hedged to pro at its answers' p95 (1s
// and a bit); the hedge would take 5s, and the original answers first. The
// call's record says which of the two was cancelled: the hedge, its
// original having answered. Before, a losing hedge read "its hedge
// answered first", as a losing original does, and a user reading the
// record took the answer for the hedge's.
func TestHedgeThatLosesItsRaceIsRecordedAsTheLoser(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(proWith21st22nd(geminitest.Step{Latency: 2600 * time.Millisecond}, geminitest.Step{Latency: 5 * time.Second}), geminitest.Model{Name: flash, Latency: 3 * time.Second})
		c := warmHedgingClient(t, srv)

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.InDelta(t, 2.6, time.Since(start).Seconds(), 0.01, "the original answers")
		require.Len(t, rec.Attempts, 2, "the original and its hedge: %+v", rec.Attempts)
		lost := rec.Attempts[0]
		require.Error(t, lost.Err)
		assert.Less(t, lost.Elapsed, 2*time.Second, "the hedge, sent after the original, is the one cancelled")
		assert.ErrorContains(t, lost.Err, "the attempt it hedged answered first")
		assert.NotContains(t, lost.Err.Error(), "its hedge answered first")
		assert.Equal(t, 22, srv.Total(pro))
	})
}

// TestRequestSentInACutsPlaceIsRecordedApartFromAHedge: pro answers 20
// calls in 1s, then stalls 45s on every request; a user calls eight times
// more, one after the other, and flash answers in 0.8s. The hedge budget
// (three a minute and 5% of the calls) pays for six hedges; the last two
// stalls are sent on at pro's learned cut as requests that keep the
// original, in the cut's place, which the cut's budget pays. A call's
// record tells them apart. Before, all eight read "its hedge answered
// first", and a user, or a test of the hedge budget, counted the cut's
// requests as hedges.
func TestRequestSentInACutsPlaceIsRecordedApartFromAHedge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, Decide: func(_ geminitest.Request, i int) geminitest.Step {
			if i >= 20 {
				return geminitest.Step{Latency: 45 * time.Second}
			}
			return geminitest.Step{}
		}}, geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := hedgingClient(t, srv)
		for range 20 {
			_, err := askedRec(t.Context(), c)
			require.NoError(t, err)
		}

		var lost []string
		for range 8 {
			rec, err := askedRec(t.Context(), c)
			require.NoError(t, err)
			require.Len(t, rec.Attempts, 2)
			assert.Equal(t, flash, rec.Model)
			require.Error(t, rec.Attempts[0].Err)
			lost = append(lost, rec.Attempts[0].Err.Error())
		}

		for i, e := range lost {
			if i < 6 {
				assert.Contains(t, e, "its hedge answered first", "call %d: a hedge", i)
			} else {
				assert.Contains(t, e, "the request sent in its cut's place answered first", "call %d: the cut's request", i)
			}
		}
	})
}

func TestHedgeBudgetHoldsUnderAStorm(t *testing.T) {
	// After 20 answers every request of pro stalls: every call is late.
	assertHedgeBudgetHolds(t, geminitest.Step{Latency: 45 * time.Second}, askedRec)
}

// assertHedgeBudgetHolds: pro answers its first 20 requests, then answers
// each with stall, flash answers in 0.8s; on a hedging Client, 20 calls
// through call and then 400 more send hedges, at most 5% more requests
// plus 3 a minute.
func assertHedgeBudgetHolds(t *testing.T, stall geminitest.Step, call func(context.Context, *geminiguard.Client) (geminiguard.CallRecord, error)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, Decide: func(_ geminitest.Request, i int) geminitest.Step {
			if i >= 20 {
				return stall
			}
			return geminitest.Step{}
		}}, geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
		for range 20 {
			_, err := call(t.Context(), c)
			require.NoError(t, err)
		}

		const calls = 400
		start := time.Now()
		hedges := 0
		for range calls {
			rec, err := call(t.Context(), c)
			require.NoError(t, err)
			hedges += hedgesIn(rec)
		}
		minutes := time.Since(start).Minutes()
		assert.Positive(t, hedges)
		assert.LessOrEqual(t, float64(hedges), 0.05*(calls+20)+3*(minutes+1),
			"at most 5%% more requests, plus 3 a minute (%d hedges in %.1f minutes)", hedges, minutes)
	})
}

// TestHedgesOfALatencyShiftStayWithinTheBudget: hedging is on by default.
// A model that slows from 1s to 2.5s on every request is late on its
// first slow answers, until it learned them: they are hedged (to itself:
// the cascade has no other model), within the budget of 5% more requests
// plus 3 a minute, and every call is answered.
func TestHedgesOfALatencyShiftStayWithinTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithTimeouts(30*time.Second, time.Minute))

		start := time.Now()
		_, failed := callBackToBack(t.Context(), c, 16, 30*time.Second)
		assert.Zero(t, failed)
		srv.SetModel(geminitest.Model{Name: flash, Latency: 2500 * time.Millisecond})
		_, failed = callBackToBack(t.Context(), c, 16, 60*time.Second)
		assert.Zero(t, failed)

		calls := int(c.Stats().Calls)
		hedges := srv.Hits(flash, geminitest.VerbGenerate) - calls
		minutes := time.Since(start).Minutes()
		assert.Positive(t, hedges, "the shift's first slow answers are hedged")
		assert.LessOrEqual(t, float64(hedges), 0.05*float64(calls)+3*(minutes+1),
			"at most 5%% more requests, plus 3 a minute (%d hedges over %d calls in %.1f minutes)", hedges, calls, minutes)
	})
}

// TestCallsQueuedInTheirBulkheadAreNotHedged: a bulkhead with calls queued
// runs as many as its feature allows, and a hedge would be one request
// more: pro's stalls (its 21st and 31st requests) are cut, not hedged,
// while 20 calls share two slots; once nothing is queued, the next stall
// (its 41st) is hedged.
func TestCallsQueuedInTheirBulkheadAreNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(stallEvery(pro, time.Second, 10, 45*time.Second), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 2, MaxQueue: 64, QueueTimeout: 5 * time.Minute}))
		ctx := geminiguard.InBulkhead(t.Context(), "batch")
		for range 20 {
			_, _, err := ask(ctx, c, "")
			require.NoError(t, err)
		}

		var mu sync.Mutex
		var wg sync.WaitGroup
		queuedHedges := 0
		for range 20 {
			wg.Go(func() {
				_, rec, err := ask(ctx, c, "")
				assert.NoError(t, err)
				mu.Lock()
				queuedHedges += hedgesIn(rec)
				mu.Unlock()
			})
		}
		wg.Wait()
		assert.Zero(t, queuedHedges, "calls queued behind the stalls: no hedge")

		hedges := 0
		for range 10 {
			_, rec, err := ask(ctx, c, "")
			require.NoError(t, err)
			hedges += hedgesIn(rec)
		}
		assert.Equal(t, 1, hedges, "one call at a time: the stall is hedged")
	})
}

// TestHedgeBudgetGrowsWithTheCalls: the hedge budget is funded by the
// first attempts (5% of them), not only its floor of three a minute. pro
// stalls one request in 25 (4%) after its first 20; four calls a second
// for 100s: every stall is hedged, and the hedge to pro answers.
func TestHedgeBudgetGrowsWithTheCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(stallEvery(pro, time.Second, 25, 45*time.Second), geminitest.Model{Name: flash, Latency: 2 * time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))

		var mu sync.Mutex
		var wg sync.WaitGroup
		hedges, slowest := 0, time.Duration(0)
		for range 400 {
			wg.Go(func() {
				start := time.Now()
				_, rec, err := ask(t.Context(), c, "")
				assert.NoError(t, err)
				mu.Lock()
				defer mu.Unlock()
				hedges += hedgesIn(rec)
				slowest = max(slowest, time.Since(start))
			})
			time.Sleep(250 * time.Millisecond)
		}
		wg.Wait()

		assert.GreaterOrEqual(t, hedges, 14, "the 15 or so stalls after the first 20 requests are hedged (3 a minute before)")
		assert.Less(t, slowest, 5*time.Second, "no stall waited out")
	})
}

func TestUniformlySlowModelIsNeitherHedgedNorCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 40 * time.Second}, geminitest.Model{Name: flash, Latency: 40 * time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
		const calls = 60
		for range calls {
			start := time.Now()
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			require.Len(t, rec.Attempts, 1)
			require.Equal(t, 40*time.Second, time.Since(start))
		}
		assert.Equal(t, calls, srv.Total(pro), "one request a call")
		assert.Zero(t, srv.Total(flash))
	})
}

// openedForAHedgedProbe returns a Client with hedging on whose primary's
// breaker has just let its open period pass: pro answered 20 calls in 1s
// (its times learned), then failed five requests (its breaker opened); its
// next request, the probe, is stall, and then it answers again. flash
// answers in 0.8s. send makes one call.
func openedForAHedgedProbe(t *testing.T, stall geminitest.Step, send func(*geminiguard.Client) (geminiguard.CallRecord, error)) (*geminitest.Server, *geminiguard.Client, *stateChanges) {
	t.Helper()
	srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second,
		Decide: func(_ geminitest.Request, i int) geminitest.Step {
			switch {
			case i >= 20 && i < 25:
				return geminitest.Step{Fault: geminitest.Overloaded, Latency: 10 * time.Millisecond}
			case i == 25:
				return stall
			}
			return geminitest.Step{}
		}}, geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
	changes := &stateChanges{}
	c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()),
		geminiguard.WithJitterSource(seeded()), geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}),
		geminiguard.WithBreaker(geminiguard.BreakerSettings{DeadAfter: -1}))
	for range 20 { // pro's answer (or first-chunk) times are learned: 1s
		rec, err := send(c)
		require.NoError(t, err)
		require.Equal(t, pro, rec.Model)
	}
	for srv.Total(pro) < 25 { // its failures open its breaker
		_, err := send(c)
		require.NoError(t, err)
	}
	require.Equal(t, []string{pro + ":open"}, changes.get())
	time.Sleep(2 * time.Second) // MinOpenFor
	return srv, c, changes
}

func TestHedgedProbeThatLosesFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c, changes := openedForAHedgedProbe(t, geminitest.Step{Latency: 45 * time.Second}, func(c *geminiguard.Client) (geminiguard.CallRecord, error) {
			_, rec, err := ask(t.Context(), c, "")
			return rec, err
		})

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "") // the probe stalls: hedged to flash
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model, "the hedge to flash answers")
		assert.Less(t, time.Since(start), 5*time.Second, "the stalled probe is not waited out")
		assert.ErrorContains(t, rec.Attempts[0].Err, "its hedge answered first")

		_, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "the lost probe's slot was freed: the next call probes pro, which answers")
		assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State)
		assert.Equal(t, []string{pro + ":open", pro + ":half-open", pro + ":closed"}, changes.get())
	})
}

func TestFailedHedgeStillCutsItsStalledOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// pro answers in 1s; its 21st request stalls 45s, and the 22nd (the
		// hedge, sent to pro: flash's times are unknown) fails at once.
		srv := geminitest.New(proWith21st22nd(geminitest.Step{Latency: 45 * time.Second}, geminitest.Step{Fault: geminitest.Overloaded}), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := warmHedgingClient(t, srv)

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model, "the stalled original is cut at twice pro's median, flash answers")
		assert.InDelta(t, 2.8, time.Since(start).Seconds(), 0.3, "the failed hedge leaves the cut in place: not a 45s wait")
		assert.Equal(t, 22, srv.Total(pro))
		assert.Equal(t, 1, srv.Total(flash))
	})
}

// streamedRec ranges a stream as streamed does, recording the call.
func streamedRec(ctx context.Context, c *geminiguard.Client) (string, int, geminiguard.CallRecord, error) {
	var rec geminiguard.CallRecord
	text, chunks, err := streamed(geminiguard.RecordCall(ctx, &rec), c, "")
	return text, chunks, rec, err
}

// hedgesIn counts the races of rec: the attempts cancelled because the
// other request of their race answered first (an original its hedge beat,
// or a hedge its original beat).
func hedgesIn(rec geminiguard.CallRecord) int {
	n := 0
	for _, a := range rec.Attempts {
		if a.Err != nil && (strings.Contains(a.Err.Error(), "its hedge answered first") || strings.Contains(a.Err.Error(), "the attempt it hedged answered first")) {
			n++
		}
	}
	return n
}

func TestStreamHedgeAnswersBeforeTheFirstChunk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// pro's 21st stream sends its headers, then stalls 45s before its
		// first event.
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, ChunkInterval: 100 * time.Millisecond,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if i == 20 {
					return geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: 45 * time.Second}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		changes := &stateChanges{}
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()),
			geminiguard.WithJitterSource(seeded()), geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
		warmAtOnce(t, c, streamedOnce) // pro's first chunks are learned: 1s

		start := time.Now()
		text, chunks, rec, err := streamedRec(t.Context(), c)

		require.NoError(t, err)
		assert.Equal(t, srv.FullText(pro), text, "one whole answer, no chunks of the other stream mixed in")
		assert.Equal(t, 4, chunks)
		assert.Equal(t, pro, rec.Model, "a second stream to pro, the better bet (flash's times are unknown), answers")
		assert.InDelta(t, 3.3, time.Since(start).Seconds(), 0.3,
			"hedged at twice pro's median first chunk, which came 1s later; the stalled stream cancelled and joined, not waited out")
		require.Len(t, rec.Attempts, 2)
		assert.Equal(t, 1, hedgesIn(rec))
		assert.Equal(t, 22, srv.Total(pro))
		assert.Zero(t, srv.Total(flash))
		assert.Empty(t, changes.get(), "a cancelled loser says nothing about the model")
		st := c.Stats().Models[0]
		assert.Equal(t, geminiguard.StateClosed, st.State)
		assert.Empty(t, st.Failures, "the loser is not counted as a failure")

		_, _, rec, err = streamedRec(t.Context(), c) // and pro goes on answering
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model)
		assert.Equal(t, 23, srv.Total(pro))
	})
}

func TestStreamHedgedProbeThatLosesFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stall := geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: 45 * time.Second} // before its first event
		srv, c, changes := openedForAHedgedProbe(t, stall, func(c *geminiguard.Client) (geminiguard.CallRecord, error) {
			_, _, rec, err := streamedRec(t.Context(), c)
			return rec, err
		})

		start := time.Now()
		text, _, rec, err := streamedRec(t.Context(), c) // the probe stalls: hedged to flash
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text)
		assert.Equal(t, flash, rec.Model, "the hedge to flash answers")
		assert.Less(t, time.Since(start), 5*time.Second, "the stalled probe is not waited out")
		assert.Equal(t, 1, hedgesIn(rec))

		_, _, rec, err = streamedRec(t.Context(), c)
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "the lost probe's slot was freed: the next call probes pro, which answers")
		assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State)
		assert.Equal(t, []string{pro + ":open", pro + ":half-open", pro + ":closed"}, changes.get())
	})
}

func TestStreamThatDeliveredAChunkIsNotHedged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// pro's 21st stream is cut after its first event; the resume's
		// request stalls 45s before its first event.
		srv := geminitest.New(proWith21st22nd(geminitest.Step{Fault: geminitest.StreamCutBetween, CutAfter: 1}, geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: 45 * time.Second}), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}), geminiguard.WithStreamResume(true))
		for range 20 { // pro's first chunks are learned: 1s
			_, _, err := streamed(t.Context(), c, "")
			require.NoError(t, err)
		}

		_, _, rec, err := streamedRec(t.Context(), c)

		require.NoError(t, err)
		assert.Equal(t, 1, rec.Resumes)
		assert.Zero(t, hedgesIn(rec), "a chunk was yielded: the resume's stall is cut, never hedged")
		assert.Equal(t, 22, srv.Total(pro), "no second request to pro beside the stalled resume")
	})
}

func TestStreamHedgeBudgetHoldsUnderAStorm(t *testing.T) {
	// After 20 answers every stream of pro stalls before its first event.
	assertHedgeBudgetHolds(t, geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: 45 * time.Second}, streamedOnce)
}

func TestUniformlySlowStreamIsNeitherHedgedNorCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 40 * time.Second}, geminitest.Model{Name: flash, Latency: 40 * time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}), geminiguard.WithStreamDeadlines(50*time.Second, 20*time.Second))
		const calls = 60
		for range calls {
			start := time.Now()
			_, _, rec, err := streamedRec(t.Context(), c)
			require.NoError(t, err)
			require.Len(t, rec.Attempts, 1)
			require.Equal(t, 40*time.Second, time.Since(start))
		}
		assert.Equal(t, calls, srv.Total(pro), "one request a call")
		assert.Zero(t, srv.Total(flash))
	})
}

func TestStreamHedgeAndOriginalSendingTogetherYieldOneAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// pro's first chunks take 1s: its hedge delay is twice the middle of
		// that latency bucket, 2.01326592s. Its 21st stream sends its first
		// chunk 1s after that: at the very instant the hedge's does.
		const hedgeDelay = 2013265920 * time.Nanosecond
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, ChunkInterval: 100 * time.Millisecond,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if i == 20 {
					return geminitest.Step{Latency: hedgeDelay + time.Second}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		changes := &stateChanges{}
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()),
			geminiguard.WithJitterSource(seeded()), geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
		warmAtOnce(t, c, streamedOnce)

		start := time.Now()
		text, chunks, rec, err := streamedRec(t.Context(), c)

		require.NoError(t, err)
		assert.Equal(t, srv.FullText(pro), text, "one stream read, the other closed: no chunk twice")
		assert.Equal(t, 4, chunks)
		assert.Equal(t, pro, rec.Model)
		assert.Equal(t, hedgeDelay+time.Second+300*time.Millisecond, time.Since(start))
		assert.Equal(t, 22, srv.Total(pro))
		assert.Empty(t, changes.get())
		assert.Empty(t, c.Stats().Models[0].Failures, "the loser, whose first chunk came too, is not a failure")
	})
}

func TestFailedStreamHedgeStillCutsItsStalledOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// pro's first chunks take 1s; its 21st stream stalls 45s before its
		// first event, and the 22nd (the hedge, sent to pro: flash's times
		// are unknown) fails at once.
		srv := geminitest.New(proWith21st22nd(geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: 45 * time.Second}, geminitest.Step{Fault: geminitest.Overloaded}), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
		warmAtOnce(t, c, streamedOnce)

		start := time.Now()
		text, _, rec, err := streamedRec(t.Context(), c)

		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text)
		assert.Equal(t, flash, rec.Model, "the stalled original is cut at twice pro's median first chunk, flash answers")
		assert.InDelta(t, 2.8, time.Since(start).Seconds(), 0.3, "the failed hedge leaves the cut in place: not a 45s wait")
		assert.Equal(t, 22, srv.Total(pro))
		assert.Equal(t, 1, srv.Total(flash))
	})
}

// warmHedgingClient returns a hedging Client of srv's pro and flash whose
// 20 first calls pro answered: its answer times are learned.
// proWith21st22nd returns pro answering in 1s, but its 21st request as
// twentyFirst says and its 22nd (a hedge, or a resume) as twentySecond.
func proWith21st22nd(twentyFirst, twentySecond geminitest.Step) geminitest.Model {
	return geminitest.Model{Name: pro, Latency: time.Second, Decide: func(_ geminitest.Request, i int) geminitest.Step {
		switch i {
		case 20:
			return twentyFirst
		case 21:
			return twentySecond
		}
		return geminitest.Step{}
	}}
}

func warmHedgingClient(t *testing.T, srv *geminitest.Server) *geminiguard.Client {
	t.Helper()
	c := hedgingClient(t, srv)
	warmAtOnce(t, c, askedRec)
	return c
}

// hedgingClient returns a Client of srv's pro and flash, hedging.
func hedgingClient(t *testing.T, srv *geminitest.Server) *geminiguard.Client {
	t.Helper()
	return newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
		geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
}

// warmAtOnce makes 20 calls to c at once through send, as twenty users
// would, each answered by pro: its answer (or first-chunk) times are
// learned, and its last seconds hold twenty requests answered on time, the
// evidence a hedge to pro needs (a stall of a model asked once a second is
// as likely a brownout's first as a rare one's).
func warmAtOnce(t *testing.T, c *geminiguard.Client, send func(context.Context, *geminiguard.Client) (geminiguard.CallRecord, error)) {
	t.Helper()
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			rec, err := send(t.Context(), c)
			assert.NoError(t, err)
			assert.Equal(t, pro, rec.Model)
		})
	}
	wg.Wait()
	require.False(t, t.Failed(), "pro answers the 20 calls")
}

// warmInTurn makes n calls to c one after another, as one user would,
// each answered by pro.
func warmInTurn(t *testing.T, c *geminiguard.Client, n int) {
	t.Helper()
	for range n {
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		require.Equal(t, pro, rec.Model)
	}
}

// askedRec makes one unary call, returning its record.
func askedRec(ctx context.Context, c *geminiguard.Client) (geminiguard.CallRecord, error) {
	_, rec, err := ask(ctx, c, "")
	return rec, err
}

// streamedOnce makes one streamed call, read to its end, returning its
// record.
func streamedOnce(ctx context.Context, c *geminiguard.Client) (geminiguard.CallRecord, error) {
	_, _, rec, err := streamedRec(ctx, c)
	return rec, err
}

// stallingTwice returns the fake and a warm hedging Client (warmAtOnce) of
// pro, which answers its first 20 requests in 1s and stalls the next two
// 45s, then flash (3s).
func stallingTwice(t *testing.T) (*geminitest.Server, *geminiguard.Client) {
	srv := stallingTwiceServer()
	return srv, warmHedgingClient(t, srv)
}

// stallingTwiceServer returns stallingTwice's fake.
func stallingTwiceServer() *geminitest.Server {
	return geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, Decide: func(_ geminitest.Request, i int) geminitest.Step {
		if i == 20 || i == 21 {
			return geminitest.Step{Latency: 45 * time.Second}
		}
		return geminitest.Step{}
	}}, geminitest.Model{Name: flash, Latency: 3 * time.Second})
}

// TestHedgeOfAStallOfAModelAskedOnceASecondGoesToTheNext: one user calls
// pro back to back; pro answers 20 calls in 1s, then stalls its next two
// requests 45s: a brownout's first stalls. Its window holds twenty
// answers, none slow, but its last seconds three or four: with the
// attempt hedged, late already, one request in five is slow, and a second
// request to pro is no better a bet than the first. The hedge goes to
// flash (3s); before, it went to pro, stalled too, and the call waited for
// both cuts, then flash.
func TestHedgeOfAStallOfAModelAskedOnceASecondGoesToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := stallingTwiceServer()
		c := hedgingClient(t, srv)
		warmInTurn(t, c, 20)

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		assert.Equal(t, 21, srv.Total(pro), "no second request to pro")
		assert.InDelta(t, 5.0, time.Since(start).Seconds(), 0.1, "hedged at twice pro's median (2s), answered by flash 3s later: not after both cuts")
	})
}

// TestHedgeThatStallsTooIsCutWithItsOriginal: pro answers 20 calls at once
// in 1s, then stalls its next two requests 45s (the original and its
// hedge, sent to pro, which answers sooner than flash's 3s); both are cut
// at the hedge's learned deadline and flash answers: not a 45s wait.
func TestHedgeThatStallsTooIsCutWithItsOriginal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, c := stallingTwice(t)

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, 22, srv.Total(pro), "the original and its hedge")
		assert.Equal(t, flash, rec.Model, "both cut, flash answers")
		assert.Less(t, time.Since(start), 10*time.Second, "cut at the hedge's deadline, then flash's 3s")
	})
}

// TestHedgeCutWithItsOriginalIsRecordedAsCut: as above, the call's record
// says what happened to each of pro's two requests: both were abandoned at
// their learned deadline. Before, the hedge's read "its hedge answered
// first", and its stall was not counted in pro's latencies.
func TestHedgeCutWithItsOriginalIsRecordedAsCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, c := stallingTwice(t)

		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		require.Len(t, rec.Attempts, 3, "pro's two requests, then flash's: %+v", rec.Attempts)
		for _, a := range rec.Attempts[:2] {
			assert.Equal(t, pro, a.Model)
			require.Error(t, a.Err)
			assert.Contains(t, a.Err.Error(), "abandoned", "cut at its learned deadline")
			assert.NotContains(t, a.Err.Error(), "hedge answered first")
		}
	})
}

// TestHedgeOfAStallingModelGoesToTheNext: pro stalls one request in four
// after its first 20, more than the 5% a hedge quantile allows for; a
// second request to it would stall as often, so once its stalls are known
// its hedges go to flash, slower but sure.
func TestHedgeOfAStallingModelGoesToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		twice := callsSendingProTwice(t, 4, 3*time.Second, 40, 0)
		assert.LessOrEqual(t, twice, 2, "only the first stalls, before they are known, are hedged to pro (%d)", twice)
	})
}

// callsSendingProTwice plays 20 calls, then calls more, each after gap, on
// pro (answering in 1s, stalling 45s on every nth request after its first
// 20) then flash (answering in flashLatency), hedging within a budget of
// 1, and returns how many of the later calls sent pro a second request.
func callsSendingProTwice(t *testing.T, n int, flashLatency time.Duration, calls int, gap time.Duration) int {
	srv := geminitest.New(stallEvery(pro, time.Second, n, 45*time.Second), geminitest.Model{Name: flash, Latency: flashLatency})
	c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
		geminiguard.WithHedging(geminiguard.HedgePolicy{On: true, Budget: 1}))
	for range 20 {
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
	}
	twice := 0
	for range calls {
		time.Sleep(gap)
		before := srv.Total(pro)
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		if srv.Total(pro)-before > 1 {
			twice++
		}
	}
	return twice
}

// TestHedgeOfAQuietModelsStallGoesToTheNext: as above, pro stalls one
// request in three, but a call comes every 15s: the throttle's window of
// 30s holds two requests, the last stall's cut long out of it. A window of
// two requests, neither slow, says little of how often pro stalls; read as
// a rate of none, every stall was hedged to pro, a third of those hedges
// stalled too, and those calls waited for both cuts. The bet for a second
// request to pro now needs a window of ten requests, as the throttle's
// rules do: two clean requests are no proof.
func TestHedgeOfAQuietModelsStallGoesToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		assert.Zero(t, callsSendingProTwice(t, 3, 1500*time.Millisecond, 30, 15*time.Second), "pro's stalls are hedged to flash")
	})
}

// stalledCallTimes plays 20 calls and then 60 on pro (answering in 1s,
// stalling 45s on one request in five after its first 20) then flash
// (answering in flashLatency), and returns how long each call flash
// answered took.
func stalledCallTimes(t *testing.T, flashLatency time.Duration) []time.Duration {
	srv := geminitest.New(stallEvery(pro, time.Second, 5, 45*time.Second), geminitest.Model{Name: flash, Latency: flashLatency})
	c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()))
	for range 20 {
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
	}
	var stalled []time.Duration
	for range 60 {
		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		if rec.Model == flash {
			stalled = append(stalled, time.Since(start))
		}
	}
	require.Len(t, stalled, 12, "every fifth request stalls: flash answers those calls (its first stall too, pro asked once a second)")
	return stalled
}

// TestStallOfAModelThatStallsOftenIsHedgedAtItsAnswersP95: pro stalls one
// request in five after its first 20. Its stalls are more than the 5% a
// p95 leaves out, so the p95 of its answers (1s) tells when a request of
// it is late, not twice its median: once the stalls are known, they are
// hedged there, to flash (each would cost a request to flash at the cut
// anyway), as far as the hedge budget goes.
func TestStallOfAModelThatStallsOftenIsHedgedAtItsAnswersP95(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalled := stalledCallTimes(t, 800*time.Millisecond)
		hedged := 0
		for _, d := range stalled {
			if d < 2*time.Second {
				hedged++ // hedged at its p95 (1s and a bit, a bucket's end), answered 0.8s later
			}
			assert.Less(t, d, 2900*time.Millisecond, "the others are cut at twice its median, as before")
		}
		assert.GreaterOrEqual(t, hedged, 5, "within the hedge budget (5%% of the calls and 3 a minute), stalls are hedged at the answers' p95: %v", stalled)
	})
}

// TestHedgeInPlaceOfACutIsPaidByTheCutBudget: as above, but flash answers
// in 1.5s. A stall hedged at pro's p95 (1s and a bit) is answered by flash
// after pro's cut (2s): the stall would have cost that request at the cut
// anyway, so the hedge is paid by the cut budget and its hedge budget
// credit given back. Every stall is hedged, where the hedge budget alone
// (5% of the calls and 3 a minute) hedged 7 of them and cut the others at
// 2s. (The first two, before the stalls are more than 5% of pro's record,
// are hedged at the cut, to flash: pro, asked once a second, is no better
// a bet.)
func TestHedgeInPlaceOfACutIsPaidByTheCutBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalled := stalledCallTimes(t, 1500*time.Millisecond)
		for _, d := range stalled[:2] {
			assert.InDelta(t, 3.5, d.Seconds(), 0.1, "the first two stalls, before pro's stalls are known, are hedged at twice its median, its cut: %v", stalled)
		}
		for _, d := range stalled[2:] {
			assert.Less(t, d, 3*time.Second, "hedged at pro's p95, answered 1.5s later, not cut at 2s: %v", stalled)
		}
	})
}

// panicOnPost is a transport whose POST number n (from 1) panics after
// wait, as a broken SDK or middleware would.
type panicOnPost struct {
	base http.RoundTripper
	n    int64
	wait time.Duration
	seen atomic.Int64
}

func (p *panicOnPost) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && p.seen.Add(1) == p.n {
		time.Sleep(p.wait)
		panic("the transport")
	}
	return p.base.RoundTrip(req)
}

// TestHedgedRequestPanicReachesTheCallerOnceBothAreJoined: pro answers 20
// calls at once in 1s; on the 21st call, one of the two requests panics
// while the other is out: the hedge as it is sent (the original stalls
// 45s), or the original after 2.5s (the hedge, sent at 2s, is then out
// until 3s). The panic reaches the caller once the other request is
// cancelled and joined (goleak: no goroutine outlives the call), and the
// Client goes on answering and hedging (20 calls at once, two of whose
// requests stall, each hedged to pro): nothing of the two admissions is
// left held.
func TestHedgedRequestPanicReachesTheCallerOnceBothAreJoined(t *testing.T) {
	for _, tc := range []struct {
		name  string
		post  int64
		wait  time.Duration
		after float64
	}{
		{"the hedge", 22, 0, 2},
		{"the original", 21, 2500 * time.Millisecond, 2.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(stallEvery(pro, time.Second, 10, 45*time.Second), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
				tr := &panicOnPost{base: srv.Transport(), n: tc.post, wait: tc.wait}
				c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
					geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}), geminiguard.WithHTTPClient(&http.Client{Transport: tr}))
				warmAtOnce(t, c, askedRec)

				start := time.Now()
				p := recovered(func() { _, _, _ = ask(t.Context(), c, "") })

				assert.Equal(t, "the transport", p, "the panic reaches the caller")
				assert.InDelta(t, tc.after, time.Since(start).Seconds(), 0.1, "raised once the other request is cancelled and joined, not waited out")
				warmAtOnce(t, c, askedRec)
				assert.Equal(t, 43, srv.Total(pro), "the 21st call's request that was sent, the 20 calls and the hedges of two stalls among them, to pro")
				st := c.Stats().Models[0]
				assert.Equal(t, geminiguard.StateClosed, st.State)
			})
		})
	}
}

// A Client's hedge delays share one timer (hedgeClock): a delay that ends
// before the one the timer is armed for rearms it, so each attempt is
// hedged at its own delay. A long request (no output budget, 4s) and a
// short one (an output budget: another size class, 1s) stall while both
// are out: the short one, sent a second later, is hedged first, 2s after
// it started; the long one 8s after it started.
func TestConcurrentAttemptsAreEachHedgedAtTheirOwnDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var seen sync.Map // prompts sent: each stalls the first time only
		srv := geminitest.New(geminitest.Model{Name: pro, Decide: func(r geminitest.Request, _ int) geminitest.Step {
			prompt := r.Contents[0].Parts[0].Text
			if _, again := seen.LoadOrStore(prompt, true); !again && strings.HasPrefix(prompt, "stall") {
				return geminitest.Step{Latency: 45 * time.Second}
			}
			if strings.Contains(string(r.Body), "maxOutputTokens") {
				return geminitest.Step{Latency: time.Second}
			}
			return geminitest.Step{Latency: 4 * time.Second}
		}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro), geminiguard.WithJitterSource(seeded()))
		short := &genai.GenerateContentConfig{MaxOutputTokens: 100}
		call := func(prompt string, cfg *genai.GenerateContentConfig) (time.Duration, geminiguard.CallRecord) {
			var rec geminiguard.CallRecord
			start := time.Now()
			_, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text(prompt), cfg)
			require.NoError(t, err)
			return time.Since(start), rec
		}
		for i := range 20 { // both classes' answer times are learned
			call(fmt.Sprint("long ", i), nil)
			call(fmt.Sprint("short ", i), short)
		}
		time.Sleep(10 * time.Second) // past every delay of theirs: the clock's timer is not armed

		var long, shortTook time.Duration
		var longRec, shortRec geminiguard.CallRecord
		var wg sync.WaitGroup
		wg.Go(func() { long, longRec = call("stall long", nil) })
		time.Sleep(time.Second)
		shortTook, shortRec = call("stall short", short)
		wg.Wait()

		assert.Len(t, shortRec.Attempts, 2, "the short request is hedged")
		assert.InDelta(t, 3.0, shortTook.Seconds(), 0.3, "hedged at twice its median (2s), answered 1s later: not at the long one's delay")
		assert.Len(t, longRec.Attempts, 2, "the long request is hedged")
		assert.InDelta(t, 12.0, long.Seconds(), 0.6, "hedged at twice its median (8s), answered 4s later")
		assert.Equal(t, 40+4, srv.Total(pro))
	})
}

// TestHedgeOfABrownoutsFirstStallsGoesToTheNext: ten users call pro back
// to back for 30s (10 calls a second), then pro stalls one request in
// four. The throttle's window holds 300 answers of the healthy spell, so
// its share of stalls crosses the 5% a hedge quantile allows for only
// after 15 of them; before, every stall until then was hedged to pro
// (faster than flash, a second request to it a bet for its median), a
// quarter of those hedges stalled too, and those calls waited for both
// cuts: over 40 runs, 11-15 calls sent pro a second request and 2-5
// waited for both cuts. The last seconds' share of stalls says at once
// that a second request to pro stalls as often: 4-5 and 1-2 (100 runs
// beside two busy CPU loops; which requests stall depends on the order
// the users' requests reach the fake).
func TestHedgeOfABrownoutsFirstStallsGoesToTheNext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second,
			Decide: func(_ geminitest.Request, i int) geminitest.Step {
				if time.Since(start) >= 30*time.Second && i%4 == 0 {
					return geminitest.Step{Latency: 45 * time.Second}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 1500 * time.Millisecond})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true, Budget: 1}))

		twice := 0   // calls of the brownout that sent pro a second request
		bothCut := 0 // calls that waited for pro's two requests to be cut
		for _, u := range usersCalling(t, c, 10, start, 40*time.Second, 0) {
			if u.began < 30*time.Second {
				continue
			}
			n := 0
			for _, a := range u.rec.Attempts {
				if a.Model == pro && !a.Skipped {
					n++
				}
			}
			if n > 1 {
				twice++
			}
			if u.took > 5*time.Second {
				bothCut++
			}
		}

		assert.LessOrEqual(t, twice, 7, "only the first stalls of the brownout are hedged to pro (%d calls)", twice)
		assert.LessOrEqual(t, bothCut, 2, "only the stalls hedged to pro before any of them was cut wait for both cuts (%d calls)", bothCut)
	})
}

// TestLongAnswerPastTheCutIsKeptWhenTheHedgeBudgetIsSpent: one call in
// twenty-five asks for a long answer (3.5s on pro, 3s on flash; the others
// 1s and 0.8s), eight users back to back, and the hedge budget is 1% of the
// calls: pro's long answers, past its learned cut (2s), are more than the
// budget hedges. Before, the hedges the budget refused were cuts: the long
// answer thrown away and written again by flash, 5s into the call. The
// request the cut would send is now sent as a hedge at the cut, which keeps
// the original: pro's long answer comes first, at 3.5s, on every call.
func TestLongAnswerPastTheCutIsKeptWhenTheHedgeBudgetIsSpent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answer := func(short, long time.Duration) func(geminitest.Request, int) geminitest.Step {
			return func(r geminitest.Request, _ int) geminitest.Step {
				if strings.Contains(r.Contents[0].Parts[0].Text, "long") {
					return geminitest.Step{Latency: long}
				}
				return geminitest.Step{Latency: short}
			}
		}
		srv := geminitest.New(geminitest.Model{Name: pro, Decide: answer(time.Second, 3500*time.Millisecond)},
			geminitest.Model{Name: flash, Decide: answer(800*time.Millisecond, 3*time.Second)})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
			geminiguard.WithHedging(geminiguard.HedgePolicy{On: true, Budget: 0.01}))
		for range 20 { // flash's answer times are learned too: a hedge goes to it
			_, _, err := ask(t.Context(), c, flash)
			require.NoError(t, err)
		}

		var mu sync.Mutex
		var users sync.WaitGroup
		longCalls, byPro, slowest := 0, 0, time.Duration(0)
		for u := range 8 {
			users.Go(func() {
				for i := range 300 {
					prompt := "Say hi"
					if (u+i)%25 == 24 {
						prompt = "Say hi, long"
					}
					start := time.Now()
					var rec geminiguard.CallRecord
					_, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text(prompt), nil)
					assert.NoError(t, err)
					if prompt == "Say hi" || i < 25 { // pro's answer times are learned from its first calls
						continue
					}
					mu.Lock()
					longCalls++
					if rec.Model == pro {
						byPro++
					}
					slowest = max(slowest, time.Since(start))
					mu.Unlock()
				}
			})
		}
		users.Wait()

		require.Positive(t, longCalls)
		assert.Equal(t, longCalls, byPro, "every long answer is pro's")
		assert.Equal(t, 3500*time.Millisecond, slowest, "none written again from the start by flash")
	})
}

// TestHedgesThatLoseTheirRacesAreSentLessOften: every answer takes as long
// as its length, the same on pro and flash (log-normal, σ 0.8 around 1s,
// up to 20s), four users ask pro 600 questions. A hedge of a long answer
// only loses its race: the original answers first, and the hedge is
// thrown away. Once pro's hedges lost five races or so, its attempts are
// hedged (and cut) at the end of 99% of its answers, not 95%: 12 requests
// beyond one a call, every answer still pro's. Before, every attempt past
// the end of 95% of the answers was hedged, and lost: 31.
func TestHedgesThatLoseTheirRacesAreSentLessOften(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		extra := longAnswersAsked(t, 4, 150)
		assert.LessOrEqual(t, extra, 20, "requests beyond one a call (3.3%)")
	})
}

// TestHedgesOfLongAnswersStopAtTheFirstLostRace: as above, ten users
// asking thirty questions each. pro's answers spread wide (the end of 99%
// of them six medians out) and none stalls: its late attempts are long
// answers, and the first hedge that loses says so. 4 requests beyond one a
// call (1.3%); before, its hedges were held only once four or five had
// lost: 9.
func TestHedgesOfLongAnswersStopAtTheFirstLostRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		extra := longAnswersAsked(t, 10, 30)
		assert.LessOrEqual(t, extra, 6, "requests beyond one a call (2%)")
	})
}

// TestHedgesOfABurstAreHeldOnceTheirRacesAreLost: as above, forty users
// asking fifteen questions each at once. A hedge's delay was read when its
// attempt was sent, before the first races of the burst were lost: the
// attempts sent before pro's hedges were known to lose were still hedged
// at the end of 95% of its answers, 38 requests beyond one a call. A hedge
// due once they lose reads its delay again, and waits for the end of 99%:
// 22.
func TestHedgesOfABurstAreHeldOnceTheirRacesAreLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		extra := longAnswersAsked(t, 40, 15)
		assert.LessOrEqual(t, extra, 30, "requests beyond one a call (5%)")
	})
}

// longAnswersAsked has users ask pro each questions, each answer as long
// as its length, the same on pro and flash (log-normal, σ 0.8 around 1s,
// up to 20s), and returns the requests sent beyond one a call. Every
// answer is pro's once its times are learned.
func longAnswersAsked(t *testing.T, users, each int) int {
	n := users * each
	length := func(r geminitest.Request, _ int) geminitest.Step {
		var k int
		fmt.Sscanf(r.Contents[0].Parts[0].Text, "question %d", &k)
		q := (37 * k) % n // evenly spaced quantiles, scrambled
		z := math.Sqrt2 * math.Erfinv(2*(float64(q)+0.5)/float64(n)-1)
		return geminitest.Step{Latency: min(20*time.Second, time.Duration(float64(time.Second)*math.Exp(0.8*z)))}
	}
	srv := geminitest.New(geminitest.Model{Name: pro, Decide: length}, geminitest.Model{Name: flash, Decide: length})
	c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
		geminiguard.WithHedging(geminiguard.HedgePolicy{On: true}))
	var byPro atomic.Int64
	var wg sync.WaitGroup
	for u := range users {
		wg.Go(func() {
			for i := range each {
				var rec geminiguard.CallRecord
				_, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text(fmt.Sprintf("question %d", u*each+i)), nil)
				assert.NoError(t, err)
				if rec.Model == pro || i < 5 { // the first calls come before pro's times are learned
					byPro.Add(1)
				}
			}
		})
	}
	wg.Wait()

	assert.EqualValues(t, n, byPro.Load(), "every answer pro's, once its times are learned")
	extra := srv.Total(pro) + srv.Total(flash) - n
	t.Logf("%d requests beyond one a call", extra)
	return extra
}

// TestCallFailedByCutsIsATimeoutNotItsCallersCancel: pro (2s) and flash
// (0.5s) have learned their answer times; then both hang on every request
// while 40 users call at once. Their attempts are hedged and cut at the
// learned deadlines, and every call fails. A call whose error names a cut
// is a timeout (context.DeadlineExceeded), and no call's error is
// context.Canceled: the caller cancelled nothing. Before, the cut's own
// cancellation of the request showed through: a call failed on cuts read as
// cancelled by its caller to errors.Is(err, context.Canceled).
func TestCallFailedByCutsIsATimeoutNotItsCallersCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var hanging atomic.Bool
		hang := func(geminitest.Request, int) geminitest.Step {
			if hanging.Load() {
				return geminitest.Step{Latency: 10 * time.Minute}
			}
			return geminitest.Step{}
		}
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 2 * time.Second, Decide: hang},
			geminitest.Model{Name: flash, Latency: 500 * time.Millisecond, Decide: hang})
		c := warmHedgingClient(t, srv)
		var wg sync.WaitGroup
		for range 20 { // flash learns its answer times too
			wg.Go(func() {
				_, _, err := ask(t.Context(), c, flash)
				assert.NoError(t, err)
			})
		}
		wg.Wait()

		hanging.Store(true)
		var failed, cut, cancelled atomic.Int32
		for range 40 {
			wg.Go(func() {
				_, _, err := ask(t.Context(), c, "")
				if err == nil {
					return
				}
				failed.Add(1)
				if strings.Contains(err.Error(), "learned deadline") {
					cut.Add(1)
					assert.ErrorIs(t, err, context.DeadlineExceeded, "a cut is a timeout")
				}
				if errors.Is(err, context.Canceled) {
					cancelled.Add(1)
				}
			})
		}
		wg.Wait()
		assert.Equal(t, int32(40), failed.Load(), "every call fails: both models hang")
		assert.Positive(t, cut.Load(), "calls failed on their cuts")
		assert.Zero(t, cancelled.Load(), "none reads as cancelled by its caller")
	})
}
