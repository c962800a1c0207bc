package geminiguard_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
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

// streamed ranges a stream and returns its text, its chunks and its error.
func streamed(ctx context.Context, c *geminiguard.Client, model string) (string, int, error) {
	var b strings.Builder
	chunks := 0
	for resp, err := range c.GenerateContentStream(ctx, model, genai.Text("Tell me a story"), nil) {
		if err != nil {
			return b.String(), chunks, err
		}
		chunks++
		b.WriteString(resp.Text())
	}
	return b.String(), chunks, nil
}

var streamFaults = []geminitest.Step{
	{Fault: geminitest.StreamCutBetween, CutAfter: 2},
	{Fault: geminitest.StreamCutInside, CutAfter: 2},
	{Fault: geminitest.StreamErrorInside, CutAfter: 2},
	{Fault: geminitest.StreamNoFinish},
	{Fault: geminitest.StreamStallFirst, Stall: time.Hour},
	{Fault: geminitest.StreamStallBetween, CutAfter: 2, Stall: time.Hour},
	{Fault: geminitest.StreamCutBetween, CutAfter: -1},
	{Fault: geminitest.Overloaded},
}

// TestStreamFaultsAreNeverSilent runs every stream fault of the fake, with and
// without resume: the caller gets the whole answer or an ErrStreamInterrupted
// carrying exactly the text it was given.
func TestStreamFaultsAreNeverSilent(t *testing.T) {
	for _, resume := range []bool{false, true} {
		for _, fault := range streamFaults {
			name := fmt.Sprintf("%v/cutAfter=%d/resume=%v", fault.Fault, fault.CutAfter, resume)
			t.Run(name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := geminitest.New(geminitest.Model{Name: flash, Latency: 300 * time.Millisecond, ChunkInterval: 100 * time.Millisecond, Script: []geminitest.Step{fault}})
					c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(resume),
						geminiguard.WithStreamDeadlines(5*time.Second, 2*time.Second))
					text, _, err := streamed(t.Context(), c, "")
					full := srv.FullText(flash)
					if err == nil {
						assert.Equal(t, full, text, "a stream without error is the complete answer")
						return
					}
					require.False(t, resume, "with resume every fault heals: %v", err)
					require.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
					var serr *geminiguard.StreamError
					require.ErrorAs(t, err, &serr)
					assert.Equal(t, text, serr.Partial, "the error carries exactly the text yielded")
					assert.True(t, strings.HasPrefix(full, text))
					assert.LessOrEqual(t, len(text), len(full))
				})
			})
		}
	}
}

// TestStreamFaultsOverRealHTTP checks the cuts that look different on the
// wire over loopback HTTP/1.1 and HTTP/2 (TLS): io.ErrUnexpectedEOF, a
// half event, an HTTP/2 stream reset.
func TestStreamFaultsOverRealHTTP(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		for _, fault := range streamFaults[:4] {
			t.Run(fmt.Sprintf("h2=%v/%v", h2, fault.Fault), func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{fault, fault}})
				hs := httptest.NewUnstartedServer(srv)
				hs.EnableHTTP2 = h2
				if h2 {
					hs.StartTLS()
				} else {
					hs.Start()
				}
				defer hs.Close()
				for _, resume := range []bool{false, true} {
					c, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(hs.URL),
						geminiguard.WithHTTPClient(hs.Client()), geminiguard.WithCascade(flash), geminiguard.WithStreamResume(resume))
					require.NoError(t, err)
					srv.Script(flash, fault)
					text, chunks, err := streamed(t.Context(), c, "")
					if resume {
						require.NoError(t, err)
						assert.Equal(t, srv.FullText(flash), text)
						continue
					}
					require.ErrorIs(t, err, geminiguard.ErrStreamInterrupted, "h2=%v", h2)
					assert.Positive(t, chunks)
					v := geminiguard.Classify(err)
					assert.True(t, v.Retryable, "a cut is worth another attempt: %+v", v)
					assert.Equal(t, geminiguard.ScopeModel, v.Scope, "a cut says the model is unwell: %+v", v)
					if fault.Fault != geminitest.StreamErrorInside { // an error object inside the 200 keeps its own class
						assert.Equal(t, geminiguard.ClassStreamCut, v.Class)
					}
				}
				hs.Client().CloseIdleConnections()
			})
		}
	}
}

