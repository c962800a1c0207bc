package geminiguard_test

import (
	"context"
	"fmt"
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

// Regression tests of the defects a chaos soak found (issue 9), named after
// what went wrong. Each failed before its fix.

// openedByOneFailure returns a Client on srv whose breakers open on one
// counted failure for 30s, without retries or early probes, so that a test
// can put a model in half-open with one failed call and a 30s sleep.
func openedByOneFailure(t *testing.T, srv *geminitest.Server, opts ...geminiguard.Option) *geminiguard.Client {
	t.Helper()
	return newClient(t, srv, nil, append([]geminiguard.Option{
		geminiguard.WithCascade(pro),
		geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
		geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 1, OpenFor: 30 * time.Second, AllOpenProbeEvery: -1}),
	}, opts...)...)
}

// recovered runs f and returns what it panicked with, nil when it did not.
func recovered(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

func TestPanicInStreamLoopBodyDuringProbeFreesTheProbeSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}})
		c := openedByOneFailure(t, srv)
		_, _, err := ask(t.Context(), c, "")
		require.Error(t, err)
		require.Equal(t, geminiguard.StateOpen, c.Stats().Models[0].State)
		time.Sleep(30 * time.Second)

		p := recovered(func() {
			for range c.GenerateContentStream(t.Context(), "", genai.Text("Tell me a story"), nil) {
				panic("the caller's loop body")
			}
		})

		assert.Equal(t, "the caller's loop body", p, "the panic reaches the caller")
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err, "the probe's slot was freed: pro is tried again")
		assert.Equal(t, pro, rec.Model)
		assert.Equal(t, 3, srv.Total(pro))
		st := c.Stats()
		assert.Equal(t, geminiguard.StateClosed, st.Models[0].State)
		assert.Equal(t, int64(3), st.Calls)
		assert.Equal(t, int64(1), st.Successes)
	})
}

// panickingTransport panics on the requests it is armed for, as a broken SDK
// or middleware would.
type panickingTransport struct {
	base  http.RoundTripper
	armed atomic.Bool
}

func (p *panickingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if p.armed.Load() {
		panic("the transport")
	}
	return p.base.RoundTrip(req)
}

func TestPanicDuringUnaryProbeFreesTheProbeSlot(t *testing.T) {
	for _, source := range []string{"the transport", "a state-change hook"} {
		t.Run(source, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}})
				tr := &panickingTransport{base: srv.Transport()}
				var hookArmed atomic.Bool
				c := openedByOneFailure(t, srv, geminiguard.WithHTTPClient(&http.Client{Transport: tr}),
					geminiguard.WithHooks(geminiguard.Hooks{OnStateChange: func(_ context.Context, e geminiguard.StateChangeEvent) {
						if hookArmed.Load() && e.To == geminiguard.StateHalfOpen {
							panic("a state-change hook")
						}
					}}))
				_, _, err := ask(t.Context(), c, "")
				require.Error(t, err)
				time.Sleep(30 * time.Second)

				tr.armed.Store(source == "the transport")
				hookArmed.Store(source == "a state-change hook")
				p := recovered(func() { _, _, _ = ask(t.Context(), c, "") })
				tr.armed.Store(false)
				hookArmed.Store(false)

				assert.Equal(t, source, p, "the panic reaches the caller")
				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err, "the probe's slot was freed")
				assert.Equal(t, pro, rec.Model)
				st := c.Stats()
				assert.Equal(t, geminiguard.StateClosed, st.Models[0].State)
				assert.Equal(t, int64(3), st.Calls)
				assert.Equal(t, int64(1), st.Successes, "the call that panicked is no success")
			})
		})
	}
}

// halfOf returns the first half of an answer the fake pauses with
// CONTINUATION, as it cuts it.
func halfOf(text string) string {
	runes := []rune(text)
	return string(runes[:(len(runes)+1)/2])
}

func TestFailedContinuationHopNeverTakesTheFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		overloaded := geminitest.Step{Fault: geminitest.Overloaded}
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Continuation: true}, overloaded, overloaded, overloaded, overloaded}},
			geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithFallback(geminiguard.TextFallback("We're busy")))

		resp, rec, err := ask(t.Context(), c, "")

		require.Error(t, err, "half an answer is no answer")
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		var se *geminiguard.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, pro, se.Model)
		assert.Equal(t, halfOf(srv.FullText(pro)), se.Partial, "the error carries the text so far")
		assert.Equal(t, geminiguard.ClassOverloaded, geminiguard.Classify(err).Class)
		assert.Equal(t, 5, srv.Total(pro), "the hop retried on pro alone, four attempts")
		assert.Zero(t, srv.Total(flash), "pro's token is no use to flash")
		assert.False(t, rec.Fallback)
		assert.Empty(t, rec.Model)
		st := c.Stats()
		assert.Equal(t, int64(1), st.Calls)
		assert.Zero(t, st.Successes)
		assert.Zero(t, st.Fallbacks)
	})
}

func TestContinuationHopsShareTheCallTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 4 * time.Second,
			Script: []geminitest.Step{{Continuation: true}, {Continuation: true}, {}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro), geminiguard.WithTimeouts(5*time.Second, 10*time.Second))

		start := time.Now()
		_, _, err := ask(t.Context(), c, "")

		require.Error(t, err, "three 4s requests do not fit in a 10s call")
		assert.Equal(t, 10*time.Second, time.Since(start), "the call's deadline bounds its hops")
		assert.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		assert.Equal(t, 3, srv.Total(pro))
	})
}

func TestStreamedContinuationHopStaysOnTheAnsweringModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		overloaded := geminitest.Step{Fault: geminitest.Overloaded}
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Continuation: true}, overloaded, overloaded, overloaded, overloaded}},
			geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithFallback(geminiguard.TextFallback("We're busy")))

		text, _, err := streamed(t.Context(), c, "")

		require.Error(t, err)
		assert.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		var se *geminiguard.StreamError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, halfOf(srv.FullText(pro)), text, "only pro's first half was yielded")
		assert.Equal(t, text, se.Partial)
		assert.Zero(t, srv.Total(flash), "pro's token never went to flash")
		assert.Equal(t, int64(1), c.Stats().Calls)
		assert.Zero(t, c.Stats().Successes+c.Stats().Fallbacks)
	})
}

func TestStreamQuietEndsFailAsUnaryAnswersDo(t *testing.T) {
	for _, fault := range []geminitest.Fault{geminitest.StopNoParts, geminitest.FinishOther, geminitest.FinishMalformedFunctionCall} {
		t.Run(fault.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: fault}, P: 1}}})
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

				_, _, unaryErr := ask(t.Context(), c, "")
				text, _, err := streamed(t.Context(), c, "")

				require.ErrorIs(t, unaryErr, geminiguard.ErrEmptyResponse)
				require.Error(t, err, "never a silent end")
				assert.Empty(t, text)
				assert.ErrorIs(t, err, geminiguard.ErrEmptyResponse)
				assert.Equal(t, geminiguard.Classify(unaryErr).Class, geminiguard.Classify(err).Class)
				assert.Equal(t, srv.Hits(flash, geminitest.VerbGenerate), srv.Hits(flash, geminitest.VerbStream), "retried alike")
			})
		})
	}
}

func TestResumedStreamEndingEmptyIsNoCompleteAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		other := geminitest.Step{Fault: geminitest.FinishOther}
		srv := geminitest.New(geminitest.Model{Name: flash, ChunkInterval: 100 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween, CutAfter: 2}, other, other, other, other}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(true))

		text, _, err := streamed(t.Context(), c, "")

		require.Error(t, err, "half the text is not a complete answer")
		assert.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		assert.ErrorIs(t, err, geminiguard.ErrEmptyResponse)
		assert.True(t, strings.HasPrefix(srv.FullText(flash), text))
		assert.Less(t, len(text), len(srv.FullText(flash)))
	})
}

