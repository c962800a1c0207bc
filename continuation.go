package geminiguard

import (
	"context"
	"errors"

	"google.golang.org/genai"
)

// An answer the server paused with finishReason CONTINUATION is completed by
// hops: each requests the next part with the pause's continuation token.
// The SDK's own continuation is off (its hops would bypass the limiter and
// the breaker); ours are part of the call that got the first part: the same
// deadline, the answering model alone (no other model can use its token),
// never the Fallback (a canned text cannot finish a model's answer).

// maxContinuationHops bounds the CONTINUATION hops of one answer (the SDK's
// own loop has no bound).
const maxContinuationHops = 32

// errTooManyHops ends an answer (unary or streamed) whose server kept
// answering CONTINUATION.
var errTooManyHops = errors.New("geminiguard: answer paused with CONTINUATION more than 32 times")

// continuationOf returns the token of an answer paused with finishReason
// CONTINUATION, nil for any other answer.
func continuationOf(resp *genai.GenerateContentResponse) []byte {
	if finishReasonOf(resp) != genai.FinishReasonContinuation {
		return nil
	}
	return resp.Candidates[0].ContinuationToken
}

// completeAnswer completes m's answer resp when the server paused it: each
// hop goes to m alone, through the gate and retries like any attempt of the
// call, and its parts are joined into resp, whose UsageMetadata becomes the
// last hop's. A hop that fails fails the call with a *StreamError carrying
// the text so far and the hop's error; it is never silently short.
func completeAnswer(ctx context.Context, call *generateCall, resp *genai.GenerateContentResponse, m *modelState) (*genai.GenerateContentResponse, error) {
	if continuationOf(resp) == nil {
		return resp, nil
	}
	call.only, call.first, call.fallback = true, m.name, nil
	call.later = call.later[:0]
	for range maxContinuationHops {
		tok := continuationOf(resp)
		if tok == nil {
			return resp, nil
		}
		var cfg genai.GenerateContentConfig
		if call.user != nil {
			cfg = *call.user
		}
		cfg.ContinuationToken = tok
		call.config = callConfig(&cfg, call.c.sdkRetries)
		more, next, err := call.retry(ctx, &retrySlot{m: m})
		if next != stepDone {
			return nil, &StreamError{Model: m.name, Partial: textOf(resp), Err: err}
		}
		cand, part := resp.Candidates[0], more.Candidates[0]
		if cand.Content == nil {
			cand.Content = &genai.Content{Role: genai.RoleModel}
		}
		if part.Content != nil {
			cand.Content.Parts = append(cand.Content.Parts, part.Content.Parts...)
		}
		cand.FinishReason, cand.ContinuationToken = part.FinishReason, part.ContinuationToken
		resp.UsageMetadata = more.UsageMetadata
	}
	return nil, &StreamError{Model: m.name, Partial: textOf(resp), Err: errTooManyHops}
}
