package geminitest_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

func TestStreamOK(t *testing.T) {
	for _, w := range []wire{inMemory, http1, http2} {
		t.Run(w.name, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash, Chunks: 5})
			c := w.client(t, fake)

			s := stream(t.Context(), c, flash, nil)
			require.NoError(t, s.err)
			require.Len(t, s.chunks, 5)
			assert.Equal(t, fake.FullText(flash), s.text())
			assert.Equal(t, []genai.FinishReason{genai.FinishReasonStop}, s.finishReasons())
			last := s.chunks[4]
			assert.Equal(t, flash, last.ModelVersion)
			assert.NotEmpty(t, last.ResponseID)
			require.NotNil(t, last.UsageMetadata)
			assert.Equal(t, int32(4), last.UsageMetadata.PromptTokenCount) // "stream please": 13 chars
			assert.Equal(t, int32((len(fake.FullText(flash))+3)/4), last.UsageMetadata.CandidatesTokenCount)
			assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbStream))
		})
	}
}

func TestStreamFaults(t *testing.T) {
	isUnexpectedEOF := func(t *testing.T, err error) { assert.ErrorIs(t, err, io.ErrUnexpectedEOF) }
	isH2Reset := func(t *testing.T, err error) {
		assert.ErrorContains(t, err, "INTERNAL_ERROR")
		assert.False(t, errors.As(err, &genai.APIError{}))
	}
	isUnmarshal := func(t *testing.T, err error) {
		assert.ErrorContains(t, err, "error unmarshalling data")
		assert.False(t, errors.As(err, &genai.APIError{}))
	}
	isOverloaded := func(t *testing.T, err error) {
		e := apiError(t, err)
		assert.Equal(t, 503, e.Code)
		assert.Equal(t, "UNAVAILABLE", e.Status)
		assert.Equal(t, "The model is overloaded. Please try again later.", e.Message)
	}
	cases := []struct {
		w      wire
		step   geminitest.Step
		chunks int
		err    func(t *testing.T, err error) // nil: no error
	}{
		{inMemory, geminitest.Step{Fault: geminitest.StreamCutBetween}, 1, isUnexpectedEOF},
		{http1, geminitest.Step{Fault: geminitest.StreamCutBetween}, 1, isUnexpectedEOF},
		{http2, geminitest.Step{Fault: geminitest.StreamCutBetween}, 1, isH2Reset},
		{inMemory, geminitest.Step{Fault: geminitest.StreamCutBetween, CutAfter: 3}, 3, isUnexpectedEOF},
		{http1, geminitest.Step{Fault: geminitest.StreamCutBetween, CutAfter: -1}, 0, isUnexpectedEOF},
		{inMemory, geminitest.Step{Fault: geminitest.StreamCutInside}, 1, isUnmarshal},
		{http1, geminitest.Step{Fault: geminitest.StreamCutInside, CutAfter: 2}, 2, isUnmarshal},
		{http2, geminitest.Step{Fault: geminitest.StreamCutInside}, 1, isUnmarshal},
		{inMemory, geminitest.Step{Fault: geminitest.StreamErrorInside}, 1, isOverloaded},
		{http1, geminitest.Step{Fault: geminitest.StreamErrorInside, CutAfter: 2}, 2, isOverloaded},
		{http2, geminitest.Step{Fault: geminitest.StreamErrorInside}, 1, isOverloaded},
		{inMemory, geminitest.Step{Fault: geminitest.StreamNoFinish}, 4, nil},
		{http1, geminitest.Step{Fault: geminitest.StreamNoFinish}, 4, nil},
		{http2, geminitest.Step{Fault: geminitest.StreamNoFinish}, 4, nil},
		{inMemory, geminitest.Step{Fault: geminitest.StreamStallBetween, Stall: 20 * time.Millisecond}, 4, nil},
		{http1, geminitest.Step{Fault: geminitest.StreamStallFirst, Stall: 20 * time.Millisecond}, 4, nil},
	}
	for _, tc := range cases {
		t.Run(tc.w.name+"/"+tc.step.Fault.String(), func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{tc.step}})
			c := tc.w.client(t, fake)

			s := stream(t.Context(), c, flash, nil)
			assert.Len(t, s.chunks, tc.chunks)
			if tc.err == nil {
				require.NoError(t, s.err)
				assert.Equal(t, fake.FullText(flash), s.text())
			} else {
				require.Error(t, s.err)
				tc.err(t, s.err)
				assert.True(t, len(s.text()) < len(fake.FullText(flash)))
			}
			if tc.step.Fault == geminitest.StreamNoFinish {
				assert.Empty(t, s.finishReasons())
			}
			assert.Equal(t, 1, fake.Total(flash), "the SDK must not resume without a continuation token")
		})
	}
}

// Stalls wait in fake time under synctest and end when the caller gives up.
func TestStreamStalls(t *testing.T) {
	t.Run("stall first, caller deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.StreamStallFirst}}})
			c := newClient(t, fake.ClientConfig())
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()

			start := time.Now()
			s := stream(ctx, c, flash, nil)
			assert.Empty(t, s.chunks)
			assert.ErrorIs(t, s.err, context.DeadlineExceeded)
			assert.Equal(t, 5*time.Second, time.Since(start))
		})
	})
	t.Run("stall between, then the rest", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{
				Name: flash, Latency: 300 * time.Millisecond, ChunkInterval: 100 * time.Millisecond,
				Script: []geminitest.Step{{Fault: geminitest.StreamStallBetween, CutAfter: 2, Stall: 10 * time.Second}},
			})
			c := newClient(t, fake.ClientConfig())

			var at []time.Duration
			start := time.Now()
			for _, err := range c.Models.GenerateContentStream(t.Context(), flash, prompt("hi"), nil) {
				require.NoError(t, err)
				at = append(at, time.Since(start))
			}
			ms := time.Millisecond
			assert.Equal(t, []time.Duration{300 * ms, 400 * ms, 10*time.Second + 500*ms, 10*time.Second + 600*ms}, at)
		})
	})
	t.Run("stall between, caller cancels", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.StreamStallBetween}}})
			c := newClient(t, fake.ClientConfig())
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()

			var chunks int
			var err error
			for _, e := range c.Models.GenerateContentStream(ctx, flash, prompt("hi"), nil) {
				if e != nil {
					err = e
					break
				}
				chunks++
				time.AfterFunc(time.Minute, cancel)
			}
			assert.Equal(t, 1, chunks)
			assert.ErrorIs(t, err, context.Canceled)
		})
	})
	t.Run("stall first on unary delays the answer", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{
				Name: flash, Latency: time.Second,
				Script: []geminitest.Step{{Fault: geminitest.StreamStallFirst, Stall: time.Minute}},
			})
			c := newClient(t, fake.ClientConfig())
			start := time.Now()
			r, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
			require.NoError(t, err)
			assert.Equal(t, fake.FullText(flash), r.Text())
			assert.Equal(t, time.Minute+time.Second, time.Since(start))
		})
	})
}
