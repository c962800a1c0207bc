// Package failsafestack is the failsafe-go stack that geminiguard is
// measured against: what a Go developer who reads failsafe-go's
// documentation assembles around the genai SDK (SDK retry off). Per model,
// outermost first, the order failsafe-go's docs recommend:
//
//	Fallback(next model) → RetryPolicy → CircuitBreaker → RateLimiter → call
//
// with these settings:
//
//   - RetryPolicy: failsafe-go's default of 3 attempts, with exponential
//     backoff from 1s to 30s (WithBackoff) and ±25% jitter
//     (WithJitterFactor), on the status codes the SDK's own retry uses (408,
//     429, 500, 502, 503, 504) and transport errors; ReturnLastFailure so
//     the caller sees the API's error.
//   - CircuitBreaker, one per model: opens after 5 consecutive failures of
//     the same kinds (WithFailureThreshold, as gobreaker and geminiguard),
//     stays open 30s (WithDelay, as geminiguard's OpenFor) instead of the
//     library's 1-failure / 1-minute default; half-open uses failsafe-go's
//     default (the failure threshold: 5 trial executions).
//   - RateLimiter, one per model with a per-minute quota: bursty, RPM
//     permits per minute (NewBursty), the quota as the console shows it; no
//     wait (the library's default), so a refusal goes to the next model.
//   - HedgePolicy, only on a model with a HedgeAfter or a HedgeQuantile:
//     one hedge (failsafe-go's default), to the same model, if the attempt
//     has not answered after that fixed delay (NewWithDelay; the latency
//     scenarios), or after that quantile of the model's recent successful
//     durations (NewBuilderWithDelayQuantile, remembering HedgeAge
//     executions and hedging from the HedgeWarmup-th on) within a
//     budget.New() at its defaults (hedges and retries at most 20% of the
//     executions in flight, at least 3; the brownout family); the first
//     result wins and the other request is cancelled (the default). Inside
//     the retry, so each attempt is hedged; outside the breaker and the rate
//     limiter, so a hedge passes both like any request. With a fixed delay
//     no budget: the delay alone bounds the hedges.
//   - Fallback: on any error, the next model's stack; the last model has
//     none.
//
// The scenarios' failsafe arm (examples/internal/scenario) and this
// package's counterpart of the benchmark of geminiguard's chain alone
// (bench_test.go here, chain_bench_test.go at the root) both use it. It is
// test infrastructure, in the examples module: geminiguard itself never
// imports it, and failsafe-go is not a requirement of the library's module.
package failsafestack

import (
	"context"
	"errors"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/budget"
	"github.com/failsafe-go/failsafe-go/circuitbreaker"
	"github.com/failsafe-go/failsafe-go/fallback"
	"github.com/failsafe-go/failsafe-go/hedgepolicy"
	"github.com/failsafe-go/failsafe-go/ratelimiter"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"google.golang.org/genai"
)

// The stack's settings (see the package documentation).
const (
	Attempts  = 3
	BaseDelay = time.Second
	MaxDelay  = 30 * time.Second
	Jitter    = 0.25
	Threshold = 5
	OpenFor   = 30 * time.Second
	// HedgeAge and HedgeWarmup are the quantile hedge's memory and the
	// executions it records before it hedges.
	HedgeAge    = 200
	HedgeWarmup = 20
)

// Model is one model of the cascade the stack falls back along.
type Model struct {
	Name string
	RPM  int // per-minute quota; 0: no RateLimiter
	// HedgeAfter is the fixed delay of the model's HedgePolicy; 0: none.
	// Attempts run concurrently when it is set: an Attempt must not share
	// state between the attempts of a call.
	HedgeAfter time.Duration
	// HedgeQuantile, in (0, 1), is the quantile of the model's recent
	// successful durations after which its HedgePolicy hedges, within a
	// budget; 0: HedgeAfter decides. Attempts run concurrently as with
	// HedgeAfter.
	HedgeQuantile float64
}

// Stack runs calls through the per-model failsafe-go stacks, each falling
// back to the next model's. R is what one attempt returns. The executors are
// built once and shared by every call (a call's attempt travels in its
// context), so a Stack is safe for concurrent use.
type Stack[R any] struct {
	models []string
	execs  []failsafe.Executor[R]
	// Breakers are the models' circuit breakers, in cascade order.
	Breakers []circuitbreaker.CircuitBreaker[R]
}

// Attempt makes one attempt of a call on model.
type Attempt[R any] func(ctx context.Context, model string) (R, error)

// attemptKey carries a call's Attempt in the context its executions run
// with.
type attemptKey struct{}

// New returns the stack of models, primary first, its breakers open for
// openFor (OpenFor in the scenarios).
func New[R any](models []Model, openFor time.Duration) *Stack[R] {
	s := &Stack[R]{
		models:   make([]string, len(models)),
		execs:    make([]failsafe.Executor[R], len(models)),
		Breakers: make([]circuitbreaker.CircuitBreaker[R], len(models)),
	}
	retry := retrypolicy.NewBuilder[R]().
		HandleIf(transient[R]).
		WithMaxAttempts(Attempts).
		WithBackoff(BaseDelay, MaxDelay).
		WithJitterFactor(Jitter).
		ReturnLastFailure().
		Build()
	for i := len(models) - 1; i >= 0; i-- {
		m := models[i]
		s.models[i] = m.Name
		var policies []failsafe.Policy[R]
		if next := i + 1; next < len(models) {
			policies = append(policies, fallback.NewWithFunc(func(e failsafe.Execution[R]) (R, error) {
				return s.get(e.Context(), next)
			}))
		}
		s.Breakers[i] = circuitbreaker.NewBuilder[R]().
			HandleIf(transient[R]).
			WithFailureThreshold(Threshold).
			WithDelay(openFor).
			Build()
		policies = append(policies, retry)
		switch {
		case m.HedgeQuantile > 0:
			policies = append(policies, hedgepolicy.NewBuilderWithDelayQuantile[R](m.HedgeQuantile, HedgeAge, HedgeWarmup).
				WithBudget(budget.New()).
				Build())
		case m.HedgeAfter > 0:
			policies = append(policies, hedgepolicy.NewWithDelay[R](m.HedgeAfter))
		}
		policies = append(policies, s.Breakers[i])
		if m.RPM > 0 {
			policies = append(policies, ratelimiter.NewBursty[R](uint(m.RPM), time.Minute))
		}
		s.execs[i] = failsafe.With(policies...)
	}
	return s
}

// Run runs one call whose attempts are try, from the primary down.
func (s *Stack[R]) Run(ctx context.Context, try Attempt[R]) (R, error) {
	return s.get(context.WithValue(ctx, attemptKey{}, try), 0)
}

// get runs the call carried by ctx on models[i] through its stack.
func (s *Stack[R]) get(ctx context.Context, i int) (R, error) {
	try := ctx.Value(attemptKey{}).(Attempt[R])
	return s.execs[i].WithContext(ctx).GetWithExecution(func(e failsafe.Execution[R]) (R, error) {
		return try(e.Context(), s.models[i])
	})
}

// transient reports the errors the stack retries and counts as breaker
// failures: the SDK's own retryable status codes, and transport errors; not
// its own refusals (open breaker, rate limit) nor the caller's cancellation.
func transient[R any](_ R, err error) bool {
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
