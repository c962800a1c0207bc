package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// ErrModelNotFound: CheckCascade did not find a cascade model among the
	// models the API lists for this key.
	ErrModelNotFound = errors.New("geminiguard: model not found")
	// ErrBulkheadFull: the call's bulkhead (WithBulkhead) had every slot
	// taken and no room in its queue, or the call waited in the queue for
	// QueueTimeout or until the caller's deadline (then the error matches
	// context.DeadlineExceeded too). Nothing was sent; Classify reads it as
	// ClassBulkheadFull.
	ErrBulkheadFull = errors.New("geminiguard: bulkhead full")
	// ErrBudgetExhausted: the Client's spend reached its daily or monthly
	// Budget (WithBudget), so no request was sent; the error says until
	// when. Classify reads it as ClassBudgetExhausted, project scope: the
	// cascade stops there, and the Fallback may answer.
	ErrBudgetExhausted = errors.New("geminiguard: budget exhausted")
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
	Err     error  // cause: a transport error, an APIError, a *ResponseError, or the end of the body without a finishReason
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
	Skipped bool          // no request was sent (breaker open, cooling down, out of tokens; or the call ended first: the caller cancelled during the wait before it, Delay then the time waited, or the deadline passed)
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

// ModelError is the failure of one model within a call: the error the API or
// the transport returned (or why no request was sent), with its Verdict.
// It matches ErrRateLimited for per-minute quotas and local token waits,
// ErrQuotaExhausted for daily, zero and spend quotas, ErrCircuitOpen for
// models refused by their breaker or cool-down, and unwraps to the cause
// (errors.As(err, &genai.APIError{}) works). Returned as a pointer.
type ModelError struct {
	Model   string
	Verdict Verdict
	Err     error
}

func (e *ModelError) Error() string {
	inner := e.Err.Error()
	if strings.Contains(inner, e.Model) { // our own errors name the model already
		return inner
	}
	return fmt.Sprintf("geminiguard: model %s: %s: %s", e.Model, e.Verdict.Class, strings.TrimPrefix(inner, "geminiguard: "))
}

// Unwrap returns the cause.
func (e *ModelError) Unwrap() error { return e.Err }

// Is reports the sentinels of the verdict's class (see Class.matches).
func (e *ModelError) Is(target error) bool { return e.Verdict.Class.matches(target) }

// classSentinels is the one table from classes to the sentinels their
// errors match with errors.Is: the Is methods of our errors that carry a
// class, and Classify, read it. A class matches each sentinel of whose row it is part; a bare
// sentinel (an error that matches it and carries nothing more precise) is
// classified as the first class of its row, and Classify tries the rows in
// order. ErrBlocked, ErrEmptyResponse and ErrStreamInterrupted are not
// here: only *ResponseError and *StreamError carry them, with the detail
// their verdict needs.
var classSentinels = [...]struct {
	sentinel error
	classes  []Class
}{
	{ErrCircuitOpen, []Class{ClassCircuitOpen}},
	{ErrRateLimited, []Class{ClassLocalRateLimit, ClassRateLimit}},
	{ErrQuotaExhausted, []Class{ClassDailyQuota, ClassNoQuota, ClassSpendCap}},
}

// matches reports whether an error of class c matches target, a sentinel
// of classSentinels.
func (c Class) matches(target error) bool {
	for _, row := range classSentinels {
		if row.sentinel == target {
			return slices.Contains(row.classes, c)
		}
	}
	return false
}

// CoolingError says why no request was sent to a model: it is cooling down
// after a quota answer or a 404 (or the whole project is, after a
// project-scoped failure), until Until. It matches ErrCircuitOpen, and
// ErrQuotaExhausted or ErrRateLimited after quota answers. Returned as a
// pointer.
type CoolingError struct {
	Model  string    // "" when the whole project is cooling down
	Until  time.Time // zero-padded far future for retired models: until CheckCascade sees them
	Reason Class     // the class of the failure that started the cool-down
}

func (e *CoolingError) Error() string {
	who := "project"
	if e.Model != "" {
		who = "model " + e.Model
	}
	if e.Reason == ClassNotFound || e.Until.Year() > 9000 {
		return fmt.Sprintf("geminiguard: %s cooling down after %s until CheckCascade sees it again", who, e.Reason)
	}
	return fmt.Sprintf("geminiguard: %s cooling down after %s until %s", who, e.Reason, e.Until.UTC().Format(time.RFC3339))
}

// Is reports ErrCircuitOpen, and the sentinels of Reason (see Class.matches).
func (e *CoolingError) Is(target error) bool {
	return target == ErrCircuitOpen || e.Reason.matches(target)
}

// waitError marks a failure whose retry was not attempted because the wait
// would have overrun the call's deadline. It matches
// context.DeadlineExceeded and unwraps to the failure.
type waitError struct {
	Err  error
	Wait time.Duration
}

func (e *waitError) Error() string {
	return fmt.Sprintf("%v (a retry after %v would overrun the call's deadline)", e.Err, e.Wait)
}

func (e *waitError) Is(target error) bool { return target == context.DeadlineExceeded }
func (e *waitError) Unwrap() error        { return e.Err }
