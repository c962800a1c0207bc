package geminiguard

import (
	"context"

	"google.golang.org/genai"
)

// FallbackModelVersion is the ModelVersion of a response the Fallback gave
// when the Fallback left ModelVersion empty. IsFallback tells a Fallback's
// answer whatever its ModelVersion.
const FallbackModelVersion = "geminiguard-fallback"

// Fallback is the last resort of a call whose models all failed: a cache, a
// default text, another provider. It is not called for request-scoped
// failures (bad request, safety block) or after the caller cancelled. A nil
// response or a non-nil error means "no answer": the call then returns
// req.Err. It must be safe for concurrent use.
type Fallback func(ctx context.Context, req FallbackRequest) (*genai.GenerateContentResponse, error)

// FallbackRequest is what the Fallback gets to answer.
type FallbackRequest struct {
	Model    string // the call's first choice
	Contents []*genai.Content
	Config   *genai.GenerateContentConfig // the caller's, do not modify
	Err      *CascadeError                // why every model failed
}

// TextFallback returns a Fallback that answers every call with text.
func TextFallback(text string) Fallback {
	return func(context.Context, FallbackRequest) (*genai.GenerateContentResponse, error) {
		return &genai.GenerateContentResponse{
			Candidates: []*genai.Candidate{{
				Content:      genai.NewContentFromText(text, genai.RoleModel),
				FinishReason: genai.FinishReasonStop,
			}},
		}, nil
	}
}

// order returns the call's models: the first choice, then (unless only) the
// cascade.
func (call *call[R]) order() []*modelState {
	if call.only {
		return call.c.model(call.firstModel()).self
	}
	return call.c.order(call.first)
}

// hasNext reports whether a model after current in the call's order could
// take a request now (not open, not cooling down).
func (call *call[R]) hasNext(current *modelState) bool {
	return call.nextAfter(current) != nil
}

// nextAfter returns the first model after current in the call's order that
// could take a request now (not open, not cooling down): the one a refusal
// of current moves the call to. Nil when none.
func (call *call[R]) nextAfter(current *modelState) *modelState {
	now := call.now
	after := false
	for _, m := range call.order() {
		if after && m.cooling(now) == nil && m.breakers[call.endpoint].state(now) != StateOpen {
			return m
		}
		after = after || m == current
	}
	return nil
}

// order returns the models of a call: first (when given), then the cascade
// in order without repeating first. It allocates only for a first choice
// other than the primary.
func (c *Client) order(first string) []*modelState {
	if first == "" || first == c.cascade[0] {
		return c.states
	}
	out := make([]*modelState, 0, len(c.states)+1)
	out = append(out, c.model(first))
	for _, m := range c.states {
		if m.name != first {
			out = append(out, m)
		}
	}
	return out
}
