package geminiguard

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genai"
)

// The image and video methods mirror genai's Models methods of the same
// names. Each sends its request to the named model only (no cascade, no
// Fallback: an image of another model is another image), through the
// call's bulkhead, the model's limiter (RPM, RPD and, for the image
// methods, IPM: Limits.IPM counts the images a call asks for), the breaker
// of the model's generation endpoint and classifier-driven retries, as
// EmbedContent goes. The caller's config is never mutated.

// newImageLimits returns the IPM limiters of the models WithLimits gave an
// IPM, by model; nil when none.
func newImageLimits(cfg *config) map[string]*limiter {
	var out map[string]*limiter
	for name, l := range cfg.limits {
		if lim := newImageLimiter(l.IPM, cfg.headroom); lim != nil {
			if out == nil {
				out = make(map[string]*limiter)
			}
			out[name] = lim
		}
	}
	return out
}

// GenerateImages generates images from prompt with model (an Imagen
// model), as genai's Models.GenerateImages does, through the chain (see
// above); config.NumberOfImages (default 1) images count against the
// model's IPM. The SDK sends it to Vertex AI only: model must be called
// through a Vertex AI SDK client (the Client's own, or a WithModelBackend
// entry's).
//
// Errors: those of EmbedContent; before anything is sent, a refusal that
// Classify reads as ClassBadRequest when model is "" or is called on the
// Gemini API.
func (c *Client) GenerateImages(ctx context.Context, model, prompt string, config *genai.GenerateImagesConfig) (*genai.GenerateImagesResponse, error) {
	var cfg genai.GenerateImagesConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	return mediaCall(ctx, c, opGenerateImages, "GenerateImages", model, imageCount(cfg.NumberOfImages), true, func(ctx context.Context, m *modelState) (*genai.GenerateImagesResponse, error) {
		return c.mediaFor(m).GenerateImages(ctx, m.wire, prompt, &cfg)
	})
}

// EditImage edits images with model as genai's Models.EditImage does,
// through the chain; config.NumberOfImages (default 1) count against IPM.
// Vertex AI only, as GenerateImages.
//
// Errors: those of GenerateImages.
func (c *Client) EditImage(ctx context.Context, model, prompt string, referenceImages []genai.ReferenceImage, config *genai.EditImageConfig) (*genai.EditImageResponse, error) {
	var cfg genai.EditImageConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	return mediaCall(ctx, c, opEditImage, "EditImage", model, imageCount(cfg.NumberOfImages), true, func(ctx context.Context, m *modelState) (*genai.EditImageResponse, error) {
		return c.mediaFor(m).EditImage(ctx, m.wire, prompt, referenceImages, &cfg)
	})
}

// UpscaleImage upscales image by upscaleFactor ("x2", "x4") with model as
// genai's Models.UpscaleImage does, through the chain; one image counts
// against IPM. Vertex AI only, as GenerateImages.
//
// Errors: those of GenerateImages.
func (c *Client) UpscaleImage(ctx context.Context, model string, image *genai.Image, upscaleFactor string, config *genai.UpscaleImageConfig) (*genai.UpscaleImageResponse, error) {
	var cfg genai.UpscaleImageConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	return mediaCall(ctx, c, opUpscaleImage, "UpscaleImage", model, 1, true, func(ctx context.Context, m *modelState) (*genai.UpscaleImageResponse, error) {
		return c.mediaFor(m).UpscaleImage(ctx, m.wire, image, upscaleFactor, &cfg)
	})
}

// RecontextImage puts a product or a person in a new scene with model as
// genai's Models.RecontextImage does, through the chain;
// config.NumberOfImages (default 1) count against IPM. Vertex AI only, as
// GenerateImages.
//
// Errors: those of GenerateImages.
func (c *Client) RecontextImage(ctx context.Context, model string, source *genai.RecontextImageSource, config *genai.RecontextImageConfig) (*genai.RecontextImageResponse, error) {
	var cfg genai.RecontextImageConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	n := int32(1)
	if cfg.NumberOfImages != nil {
		n = *cfg.NumberOfImages
	}
	return mediaCall(ctx, c, opRecontextImage, "RecontextImage", model, imageCount(n), true, func(ctx context.Context, m *modelState) (*genai.RecontextImageResponse, error) {
		return c.mediaFor(m).RecontextImage(ctx, m.wire, source, &cfg)
	})
}

