package geminiguard_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// down makes every request to model fail with 503 overloaded.
func down(srv *geminitest.Server, model string) {
	srv.SetModel(geminitest.Model{Name: model, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
}

// send sends text and returns the answer, the call record and the error.
func send(ctx context.Context, c *geminiguard.Client, text string) (*genai.GenerateContentResponse, geminiguard.CallRecord, error) {
	var rec geminiguard.CallRecord
	resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(text), nil)
	return resp, rec, err
}

func TestAnswerCacheServesWhenEveryModelFailed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here."}, geminitest.Model{Name: pro, Text: "Pro here."})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, pro), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(16, time.Hour)),
			geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later.")))

		resp, rec, err := send(t.Context(), c, "Say hi")
		require.NoError(t, err)
		assert.False(t, geminiguard.IsFallback(resp))
		assert.Equal(t, flash, rec.Model)
		assert.Equal(t, "Model here.", resp.Text())

		down(srv, flash)
		down(srv, pro)
		before := srv.Total(flash) + srv.Total(pro)
		resp, rec, err = send(t.Context(), c, "Say hi")
		require.NoError(t, err)
		assert.Equal(t, "Model here.", resp.Text(), "the cached answer, before the Fallback")
		assert.True(t, geminiguard.IsFallback(resp), "a cached answer is recognisable")
		assert.True(t, rec.Fallback)
		assert.Len(t, rec.Attempts, 2)
		assert.Equal(t, 2, srv.Total(flash)+srv.Total(pro)-before, "the failed attempts only: the cache sends nothing")
		assert.Equal(t, int64(1), c.Stats().Fallbacks)

		resp, rec, err = send(t.Context(), c, "Say hello")
		require.NoError(t, err)
		assert.Equal(t, "Busy, try later.", resp.Text(), "a different prompt: no cached answer, the Fallback's")
		assert.True(t, rec.Fallback)

		var chunks []string
		for chunk, err := range c.GenerateContentStream(t.Context(), "", genai.Text("Say hi"), nil) {
			require.NoError(t, err)
			assert.True(t, geminiguard.IsFallback(chunk))
			chunks = append(chunks, chunk.Text())
		}
		assert.Equal(t, []string{"Model here."}, chunks, "a stream gets the cached answer as one chunk")
	})
}

func TestAnswerCacheWithoutFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here."})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(16, time.Minute)))
		_, _, err := send(t.Context(), c, "Say hi")
		require.NoError(t, err)
		start := time.Now()

		down(srv, flash)
		_, rec, err := send(t.Context(), c, "Say hello")
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed, "no cached answer and no Fallback: the error")
		assert.False(t, rec.Fallback)

		time.Sleep(time.Minute - time.Second - time.Since(start))
		resp, _, err := send(t.Context(), c, "Say hi")
		require.NoError(t, err)
		assert.Equal(t, "Model here.", resp.Text(), "within the TTL")

		time.Sleep(time.Minute - time.Since(start))
		_, _, err = send(t.Context(), c, "Say hi")
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed, "the TTL passed: the answer expired")
	})
}

func TestAnswerCacheNeverStoresFallbackAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		down(srv, flash)
		answered := false
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(16, time.Hour)),
			geminiguard.WithFallback(func(ctx context.Context, req geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
				if answered {
					return nil, errors.New("no more")
				}
				answered = true
				return geminiguard.TextFallback("Busy.")(ctx, req)
			}))
		resp, _, err := send(t.Context(), c, "Say hi")
		require.NoError(t, err)
		assert.Equal(t, "Busy.", resp.Text())

		_, _, err = send(t.Context(), c, "Say hi")
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed, "the Fallback's answer was not cached")
	})
}

func TestAnswerCacheCopies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here."})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(16, time.Hour)))
		resp, _, err := send(t.Context(), c, "Say hi")
		require.NoError(t, err)
		resp.Candidates[0].Content.Parts[0].Text = "changed by the caller"

		down(srv, flash)
		for range 2 {
			resp, _, err = send(t.Context(), c, "Say hi")
			require.NoError(t, err)
			assert.Equal(t, "Model here.", resp.Text(), "the cache keeps its own copy")
			resp.Candidates[0].Content.Parts[0].Text = "changed by the caller"
		}
	})
}

func TestNewAnswerCacheEvictsLeastRecentlyUsed(t *testing.T) {
	ctx := t.Context()
	cache := geminiguard.NewAnswerCache(2, time.Hour)
	for _, key := range []string{"a", "b"} {
		cache.Put(ctx, key, &genai.GenerateContentResponse{ResponseID: key})
	}
	_, ok := cache.Get(ctx, "a") // a is now the most recently used
	require.True(t, ok)
	cache.Put(ctx, "c", &genai.GenerateContentResponse{ResponseID: "c"})

	_, ok = cache.Get(ctx, "b")
	assert.False(t, ok, "b, the least recently used, was evicted")
	for _, key := range []string{"a", "c"} {
		resp, ok := cache.Get(ctx, key)
		require.True(t, ok, key)
		assert.Equal(t, key, resp.ResponseID)
	}
}
