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
// A call passes its wrappers once, outermost first, then the cascade; each
// upstream attempt passes the admission steps of chain.go, in this order:
//
//	deferral → idempotency key → dedupe → bulkhead (unary.go) → cascade over the models, in rounds:
//	  retry( admit → attempt (hedged when enabled) → settle → decide )
//	  admit = deadline → model config → budget → cool-down → breaker open?
//	          → throttle → limiter (RPM, TPM, RPD, IPM) → fleet lease → breaker permit
//	→ answer cache → Fallback, when every model failed (→ the Batch API lane, for a Deferrable call)
//
// For each failure, Classify's Verdict decides: retry the same model after
// a delay, move to the next model now, or stop. A refused step skips the
// model without a request. An open breaker refuses for MinOpenFor (2s),
// doubled on each failed probe up to OpenFor (30s). A tool loop moved to
// another model gets its turns as Google documents (other models' thought
// signatures dropped), on a copy. docs/architecture.md has the whole story.
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
// with an error that says what to pass; nothing panics. After Close every
// method refuses with ErrClosed. Client.Warnings returns the latest
// CheckCascade's warnings.
//
// # Testing
//
// Package geminitest is the fake Gemini API this package is tested against:
// script the outage your code must survive, in fake time (testing/synctest).
package geminiguard
