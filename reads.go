package geminiguard

import (
	"context"

	"google.golang.org/genai"
)

// The reads of genai's Models: Get and List. They carry no prompt and cost
// no quota, and a model's description is that model's own, so neither goes
// through the limiter, a cascade or the Fallback.

// GetModel returns model's description (its token limits, supported
// actions, ...) as genai's Models.Get does; model may carry the "models/"
// prefix. It asks the model named only, through the call's bulkhead
// (InBulkhead), the breaker of the model's countTokens endpoint (the one
// CountTokens uses) and classifier-driven retries: a 503 is retried after
// a backoff, within the call timeout of WithTimeouts. It goes through the
// entry's own SDK client for a WithModelBackend entry. The caller's config
// is never mutated.
//
// Errors: those of CountTokens; for a model the API does not have, its
// 404 (Classify: ClassNotFound) within them, and a model outside the
// cascade is not cooled down for it (the next GetModel asks the API
// again; a cascade model's 404 cools it down, as any call's does); before
// anything is sent, a
// refusal that Classify reads as ClassBadRequest when model is "" or is a
// Backend entry (WithBackend).
func (c *Client) GetModel(ctx context.Context, model string, config *genai.GetModelConfig) (*genai.Model, error) {
	var cfg genai.GetModelConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.made() && c.sdkRetries)
	return mediaCallOn(ctx, c, endpointCount, opNone, "GetModel", model, 0, false, func(ctx context.Context, m *modelState) (*genai.Model, error) {
		return c.mediaFor(m).Get(ctx, m.wire, &cfg)
	})
}

// ListModels returns one page of the models of the Client's own SDK client
// (not of WithModelBackend entries), as genai's Models.List does: the
// config's PageSize and PageToken choose it. Ask for the next page with
// ListModels and PageToken set to the page's NextPageToken (the page's own
// Next goes to the SDK directly, past the Client). It sends exactly one
// request, with the SDK's own retry off, and retries nothing: a list
// names no model whose breaker or retries could apply. The caller's
// config is never mutated.
//
// Errors: the API's (a genai.APIError value, Classify reads it) or the
// transport's, as the SDK returns them; the context's error when the
// caller cancelled; ErrClosed after Close; before anything is sent, a
// refusal for a nil ctx or a Client not made by New.
func (c *Client) ListModels(ctx context.Context, config *genai.ListModelsConfig) (genai.Page[genai.Model], error) {
	if err := c.usable(ctx); err != nil {
		return genai.Page[genai.Model]{}, err
	}
	var cfg genai.ListModelsConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.sdkRetries)
	return c.api.List(ctx, &cfg)
}
