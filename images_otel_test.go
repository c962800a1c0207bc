package geminiguard_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestOTelImagesAndVideos: every image and video method used to run
// untraced; each now has its CLIENT span and its operation duration, as
// GenerateContent, under its own gen_ai.operation.name (the GenAI
// conventions define none for images or videos: genai's method name in
// snake case), with the response model and, on failure, the error type.
func TestOTelImagesAndVideos(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.NewVertex("my-project", "us-central1", geminitest.Model{Name: flash}, geminitest.Model{Name: imagen})
		tel := newTelemetry()
		c := newImageClient(t, srv, tel.opts...)
		videos := newClient(t, geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: veo}), nil,
			append(tel.opts, geminiguard.WithCascade(flash), geminiguard.WithKnownModels(veo))...)

		gen, err := c.GenerateImages(t.Context(), imagen, secretPrompt, nil)
		require.NoError(t, err)
		img := gen.GeneratedImages[0].Image
		_, err = c.EditImage(t.Context(), imagen, secretPrompt, []genai.ReferenceImage{genai.NewRawReferenceImage(img, 1)}, nil)
		require.NoError(t, err)
		_, err = c.UpscaleImage(t.Context(), imagen, img, "x2", nil)
		require.NoError(t, err)
		_, err = c.RecontextImage(t.Context(), imagen, &genai.RecontextImageSource{Prompt: secretPrompt, ProductImages: []*genai.ProductImage{{ProductImage: img}}}, nil)
		require.NoError(t, err)
		_, err = c.SegmentImage(t.Context(), imagen, &genai.SegmentImageSource{Image: img}, nil)
		require.NoError(t, err)
		_, err = videos.GenerateVideos(t.Context(), veo, secretPrompt, nil, nil)
		require.NoError(t, err)
		srv.Script(imagen, geminitest.Step{Fault: geminitest.InvalidArgument})
		_, err = c.GenerateImages(t.Context(), imagen, secretPrompt, nil)
		require.Error(t, err)

		want := []struct{ op, model string }{
			{"generate_images", imagen}, {"edit_image", imagen}, {"upscale_image", imagen}, {"recontext_image", imagen},
			{"segment_image", imagen}, {"generate_videos", veo}, {"generate_images", imagen},
		}
		spans := tel.spans.Ended()
		require.Len(t, spans, len(want))
		for i, w := range want {
			s := spans[i]
			assert.Equal(t, w.op+" "+w.model, s.Name())
			got := map[string]string{}
			for _, kv := range s.Attributes() {
				got[string(kv.Key)] = kv.Value.String()
			}
			assert.Equal(t, w.op, got["gen_ai.operation.name"], s.Name())
			provider := "gcp.vertex_ai"
			if w.model == veo {
				provider = "gcp.gemini"
			}
			assert.Equal(t, provider, got["gen_ai.provider.name"], s.Name())
			assert.Equal(t, w.model, got["gen_ai.request.model"], s.Name())
			if i < len(want)-1 {
				assert.Equal(t, w.model, got["gen_ai.response.model"], s.Name())
				assert.Equal(t, codes.Unset, s.Status().Code, s.Name())
			} else {
				assert.Equal(t, "bad_request", got["error.type"])
				assert.Equal(t, codes.Error, s.Status().Code)
			}
		}

		ms := tel.metrics(t)
		ops := map[string]uint64{}
		for _, p := range histogram(t, ms, "gen_ai.client.operation.duration", "s") {
			v, _ := p.Attributes.Value("gen_ai.operation.name")
			ops[v.AsString()] += p.Count
		}
		assert.Equal(t, map[string]uint64{"generate_images": 2, "edit_image": 1, "upscale_image": 1, "recontext_image": 1, "segment_image": 1, "generate_videos": 1}, ops)
		requireNoSecrets(t, tel, ms)
	})
}