func TestStreamResumeExactUnderRandomCuts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 7))
		const answer = "Once upon a time, a retry storm met a token bucket, and the bucket won. The end, told in twelve careful chunks with nothing lost and nothing repeated."
		srv := geminitest.New(
			geminitest.Model{Name: flash, Text: answer, Chunks: 12, ChunkInterval: 50 * time.Millisecond,
				Decide: func(_ geminitest.Request, _ int) geminitest.Step {
					if rng.Float64() < 0.2 {
						return geminitest.Step{Fault: geminitest.StreamCutBetween, CutAfter: 1 + rng.IntN(10)}
					}
					return geminitest.Step{}
				}},
			geminitest.Model{Name: lite, Text: answer, Chunks: 12, ChunkInterval: 50 * time.Millisecond}, // resumes may land on the secondary
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, lite), geminiguard.WithStreamResume(true))
		full := srv.FullText(flash)
		complete, cuts := 0, 0
		for range 200 {
			text, _, err := streamed(t.Context(), c, "")
			require.NoError(t, err)
			if text == full {
				complete++
			}
		}
		cuts = srv.Total(flash) + srv.Total(lite) - 200
		assert.Equal(t, 200, complete, "every answer complete and exact: no character lost or repeated")
		assert.Positive(t, cuts, "the script did cut streams")
		t.Logf("200 streams, %d upstream requests to %s, %d to %s", srv.Total(flash), flash, srv.Total(lite), lite)
	})
}

func TestStreamStallFailsOverWithinIdleDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: flash, Latency: 200 * time.Millisecond,
				Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: time.Hour}, P: 1}}},
			geminitest.Model{Name: lite, Latency: 200 * time.Millisecond},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, lite), geminiguard.WithStreamDeadlines(3*time.Second, time.Second),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))

		start := time.Now()
		var rec geminiguard.CallRecord
		text := ""
		for resp, err := range c.GenerateContentStream(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("hi"), nil) {
			require.NoError(t, err)
			text += resp.Text()
		}
		assert.Equal(t, srv.FullText(lite), text)
		assert.Equal(t, lite, rec.Model)
		// 3s first-chunk deadline on flash, then lite's whole stream.
		assert.LessOrEqual(t, time.Since(start), 3*time.Second+200*time.Millisecond+time.Second)
		assert.Equal(t, geminiguard.ClassTimeout, geminiguard.Classify(rec.Attempts[0].Err).Class)
	})
}

// TestStreamEarlyBreakAndCancelLeaveNothingBehind: a caller that stops
// reading after the first chunk, and one that cancels then, leave no
// goroutine and count nothing against the model. The fake waits an hour
// between chunks (real time: a real HTTP server), so the cancelled stream
// cannot have ended before its cancel is seen (with a millisecond, beside
// three busy CPU loops, all eight chunks came first, and the stream ended
// with no error, in 7 to 11 runs of 300).
func TestStreamEarlyBreakAndCancelLeaveNothingBehind(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 8, ChunkInterval: time.Hour})
	hs := httptest.NewServer(srv)
	defer hs.Close()
	transport := &http.Transport{}
	defer transport.CloseIdleConnections()
	c, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(hs.URL),
		geminiguard.WithHTTPClient(&http.Client{Transport: transport}), geminiguard.WithCascade(flash))
	require.NoError(t, err)

	for range c.GenerateContentStream(t.Context(), "", genai.Text("hi"), nil) {
		break
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	n := 0
	var last error
	for _, err := range c.GenerateContentStream(ctx, "", genai.Text("hi"), nil) {
		n++
		if n == 1 {
			cancel()
		}
		last = err
	}
	assert.ErrorIs(t, last, context.Canceled)
	st := c.Stats()
	assert.Equal(t, geminiguard.StateClosed, st.Models[0].State, "neither a break nor a cancel counts against the model")
	assert.Zero(t, st.Models[0].Failures[geminiguard.ClassStreamCut])
	// goleak in TestMain checks that no goroutine (handler, pipe, watchdog) is left.
}

