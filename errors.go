package geminiguard

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/genai"
)

// Sentinel errors. Every error a Client method returns matches at most a few of
// these with errors.Is; details travel in the typed errors below.
var (
	// ErrCircuitOpen: the model's circuit breaker is open (or it is cooling down
	// after a quota answer), so no request was sent to it.
	ErrCircuitOpen = errors.New("geminiguard: circuit open")
	// ErrRateLimited: the local token bucket could not grant the request before
	// the call's deadline, or the server answered a per-minute 429.
	ErrRateLimited = errors.New("geminiguard: rate limited")
	// ErrQuotaExhausted: a quota that a short wait will not restore: the daily
	// quota, a limit of zero on this tier, or the project's spend cap.
	ErrQuotaExhausted = errors.New("geminiguard: quota exhausted")
	// ErrAllModelsFailed: every model of the cascade failed or was skipped and
	// no Fallback answered. The error is a *CascadeError.
	ErrAllModelsFailed = errors.New("geminiguard: all models failed")
	// ErrEmptyResponse: HTTP 200 without usable content (no candidates, no
	// parts, finishReason OTHER, MALFORMED_FUNCTION_CALL or MAX_TOKENS with
	// nothing generated). The error is a *ResponseError.
	ErrEmptyResponse = errors.New("geminiguard: empty response")
	// ErrBlocked: the prompt or the answer was blocked (promptFeedback.blockReason,
	// finishReason SAFETY, RECITATION, PROHIBITED_CONTENT, BLOCKLIST, SPII, ...).
	// The error is a *ResponseError.
	ErrBlocked = errors.New("geminiguard: blocked")
	// ErrStreamInterrupted: a stream ended before its final chunk after some
	// text had been yielded. The error is a *StreamError carrying that text.
	ErrStreamInterrupted = errors.New("geminiguard: stream interrupted")
)

// ResponseError reports a quiet failure: an HTTP 200 whose body carries no
// usable answer. It matches ErrBlocked or ErrEmptyResponse (see Kind) and keeps
// the response for inspection. Returned as a pointer.
type ResponseError struct {
	Kind     error  // ErrBlocked or ErrEmptyResponse
	Model    string // model that answered
	Reason   string // blockReason or finishReason as the API sent it, or "NO_CANDIDATES" / "NO_PARTS"
	Response *genai.GenerateContentResponse
}

func (e *ResponseError) Error() string {
	return fmt.Sprintf("%s: model %s: %s", e.Kind.Error(), e.Model, e.Reason)
}

// Unwrap returns Kind, so errors.Is(err, ErrBlocked) works.
func (e *ResponseError) Unwrap() error { return e.Kind }

// StreamError reports a stream that stopped after text had been yielded to the
// caller: a transport cut, an error object inside the 200 stream, or a clean
// end without any finishReason. It matches ErrStreamInterrupted and unwraps to
// the cause. Returned as a pointer.
type StreamError struct {
	Model   string // model whose stream was cut
	Partial string // text yielded before the cut
	Err     error  // cause: a transport error, an APIError, or errNoFinishReason
}

func (e *StreamError) Error() string {
	return fmt.Sprintf("geminiguard: stream interrupted: model %s after %d bytes: %v", e.Model, len(e.Partial), e.Err)
}

// Is reports ErrStreamInterrupted.
func (e *StreamError) Is(target error) bool { return target == ErrStreamInterrupted }

// Unwrap returns the cause.
func (e *StreamError) Unwrap() error { return e.Err }

// errNoFinishReason is the cause of a stream that ended cleanly without any
// finishReason: the SDK reports nothing, we report a cut.
var errNoFinishReason = errors.New("geminiguard: stream ended without finishReason")

// Attempt records one try of one model within a call: skipped models (open
// breaker, cool-down, no tokens) appear with Skipped set and no request sent.
type Attempt struct {
	Model   string        // model tried
	Err     error         // nil for the attempt that answered
	Delay   time.Duration // wait before this attempt (backoff, server-stated delay or token wait)
	Elapsed time.Duration // time the upstream request took; 0 when skipped
	Skipped bool          // no request was sent (breaker open, cooling down, out of tokens)
}

// CascadeError is returned when every model failed or was skipped and no
// Fallback answered. It matches ErrAllModelsFailed, and through Unwrap every
// attempt's error (so errors.Is(err, ErrQuotaExhausted) tells whether a quota
// was involved). Classify(err) gives the verdict of the last failure that
// decided the outcome. Returned as a pointer.
type CascadeError struct {
	Attempts []Attempt
}

func (e *CascadeError) Error() string {
	var b strings.Builder
	b.WriteString("geminiguard: all models failed")
	sep := ": "
	for _, a := range e.Attempts {
		if a.Err == nil {
			continue
		}
		fmt.Fprintf(&b, "%s%s: %v", sep, a.Model, a.Err)
		sep = "; "
	}
	return b.String()
}

// Is reports ErrAllModelsFailed.
func (e *CascadeError) Is(target error) bool { return target == ErrAllModelsFailed }

// Unwrap returns every attempt's error, in order.
func (e *CascadeError) Unwrap() []error {
	errs := make([]error, 0, len(e.Attempts))
	for _, a := range e.Attempts {
		if a.Err != nil {
			errs = append(errs, a.Err)
		}
	}
	return errs
}

// last returns the error of the last attempt that failed, nil when none did.
func (e *CascadeError) last() error {
	for i := len(e.Attempts) - 1; i >= 0; i-- {
		if e.Attempts[i].Err != nil {
			return e.Attempts[i].Err
		}
	}
	return nil
}