// SegmentImage segments an image with model as genai's Models.SegmentImage
// does, through the chain; one image counts against IPM. Vertex AI only,
// as GenerateImages.
//
// Errors: those of GenerateImages.
func (c *Client) SegmentImage(ctx context.Context, model string, source *genai.SegmentImageSource, config *genai.SegmentImageConfig) (*genai.SegmentImageResponse, error) {
	var cfg genai.SegmentImageConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	return mediaCall(ctx, c, opSegmentImage, "SegmentImage", model, 1, true, func(ctx context.Context, m *modelState) (*genai.SegmentImageResponse, error) {
		return c.mediaFor(m).SegmentImage(ctx, m.wire, source, &cfg)
	})
}

// GenerateVideos starts generating videos with model (a Veo model) as
// genai's Models.GenerateVideos does, through the chain (limiter RPM and
// RPD, breaker, retries; not IPM), on the Gemini API or Vertex AI, and
// returns the long-running operation as the API answered it, usually not
// yet done: wait for it with WaitVideos.
//
// Errors: those of EmbedContent; a refusal when model is "".
func (c *Client) GenerateVideos(ctx context.Context, model, prompt string, image *genai.Image, config *genai.GenerateVideosConfig) (*genai.GenerateVideosOperation, error) {
	return c.GenerateVideosFromSource(ctx, model, &genai.GenerateVideosSource{Prompt: prompt, Image: image}, config)
}

// GenerateVideosFromSource is GenerateVideos with genai's
// GenerateVideosSource (prompt, image, video), as
// Models.GenerateVideosFromSource.
//
// Errors: those of GenerateVideos.
func (c *Client) GenerateVideosFromSource(ctx context.Context, model string, source *genai.GenerateVideosSource, config *genai.GenerateVideosConfig) (*genai.GenerateVideosOperation, error) {
	var cfg genai.GenerateVideosConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	return mediaCall(ctx, c, opGenerateVideos, "GenerateVideos", model, 0, false, func(ctx context.Context, m *modelState) (*genai.GenerateVideosOperation, error) {
		return c.mediaFor(m).GenerateVideosFromSource(ctx, m.wire, source, &cfg)
	})
}

// The polls of WaitVideos: the first after videoPollFirst, then at doubling
// intervals up to videoPollMax (Veo takes from about 10 seconds to several
// minutes).
const (
	videoPollFirst = 5 * time.Second
	videoPollMax   = 30 * time.Second
)

// WaitVideos waits for op, the operation GenerateVideos returned for
// model, to be done, and returns it done: its Response holds the videos, or
// its Error why there are none (as genai's Operations.GetVideosOperation
// returns them). It polls the operation after 5s, then at doubling
// intervals up to 30s; each poll goes through the breaker of model's
// countTokens endpoint (polls are free of quota: not through the limiter)
// and classifier-driven retries, so a poll that fails with a 503 is
// retried, with backoff, within the call timeout of WithTimeouts. Only ctx
// bounds the whole wait. An op already done is returned at once.
//
// Errors: those of CountTokens for a poll whose retries all failed; the
// context's error when ctx ended; a refusal when model is "" or op is nil.
func (c *Client) WaitVideos(ctx context.Context, model string, op *genai.GenerateVideosOperation) (*genai.GenerateVideosOperation, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if op == nil {
		return nil, &requestError{where: "WaitVideos' operation", what: "is nil", fix: "pass the operation GenerateVideos returned"}
	}
	cfg := &genai.GetOperationConfig{HTTPOptions: withoutSDKRetry(nil, c.sdkRetries)}
	for delay := videoPollFirst; !op.Done; delay = min(2*delay, videoPollMax) {
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
		prev := op
		var err error
		op, err = mediaCallOn(ctx, c, endpointCount, opNone, "WaitVideos", model, 0, false, func(ctx context.Context, m *modelState) (*genai.GenerateVideosOperation, error) {
			return c.operationsFor(m).GetVideosOperation(ctx, prev, cfg)
		})
		if err != nil {
			return nil, err
		}
	}
	return op, nil
}