func TestFallbackResponseIsNeverWritten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cached := &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{
			Content: genai.NewContentFromText("a cached answer", genai.RoleModel), FinishReason: genai.FinishReasonStop}}}
		srv := geminitest.New(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithFallback(func(context.Context, geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
				return cached, nil // one shared value for every call
			}))

		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				resp, rec, err := ask(t.Context(), c, "")
				assert.NoError(t, err)
				assert.True(t, rec.Fallback)
				assert.Equal(t, "a cached answer", resp.Text())
				assert.Equal(t, geminiguard.FallbackModelVersion, resp.ModelVersion)
			})
		}
		wg.Wait()

		assert.Empty(t, cached.ModelVersion, "the Fallback's value is its own")
	})
}

func TestModelsOutsideTheCascadeKeepBoundedState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

		const names = 1000
		for i := range names {
			_, _, err := ask(t.Context(), c, fmt.Sprintf("user-model-%d", i))
			require.ErrorIs(t, err, geminiguard.ErrModelNotFound, "an unknown model the call named: its 404 is returned")
		}

		st := c.Stats()
		assert.Equal(t, flash, st.Models[0].Model)
		assert.LessOrEqual(t, len(st.Models), 1+256, "state for models outside the cascade is capped")
		kept := map[string]bool{}
		for _, m := range st.Models {
			kept[m.Model] = true
		}
		assert.True(t, kept[fmt.Sprintf("user-model-%d", names-1)], "the most recently called is kept")
		assert.False(t, kept["user-model-0"], "the least recently called is forgotten")
		assert.Equal(t, int64(names), st.Calls)
	})
}

// stallingCounts stalls every countTokens request until its context ends.
type stallingCounts struct {
	base    http.RoundTripper
	stalled atomic.Int32
}

func (s *stallingCounts) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.HasSuffix(req.URL.Path, ":countTokens") {
		s.stalled.Add(1)
		<-req.Context().Done()
		return nil, req.Context().Err()
	}
	return s.base.RoundTrip(req)
}

func TestStalledTokenCountIsBoundedByTheCallAndBlamesNoModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: time.Second})
		counts := &stallingCounts{base: srv.Transport()}
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithExactTokenCount(true),
			geminiguard.WithHTTPClient(&http.Client{Transport: counts}),
			geminiguard.WithLimits(flash, geminiguard.Limits{TPM: 1_000_000}), geminiguard.WithTimeouts(5*time.Second, 10*time.Second))
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()

		start := time.Now()
		_, rec, err := ask(ctx, c, "")

		require.NoError(t, err, "the count is abandoned for the estimate")
		assert.Equal(t, flash, rec.Model)
		assert.Equal(t, 2500*time.Millisecond+time.Second, time.Since(start), "a quarter of the 10s call for the count, then the answer")
		assert.Equal(t, int32(1), counts.stalled.Load())
		ms := c.Stats().Models[0]
		assert.Empty(t, ms.Failures, "the slow count blames no model")
		assert.Equal(t, geminiguard.StateClosed, ms.State)
	})
}

func TestStreamNeverFallsBackOnceAChunkWasYielded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		overloaded := geminitest.Step{Fault: geminitest.Overloaded}
		srv := geminitest.New(geminitest.Model{Name: flash, ChunkInterval: 100 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween, CutAfter: 1, Thought: "Thinking about a story"}},
			Faults: []geminitest.Chance{{Step: overloaded, P: 1}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(true),
			geminiguard.WithFallback(geminiguard.TextFallback("We're busy")))

		var chunks []*genai.GenerateContentResponse
		var err error
		for resp, e := range c.GenerateContentStream(t.Context(), "", genai.Text("Tell me a story"), nil) {
			if err = e; err != nil {
				break
			}
			chunks = append(chunks, resp)
		}

		require.Len(t, chunks, 1, "the thought, then no canned answer after it")
		assert.True(t, chunks[0].Candidates[0].Content.Parts[0].Thought)
		require.Error(t, err)
		assert.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		assert.Zero(t, c.Stats().Fallbacks)
	})
}
