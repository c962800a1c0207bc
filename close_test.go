package geminiguard_test

import (
	"context"
	"errors"
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

// TestCloseRefusesLaterCalls: after Close, every method that sends refuses
// with ErrClosed (a stream yields it once) before anything is sent, Chats'
// sends too, and a second Close is fine.
func TestCloseRefusesLaterCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		lists := srv.Hits("", geminitest.VerbList)
		require.NoError(t, c.Close())
		require.NoError(t, c.Close(), "Close is idempotent")

		errs := clientMethods(t, c, t.Context(), true)
		for method, err := range closedImageMethods(c) {
			errs[method] = err
		}
		for method, err := range errs {
			require.Error(t, err, method)
			assert.ErrorIs(t, err, geminiguard.ErrClosed, method)
			assert.Equal(t, "geminiguard: Client is closed", err.Error(), method)
			assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, method)
			assert.False(t, geminiguard.Classify(err).Retryable, method)
		}
		assert.Len(t, errs, 15)
		assert.Zero(t, srv.Total(flash)+srv.Total(imagen)+srv.Total(veo), "nothing sent after Close")
		assert.Equal(t, lists, srv.Hits("", geminitest.VerbList), "no listing after Close")
		assert.Zero(t, c.Stats().Calls, "a refusal is no call")
	})
}

// TestCloseLetsCallsInFlightFinish: a call and a stream started before
// Close end with their answers; a concurrent Close returns nil.
func TestCloseLetsCallsInFlightFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 2 * time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

		var wg sync.WaitGroup
		var resp *genai.GenerateContentResponse
		var err error
		wg.Go(func() { resp, err = c.GenerateContent(t.Context(), "", genai.Text("hi"), nil) })
		var chunks int
		var streamErr error
		wg.Go(func() {
			for _, e := range c.GenerateContentStream(t.Context(), "", genai.Text("hi"), nil) {
				if e != nil {
					streamErr = e
					break
				}
				chunks++
			}
		})
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "the call is in flight")
		require.Equal(t, 1, srv.Hits(flash, geminitest.VerbStream), "the stream is in flight")
		for range 2 {
			wg.Go(func() { assert.NoError(t, c.Close()) })
		}
		wg.Wait()
		require.NoError(t, err, "the call in flight finishes")
		require.NotNil(t, resp)
		assert.NotEmpty(t, resp.Text())
		require.NoError(t, streamErr, "the stream in flight finishes")
		assert.Positive(t, chunks)

		_, err = c.GenerateContent(t.Context(), "", genai.Text("hi"), nil)
		assert.True(t, errors.Is(err, geminiguard.ErrClosed))
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

// closedImageMethods calls each image and video method and returns its error
// by method name.
func closedImageMethods(c *geminiguard.Client) map[string]error {
	ctx := context.Background()
	img := &genai.Image{ImageBytes: []byte("png"), MIMEType: "image/png"}
	errs := map[string]error{}
	_, errs["GenerateImages"] = c.GenerateImages(ctx, imagen, "a cat", nil)
	_, errs["EditImage"] = c.EditImage(ctx, imagen, "a cat", nil, nil)
	_, errs["UpscaleImage"] = c.UpscaleImage(ctx, imagen, img, "x2", nil)
	_, errs["RecontextImage"] = c.RecontextImage(ctx, imagen, &genai.RecontextImageSource{}, nil)
	_, errs["SegmentImage"] = c.SegmentImage(ctx, imagen, &genai.SegmentImageSource{Image: img}, nil)
	_, errs["GenerateVideos"] = c.GenerateVideos(ctx, veo, "waves", nil, nil)
	_, errs["WaitVideos"] = c.WaitVideos(ctx, veo, &genai.GenerateVideosOperation{Name: "models/" + veo + "/operations/x"})
	return errs
}