// imageCount is the images a call asks for: n, 1 when n is 0 (the API's
// default).
func imageCount(n int32) int {
	return max(int(n), 1)
}

// mediaCall sends one request of an image or video method (named method in
// errors, op in telemetry: its span and metrics) to model's generation
// endpoint through the call's bulkhead and the chain, without cascade or
// Fallback, reserving images from the
// model's IPM limiter. It refuses, before anything is sent, a Backend
// entry (which has no SDK client) and, when vertexOnly, a model called on
// the Gemini API, where the SDK has no such method.
func mediaCall[R any](ctx context.Context, c *Client, op operation, method, model string, images int, vertexOnly bool, send func(ctx context.Context, m *modelState) (R, error)) (R, error) {
	return mediaCallOn(ctx, c, endpointGenerate, op, method, model, images, vertexOnly, send)
}

// mediaCallOn is mediaCall through endpoint e's breaker (a metered one
// through the limiter); through endpointCount's, a read. A call of opNone
// records no telemetry.
func mediaCallOn[R any](ctx context.Context, c *Client, e endpoint, op operation, method, model string, images int, vertexOnly bool, send func(ctx context.Context, m *modelState) (R, error)) (resp R, err error) {
	if err := c.usable(ctx); err != nil {
		return resp, err
	}
	if model == "" {
		return resp, &requestError{where: possessive(method) + " model", what: "is empty", fix: "give the model's name"}
	}
	m := c.model(strings.TrimPrefix(model, "models/"))
	if m.via != nil && m.via.local {
		return resp, &requestError{where: fmt.Sprintf("%s model %q", possessive(method), model), what: "is a Backend (WithBackend), which generates only",
			fix: "call a Gemini model for it"}
	}
	if vertexOnly && !c.vertex(m) {
		return resp, &requestError{where: fmt.Sprintf("%s model %q", possessive(method), model), what: "is called on the Gemini API, where the SDK sends no " + method + " (Vertex AI only)",
			fix: "call the model through a Vertex AI SDK client (WithGenAIClient, WithModelBackend)"}
	}
	bh, err := c.enterBulkhead(ctx)
	if err != nil {
		return resp, err
	}
	defer bh.leave(&err)
	mc := newCall[R](ctx, c, e, model, nil)
	mc.only, mc.images, mc.op = true, images, op
	// Through countTokens' breaker go the reads (GetModel, WaitVideos'
	// polls): a 404 answers them, and cools no model outside the cascade.
	mc.read = e == endpointCount
	mc.send = func(ctx context.Context, _ *call[R], m *modelState) (R, error) { return send(ctx, m) }
	return mc.observed(ctx)
}

// possessive writes name's: "GetModel's", "GenerateImages'".
func possessive(name string) string {
	if strings.HasSuffix(name, "s") {
		return name + "'"
	}
	return name + "'s"
}

// mediaFor returns the SDK Models m's image and video requests go through:
// its backend's, or the Client's own.
func (c *Client) mediaFor(m *modelState) *genai.Models {
	if m.via != nil {
		return m.via.sdk.Models
	}
	return c.sdk().Models
}

// operationsFor returns the SDK Operations m's operations are polled
// through: its backend's, or the Client's own.
func (c *Client) operationsFor(m *modelState) *genai.Operations {
	if m.via != nil {
		return m.via.sdk.Operations
	}
	return c.sdk().Operations
}
