package geminiguard

import (
	"context"
	"errors"

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

// run sends the call through the chain and ends it (finish): the cascade's
// models in order, each through retry (limiter, breaker, classifier-driven
// retries); rounds, when a model failed retryably while another could still
// answer; an early probe when nothing is left but open models; then the
// Fallback, else a *CascadeError.
func (call *call[R]) run(ctx context.Context) (R, error) {
	var zero R
	c := call.c
	if call.stream == nil { // a stream counts once, however many times it opens
		c.stats.calls.Add(1)
		defer call.recordUnfinished()
	}
	if err := c.projectCooling(call.now); err != nil {
		call.skip(c.model(call.firstModel()), err, 0)
		return call.finish(ctx, zero, nil, nil)
	}
	// The first round walks the cascade; a later round, after a backoff,
	// walks again the models that failed retryably while another model
	// could still answer (so a sick primary gets its retries too, after a
	// pause, and the call returns to it before giving up).
	var buf [4]retrySlot // rounds of short cascades stay off the heap
	slots := buf[:0]
	for _, m := range call.order() {
		slots = append(slots, retrySlot{m: m})
	}
	for round := 1; ; round++ {
		call.later = call.later[:0]
		for i := range slots {
			sl := &slots[i]
			if round > 1 && !c.budget.withdraw(call.now) {
				continue // the Client is retrying too much: no second rounds now
			}
			resp, next, err := call.retry(ctx, sl)
			switch next {
			case stepDone:
				return call.finish(ctx, resp, sl.m, nil)
			case stepStop:
				return call.finish(ctx, zero, nil, err)
			case stepProject:
				return call.finish(ctx, zero, nil, nil)
			case stepLater:
				call.later = append(call.later, *sl)
			}
		}
		if len(call.later) == 0 {
			break
		}
		switch err := call.pause(ctx, round); {
		case err == errNoTimeForRound:
			return call.finish(ctx, zero, nil, nil)
		case err != nil:
			return call.finish(ctx, zero, nil, err)
		}
		slots = append(slots[:0], call.later...)
	}
	switch resp, m, next, err := call.probeAllOpen(ctx); next {
	case stepDone:
		return call.finish(ctx, resp, m, nil)
	case stepStop:
		return call.finish(ctx, zero, nil, err)
	}
	return call.finish(ctx, zero, nil, nil)
}

// errNoTimeForRound: the backoff before another round would overrun the
// call's deadline.
var errNoTimeForRound = errors.New("geminiguard: no time left for another round")

// pause waits the backoff between two rounds of a call. It returns nil to
// start the next round; errNoTimeForRound, without waiting, when the wait
// would overrun the call's deadline (the last failure is then marked as cut
// short by it); the caller's context error, recorded as unsent with the
// time waited, when it ended during the wait.
func (call *call[R]) pause(ctx context.Context, round int) error {
	c := call.c
	first := &call.later[0]
	d, _ := c.cfg.retry.retryDelay(0, first.prev, round, c.jitter.float64())
	if !call.now.Add(d).Before(call.deadline) {
		for i := len(call.attempts) - 1; i >= 0; i-- {
			if a := call.attempts[i]; !a.Skipped { // skips share their errors: never modify those
				if me, ok := a.Err.(*ModelError); ok {
					me.Err = &waitError{Err: me.Err, Wait: d}
				}
				break
			}
		}
		return errNoTimeForRound
	}
	for i := range call.later {
		call.later[i].prev, call.later[i].delay = d, 0
	}
	first.delay = d
	c.retrying(ctx, RetryEvent{Model: first.m.name, Attempt: first.tries, Err: call.attempts[len(call.attempts)-1].Err, Delay: d})
	start := call.now
	if err := call.sleep(ctx, d); err != nil {
		return call.unsent(first.m, err, call.now.Sub(start))
	}
	return nil
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
	now := call.now
	after := false
	for _, m := range call.order() {
		if after && m.cooling(now) == nil && m.breakers[call.endpoint].state(now) != StateOpen {
			return true
		}
		after = after || m == current
	}
	return false
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
