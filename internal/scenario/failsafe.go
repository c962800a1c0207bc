package scenario

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/fallback"
	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"google.golang.org/genai"
)

// The failsafe arm's settings: what a Go developer who reads failsafe-go's
// documentation assembles around the genai SDK (SDK retry off). Per model,
// outermost first, the order failsafe-go's docs recommend:
//
//		Fallback(next model) → RetryPolicy → CircuitBreaker → RateLimiter → SDK call
//
//	  - RetryPolicy: failsafe-go's default of 3 attempts, with exponential
//	    backoff from 1s to 30s (WithBackoff) and ±25% jitter
//	    (WithJitterFactor), on the status codes the SDK's own retry uses (408,
//	    429, 500, 502, 503, 504) and transport errors; ReturnLastFailure so
//	    the caller sees the API's error.
//	  - CircuitBreaker, one per model: opens after 5 consecutive failures of
//	    the same kinds (WithFailureThreshold, as gobreaker and geminiguard),
//	    stays open 30s (WithDelay, as geminiguard's OpenFor) instead of the
//	    library's 1-failure / 1-minute default; half-open uses failsafe-go's
//	    default (the failure threshold: 5 trial executions).
//	  - RateLimiter, one per model with a per-minute quota: bursty, RPM
//	    permits per minute (NewBursty), the quota as the console shows it; no
//	    wait (the library's default), so a refusal goes to the next model.
//	  - Fallback: on any error, the next model's stack; the last model has
//	    none.
const (
	failsafeAttempts  = 3
	failsafeBaseDelay = time.Second
	failsafeMaxDelay  = 30 * time.Second
	failsafeJitter    = 0.25
	failsafeThreshold = 5
	failsafeOpenFor   = 30 * time.Second
)

// FailsafeArm is the failsafe-go stack described above.
func FailsafeArm() Arm {
	return Arm{Name: "failsafe", New: func(ctx context.Context, env Env) (Caller, error) {
		c, err := newClient(ctx, env, nil)
		if err != nil {
			return nil, err
		}
		return newFailsafeCaller(c.Models, env.Scenario), nil
	}}
}

// failsafeCaller runs each call through the per-model failsafe-go stacks.
type failsafeCaller struct {
	models []string
	execs  []failsafe.Executor[Outcome] // per model; each falls back to the next
	api    *genai.Models
}

// attemptFunc makes one attempt of a call on model.
type attemptFunc func(ctx context.Context, model string) (Outcome, error)

// attemptKey carries a call's attemptFunc in the context its executions
// run with, so the executors are built once and shared by every call.
type attemptKey struct{}

func newFailsafeCaller(api *genai.Models, sc *Scenario) *failsafeCaller {
	models := sc.Models
	f := &failsafeCaller{api: api, models: sc.names(), execs: make([]failsafe.Executor[Outcome], len(models))}
	retry := retrypolicy.NewBuilder[Outcome]().
		HandleIf(transient).
		WithMaxAttempts(failsafeAttempts).
		WithBackoff(failsafeBaseDelay, failsafeMaxDelay).
		WithJitterFactor(failsafeJitter).
		ReturnLastFailure().
		Build()
	for i := len(models) - 1; i >= 0; i-- {
		m := models[i]
		var policies []failsafe.Policy[Outcome]
		if i < len(models)-1 {
			next := i + 1
			policies = append(policies, fallback.NewWithFunc(func(e failsafe.Execution[Outcome]) (Outcome, error) {
				return f.get(e.Context(), next)
			}))
		}
		policies = append(policies, retry, circuitbreaker.NewBuilder[Outcome]().
			HandleIf(transient).
			WithFailureThreshold(failsafeThreshold).
			WithDelay(failsafeOpenFor).
			Build())
		if m.Quota.RPM > 0 {
			policies = append(policies, ratelimiter.NewBursty[Outcome](uint(m.Quota.RPM), time.Minute))
		}
		f.execs[i] = failsafe.With(policies...)
	}
	return f
}

// get runs the call carried by ctx on models[i] through its stack.
func (f *failsafeCaller) get(ctx context.Context, i int) (Outcome, error) {
	try := ctx.Value(attemptKey{}).(attemptFunc)
	return f.execs[i].WithContext(ctx).GetWithExecution(func(e failsafe.Execution[Outcome]) (Outcome, error) {
		return try(e.Context(), f.models[i])
	})
}

// run runs one call whose attempts are try.
func (f *failsafeCaller) run(ctx context.Context, try attemptFunc) Outcome {
	out, err := f.get(context.WithValue(ctx, attemptKey{}, try), 0)
	out.Err = err
	return out
}

func (f *failsafeCaller) Generate(ctx context.Context, call int) Outcome {
	return f.run(ctx, func(ctx context.Context, model string) (Outcome, error) {
		out := generate(ctx, f.api.GenerateContent, model, call)
		return out, out.Err
	})
}

// Stream shows each chunk to the user as it arrives, as a streaming UI
// does; an attempt cut midway is retried (or falls back) from the start,
// and what the user already saw stays on screen.
func (f *failsafeCaller) Stream(ctx context.Context, call int) Outcome {
	var shown Outcome
	return f.run(ctx, func(ctx context.Context, model string) (Outcome, error) {
		err := collect(f.api.GenerateContentStream(ctx, model, genai.Text(Prompt(call)), nil), &shown)
		return shown, err
	})
}

// transient reports the errors the failsafe arm retries and counts as
// breaker failures: the SDK's own retryable status codes, and transport
// errors; not its own refusals (open breaker, rate limit) nor the caller's
// cancellation.
func transient(_ Outcome, err error) bool {
	if err == nil {
		return false
	}
	var apiErr genai.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.Code {
		case 408, 429, 500, 502, 503, 504:
			return true
		}
		return false
	}
	return !errors.Is(err, circuitbreaker.ErrOpen) && !errors.Is(err, ratelimiter.ErrExceeded) &&
		!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
