package geminiguard_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

const (
	imagen = "imagen-4.0-generate-001"
	veo    = "veo-3.0-generate-001"
)

// newImageClient returns a Client on a Vertex AI fake that serves imagen
// and flash, with imagen declared outside the cascade.
func newImageClient(t *testing.T, srv *geminitest.Server, opts ...geminiguard.Option) *geminiguard.Client {
	t.Helper()
	sdk, err := genai.NewClient(t.Context(), srv.ClientConfig())
	require.NoError(t, err)
	c, err := geminiguard.New(t.Context(), append([]geminiguard.Option{geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash),
		geminiguard.WithKnownModels(imagen)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestGenerateImagesRetriesA503: an image model's 503 and its 429 (Vertex
// AI's online-prediction quota) are retried after a backoff and the images
// answer; the call is in the Stats and the CallRecord. The other image
// methods answer through the chain too.
func TestGenerateImagesRetriesA503(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.NewVertex("my-project", "us-central1", geminitest.Model{Name: flash},
			geminitest.Model{Name: imagen, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}})
		c := newImageClient(t, srv)

		var rec geminiguard.CallRecord
		start := time.Now()
		resp, err := c.GenerateImages(geminiguard.RecordCall(t.Context(), &rec), imagen, "a lighthouse at dusk", &genai.GenerateImagesConfig{NumberOfImages: 3})
		require.NoError(t, err)
		require.Len(t, resp.GeneratedImages, 3)
		assert.Equal(t, "image/png", resp.GeneratedImages[0].Image.MIMEType)
		assert.NotEmpty(t, resp.GeneratedImages[0].Image.ImageBytes)
		assert.Equal(t, 2, srv.Hits(imagen, geminitest.VerbImages), "the 503, then the answer")
		assert.Zero(t, srv.Total(flash), "no cascade to a text model")
		assert.Positive(t, time.Since(start), "the retry waited its backoff")
		require.Len(t, rec.Attempts, 2)
		assert.Equal(t, imagen, rec.Model)
		assert.Equal(t, int64(1), c.Stats().Calls)

		for name, call := range map[string]func() error{
			"EditImage": func() error {
				r, err := c.EditImage(t.Context(), imagen, "add a boat", []genai.ReferenceImage{genai.NewRawReferenceImage(resp.GeneratedImages[0].Image, 1)}, &genai.EditImageConfig{NumberOfImages: 2})
				if err == nil {
					assert.Len(t, r.GeneratedImages, 2)
				}
				return err
			},
			"UpscaleImage": func() error {
				r, err := c.UpscaleImage(t.Context(), imagen, resp.GeneratedImages[0].Image, "x2", nil)
				if err == nil {
					assert.Len(t, r.GeneratedImages, 1)
				}
				return err
			},
			"RecontextImage": func() error {
				r, err := c.RecontextImage(t.Context(), imagen, &genai.RecontextImageSource{Prompt: "on a beach",
					ProductImages: []*genai.ProductImage{{ProductImage: resp.GeneratedImages[0].Image}}}, nil)
				if err == nil {
					assert.Len(t, r.GeneratedImages, 1)
				}
				return err
			},
			"SegmentImage": func() error {
				r, err := c.SegmentImage(t.Context(), imagen, &genai.SegmentImageSource{Image: resp.GeneratedImages[0].Image}, nil)
				if err == nil {
					require.Len(t, r.GeneratedMasks, 1)
					assert.NotEmpty(t, r.GeneratedMasks[0].Labels)
				}
				return err
			},
		} {
			require.NoError(t, call(), name)
		}
		assert.Equal(t, 6, srv.Hits(imagen, geminitest.VerbImages))

		// Vertex AI's 429 of the online-prediction quota is a rate limit:
		// the model cools down for the call (no other model to go to).
		srv.Script(imagen, geminitest.Step{Fault: geminitest.RateLimitMinute})
		_, err = c.GenerateImages(t.Context(), imagen, "a cat", nil)
		require.ErrorIs(t, err, geminiguard.ErrRateLimited)
		assert.Contains(t, err.Error(), "online_prediction_requests_per_base_model")
		assert.Equal(t, 7, srv.Hits(imagen, geminitest.VerbImages))
	})
}

