package geminiguard

import (
	"context"
	"time"

	"google.golang.org/genai"
)

// A unary GenerateContent call passes through these wrappers, outermost
// first; each answers the call itself or hands it to the next. The order is
// the constants' order, and unary runs them in it:
//
//	deferral → idempotency → dedupe → bulkhead → chain (→ answer cache)
//
// Deferral comes first: it acts on the call's outcome, and the batch job it
// creates enters the bulkhead again, which a call holding a slot would wait
// for. The idempotency key comes next so that a replayed key is answered before
// anything else is spent; dedupe before the bulkhead so that a call joining
// another's flight takes no slot of its own; the bulkhead last so that only
// calls that will send hold a slot. The answer cache sits at the chain's
// end: it keeps each model's good answer and serves one when every model
// failed (finish, in chain.go).
type wrapper int

const (
	wrapDeferrable  wrapper = iota // Deferrable: a call every model failed for a reason a batch outlives goes to the Batch API lane (batch.go)
	wrapIdempotency                // Idempotent: the key's stored answer, its call in flight, or a new call whose answer is stored (idempotency.go)
	wrapDedupe                     // WithDedup: the same request's call in flight, or a new one that others join (dedup.go)
	wrapBulkhead                   // InBulkhead, WithBulkhead: a slot of the call's bulkhead for the rest (bulkhead.go)
	wrapChain                      // limiter → breaker → retry → cascade (chain.go); the answer cache keeps a good answer (cachefb.go)
)

// generateRequest is one GenerateContent call's request as the wrappers
// hand it down. It is not shared between calls: a wrapper that runs the
// rest of the call as a flight (which other calls join) gives the flight a
// copy, so the caller's stays on its stack.
type generateRequest struct {
	model    string
	contents []*genai.Content
	config   *genai.GenerateContentConfig
	// start is when a wrapper that shares answers began waiting; digest
	// the request's fingerprint (requestDigest). Both are set only when the
	// call may share its answer (WithDedup, Idempotent) and the request has
	// a digest (shared): a request without one is sent on its own.
	start  time.Time
	digest digest
	shared bool
	// What the caller's context asks of the call, read once where the
	// call enters (each lookup walks the context's whole chain): the
	// idempotency key (Idempotent; "" for none), the deferral (Deferrable)
	// and the bulkhead's name (InBulkhead; named false for none).
	key      string
	deferred bool
	bulkhead string
	named    bool
}

// init fills the zero request r of a GenerateContent call of c made with
// ctx, with what ctx asks of it; digested when the call may share its answer
// (WithDedup, Idempotent).
func (r *generateRequest) init(ctx context.Context, c *Client, model string, contents []*genai.Content, config *genai.GenerateContentConfig) {
	r.model, r.contents, r.config = model, contents, config
	r.key = idempotencyKeyFrom(ctx)
	r.deferred, _ = ctx.Value(deferrableKey{}).(bool)
	r.bulkhead, r.named = bulkheadFrom(ctx)
	if c.cfg.dedup || r.key != "" {
		r.start = time.Now()
		r.digest, r.shared = requestDigest(model, contents, config)
	}
}

// unary runs the call of r through the wrappers from the given one on,
// passing over those with nothing to do for it: what ctx asked of the call
// (r) and the Client's options say which. The common call (no Deferrable,
// no idempotency key, no WithDedup, no bulkhead) goes straight to the
// chain.
func (c *Client) unary(ctx context.Context, r *generateRequest, from wrapper) (*genai.GenerateContentResponse, error) {
	for w := from; ; w++ {
		switch w {
		case wrapDeferrable:
			if r.deferred {
				return c.generateDeferrable(ctx, r)
			}
		case wrapIdempotency:
			if r.key != "" && r.shared {
				return c.generateIdempotent(ctx, r.key, r)
			}
		case wrapDedupe:
			if c.cfg.dedup && r.shared {
				return c.generateDeduplicated(ctx, r)
			}
		case wrapBulkhead:
			if r.named || len(c.bulkheads) != 0 {
				return c.generateInBulkhead(ctx, r)
			}
		default: // wrapChain
			return c.generateByChain(ctx, r)
		}
	}
}

// generateDeferrable runs the rest of the call and, when every model
// failed for a reason a batch job outlives, submits it to the Batch API
// lane instead (deferCall).
func (c *Client) generateDeferrable(ctx context.Context, r *generateRequest) (*genai.GenerateContentResponse, error) {
	resp, err := c.unary(ctx, r, wrapIdempotency)
	if err != nil {
		err = c.deferCall(ctx, r.model, r.contents, r.config, err)
	}
	return resp, err
}

// generateInBulkhead holds a slot of the call's bulkhead while the chain
// runs it.
func (c *Client) generateInBulkhead(ctx context.Context, r *generateRequest) (resp *genai.GenerateContentResponse, err error) {
	bh, err := c.enterNamedBulkhead(ctx, r.bulkhead, r.named)
	if err != nil {
		return nil, err
	}
	defer bh.leave(&err)
	return c.unary(ctx, r, wrapChain)
}

// generateByChain sends the request through the chain and keeps a good
// answer in the answer cache (WithAnswerCache). The call's state goes back
// to generateCalls once it returned; a call a panic ended leaves it to the
// collector (no defer on the path of every call).
func (c *Client) generateByChain(ctx context.Context, r *generateRequest) (*genai.GenerateContentResponse, error) {
	call := c.newGenerateCall(ctx, r.model, r.contents, r.config)
	call.complete, call.learns = completeAnswer, true
	resp, err := call.observed(ctx)
	releaseGenerateCall(call)
	if err == nil && c.cfg.answers != nil {
		c.cacheAnswer(ctx, r.model, r.contents, r.config, resp)
	}
	return resp, err
}
