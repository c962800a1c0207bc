// Package geminiguard calls the Gemini API in place of the official Go SDK
// (google.golang.org/genai), through one chain of defences, so that a 429, a
// 503, an exhausted daily quota, a retired model, an empty 200 or a stream
// that dies halfway reaches the caller as a good answer from another model, a
// clear typed error, or a deliberate fallback — never as silence.
//
// Start with New and Client.GenerateContent:
//
//	c, err := geminiguard.New(ctx,
//		geminiguard.WithAPIKey(key),
//		geminiguard.WithCascade("gemini-3.5-flash", "gemini-3.1-flash-lite"),
//		geminiguard.WithFallback(geminiguard.TextFallback("Busy; try again soon.")))
//	if err != nil {
//		return err // a bad option, a model the API does not list, a refused key
//	}
//	defer c.Close()
//	resp, err := c.GenerateContent(ctx, "", genai.Text("Hello"), nil)
//
// # The chain
//
// A call passes its wrappers once, then each of its upstream attempts passes
// the admission steps, in this order:
//
//	idempotency → dedupe → bulkhead → cascade( per model: retry( limiter → breaker → attempt ) ) → answer cache → Fallback
//
// The cascade walks WithCascade's models in order; for each, Classify's
// Verdict of a failure decides: retry the same model after a delay, move to
// the next model now, or stop. Models that are open, cooling down after a
// quota answer or a 404, throttled for failing most of their requests, or
// out of tokens before the deadline are skipped without a request.
// docs/architecture.md in the repository holds the whole story.
//
// # Errors
//
// Errors match the sentinels (ErrRateLimited, ErrQuotaExhausted,
// ErrCircuitOpen, ErrAllModelsFailed, ErrBlocked, ErrEmptyResponse,
// ErrStreamInterrupted, ErrBulkheadFull, ErrBudgetExhausted) with errors.Is,
// and carry details in *CascadeError, *ModelError, *ResponseError,
// *StreamError and *CoolingError. Classify reads any error into a Verdict,
// which names the rule that decided it (Verdict.Rule, e.g. quota_per_day,
// unsupported_feature); the Debug log lines of attempts and retries show it.
// A call the Fallback answered returns err == nil: IsFallback tells. A nil
// context, or a Client not made by New, is refused before anything is sent
// with an error that says what to pass; nothing panics.
//
// # Testing
//
// Package geminitest is the fake Gemini API this package is tested against;
// hand a Client the SDK client it configures (WithGenAIClient) and script
// the outage your code must survive, in fake time under testing/synctest.
package geminiguard