// TestImagesPerMinute: with Limits{IPM: 4} and headroom 1, calls of 2
// images each go 2 a minute: the third waits for the minute, in fake time,
// and nothing is sent before; a call of more images than the IPM is
// refused at once.
func TestImagesPerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.NewVertex("my-project", "us-central1", geminitest.Model{Name: flash}, geminitest.Model{Name: imagen})
		c := newImageClient(t, srv, geminiguard.WithLimits(imagen, geminiguard.Limits{IPM: 4}), geminiguard.WithHeadroom(1),
			geminiguard.WithTimeouts(time.Minute, 5*time.Minute))
		two := &genai.GenerateImagesConfig{NumberOfImages: 2}
		start := time.Now()
		var at []time.Duration
		for range 3 {
			_, err := c.GenerateImages(t.Context(), imagen, "a cat", two)
			require.NoError(t, err)
			at = append(at, time.Since(start))
		}
		assert.Equal(t, []time.Duration{0, 0, 30 * time.Second}, at, "4 images a minute: the third call waits for 2 images' worth")
		assert.Equal(t, 3, srv.Hits(imagen, geminitest.VerbImages))

		_, err := c.GenerateImages(t.Context(), imagen, "a cat", &genai.GenerateImagesConfig{NumberOfImages: 5})
		require.ErrorIs(t, err, geminiguard.ErrRateLimited)
		assert.Contains(t, err.Error(), "the request's 5 images exceed the effective IPM (4)")
		assert.Equal(t, 3, srv.Hits(imagen, geminitest.VerbImages), "refused before sending")

		_, err = newOffline(t, geminiguard.WithKnownModels(imagen), geminiguard.WithLimits(imagen, geminiguard.Limits{IPM: -1}))
		require.Error(t, err)
		assert.Contains(t, err.Error(), `WithLimits("`+imagen+`"): IPM (-1) is negative`)
	})
}

// TestImagesOnTheGeminiAPIAreRefused: the SDK sends the image methods to
// Vertex AI only: on the Gemini API the call is refused before anything
// is sent, with an error that says what to do, and no retry.
func TestImagesOnTheGeminiAPIAreRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: imagen})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		defer c.Close()
		_, err := c.GenerateImages(t.Context(), imagen, "a cat", nil)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "Vertex AI only")
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
		assert.Zero(t, srv.Total(imagen))
	})
}

// TestGenerateVideosPolledThroughTheChain: GenerateVideos answers the
// operation (after a 503, retried); WaitVideos polls it with backoff and
// returns it done, with the videos, once the fake has rendered them.
func TestGenerateVideosPolledThroughTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash},
			geminitest.Model{Name: veo, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithKnownModels(veo))
		defer c.Close()
		start := time.Now()
		op, err := c.GenerateVideos(t.Context(), veo, "waves on rocks", nil, &genai.GenerateVideosConfig{NumberOfVideos: 2})
		require.NoError(t, err)
		assert.False(t, op.Done)
		assert.Equal(t, 2, srv.Hits(veo, geminitest.VerbVideos), "the 503, then the operation")

		done, err := c.WaitVideos(t.Context(), veo, op)
		require.NoError(t, err)
		require.True(t, done.Done)
		require.NotNil(t, done.Response)
		require.Len(t, done.Response.GeneratedVideos, 2)
		assert.NotEmpty(t, done.Response.GeneratedVideos[0].Video.URI)
		assert.Equal(t, 2, srv.Hits(veo, geminitest.VerbOperation), "polled after 5s (not done), then 10s later (done)")
		assert.Less(t, time.Since(start), 20*time.Second)
	})
}