func TestStreamBlockedMidway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.FinishSafety}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		_, _, err := streamed(t.Context(), c, "")
		require.ErrorIs(t, err, geminiguard.ErrBlocked)
		assert.Equal(t, 1, srv.Total(flash), "a safety block is not retried")
	})
}

func TestStreamContinuationHopsGoThroughTheLimiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Continuation: true}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		// Even a caller who asks for the SDK's own continuation gets ours:
		// the SDK's hops would bypass the limiter and the breaker.
		cfg := &genai.GenerateContentConfig{AutomaticContinuation: genai.Ptr(true)}
		var b strings.Builder
		var err error
		for resp, e := range c.GenerateContentStream(t.Context(), "", genai.Text("Tell me a story"), cfg) {
			if err = e; err != nil {
				break
			}
			b.WriteString(resp.Text())
		}
		text := b.String()
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text, "the paused answer is completed by our own hop")
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbStream), "two hops, two requests, each through the chain")
		reqs := srv.Requests(flash)
		require.Len(t, reqs, 2)
		assert.Contains(t, string(reqs[1].Body), "continuationToken")
		assert.Equal(t, int64(2), c.Stats().Models[0].Requests)
	})
}

func TestStreamFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.SpendCap}, P: 1}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithFallback(geminiguard.TextFallback("later")))
		text, chunks, err := streamed(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, "later", text)
		assert.Equal(t, 1, chunks)
		assert.False(t, errors.Is(err, geminiguard.ErrStreamInterrupted))
	})
}

func TestStreamResumeWithNoModelLeftReportsTheCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 4,
			Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween, CutAfter: 2}, {Fault: geminitest.SpendCap}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(true),
			geminiguard.WithFallback(geminiguard.TextFallback("canned")))
		text, chunks, err := streamed(t.Context(), c, "")
		require.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		require.ErrorIs(t, err, geminiguard.ErrQuotaExhausted, "the resume's failure is inside")
		var serr *geminiguard.StreamError
		require.ErrorAs(t, err, &serr)
		assert.Equal(t, text, serr.Partial)
		assert.Equal(t, 2, chunks)
		assert.NotContains(t, text, "canned", "the Fallback does not continue a text it did not start")
	})
}

func TestStreamStallMidwayResumesWithinIdleDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 200 * time.Millisecond, ChunkInterval: 100 * time.Millisecond, Chunks: 4,
			Script: []geminitest.Step{{Fault: geminitest.StreamStallBetween, CutAfter: 2, Stall: time.Hour}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(true),
			geminiguard.WithStreamDeadlines(5*time.Second, time.Second))

		start := time.Now()
		text, _, err := streamed(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), text)
		// Two chunks by 300ms, the 1s idle deadline, then the resumed stream
		// (the rest of the text in its own 4 chunks: 200ms to the first, 3 ×
		// 100ms after): no backoff, no other wait.
		assert.Equal(t, 300*time.Millisecond+time.Second+200*time.Millisecond+300*time.Millisecond, time.Since(start))
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbStream))
	})
}

// A stream opened while every model is open probes one early, like a unary
// call; the probe's outcome is known when the stream ends.
func TestStreamProbesEarlyWhenEveryModelIsOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}
		srv := geminitest.New(geminitest.Model{Name: pro, Faults: down}, geminitest.Model{Name: flash, Faults: down})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 1}))
		_, _, err := streamed(t.Context(), c, "")
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		_, _, err = streamed(t.Context(), c, "")
		require.ErrorIs(t, err, geminiguard.ErrCircuitOpen, "both open: refused at once")
		require.Equal(t, 2, srv.Total(pro)+srv.Total(flash))

		time.Sleep(2 * time.Second)
		srv.SetModel(geminitest.Model{Name: pro})
		srv.SetModel(geminitest.Model{Name: flash})
		text, _, err := streamed(t.Context(), c, "")

		require.NoError(t, err)
		assert.NotEmpty(t, text)
		assert.Equal(t, 2, srv.Total(pro), "pro opened first: probed early, one request")
		assert.Equal(t, 1, srv.Total(flash))
		st := c.Stats().Models
		assert.Equal(t, geminiguard.StateClosed, st[0].State, "the stream's end closed pro's breaker")
		assert.Equal(t, geminiguard.StateHalfOpen, st[1].State, "flash may come back too: half-open")
	})
}
