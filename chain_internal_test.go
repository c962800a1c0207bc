package geminiguard

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geminiguard/geminiguard/internal/inert"
	"github.com/stretchr/testify/assert"
)

func TestDecide(t *testing.T) {
	retryable := Verdict{Class: ClassOverloaded, Retryable: true, Scope: ScopeModel, counts: true}
	tests := []struct {
		name    string
		v       Verdict
		tries   int
		only    bool                                // the primary alone: no other model to move to
		arrange func(c *Client, call *generateCall) // before deciding
		step    step
		wait    bool // a retry waits a positive backoff
		overrun bool // the error says a retry would overrun the deadline
	}{
		{name: "caller cancelled", v: base(ClassCanceled), tries: 1, step: stepStop},
		{name: "bad request", v: base(ClassBadRequest), tries: 1, step: stepStop},
		{name: "spend cap", v: base(ClassSpendCap), tries: 1, step: stepProject},
		{name: "daily quota", v: base(ClassDailyQuota), tries: 1, step: stepNext},
		{name: "attempts spent", v: retryable, tries: 4, only: true, step: stepNext},
		{name: "another model free", v: retryable, tries: 1, step: stepLater},
		{name: "nothing else: retry", v: retryable, tries: 1, only: true, step: stepRetry, wait: true},
		{
			name: "a retry would overrun the deadline", v: retryable, tries: 1, only: true,
			arrange: func(_ *Client, call *generateCall) { call.deadline = call.now.Add(time.Millisecond) },
			step:    stepNext, overrun: true,
		},
		{
			name: "retry budget spent", v: retryable, tries: 1, only: true,
			arrange: func(c *Client, call *generateCall) {
				for c.budget.withdraw(call.now) {
				}
			},
			step: stepNext,
		},
		{
			name: "this failure opened the breaker", v: retryable, tries: 1, only: true,
			arrange: func(c *Client, call *generateCall) { trip(c.states[0].breakers[endpointGenerate], call.now) },
			step:    stepNext,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := inertClient(t, inert.New(), WithJitterSource(rand.NewPCG(1, 2))) // the backoff over the 1ms left, every run
				call := newTestCall(c)
				call.only = tt.only
				if tt.arrange != nil {
					tt.arrange(c, call)
				}
				cause := errors.New("the attempt's error")

				got, d, err := call.decide(&retrySlot{m: c.states[0], tries: tt.tries}, tt.v, cause)

				assert.Equal(t, tt.step, got)
				assert.Equal(t, tt.wait, d > 0, "backoff %v", d)
				assert.ErrorIs(t, err, cause)
				assert.Equal(t, tt.overrun, errors.Is(err, context.DeadlineExceeded))
			})
		})
	}
}

// TestAttemptEndingAtTheCallersDeadlineIsTheCallers: an attempt bounded by
// the caller's deadline has a timer of its own for the same instant; when
// it fires first, the request fails before the caller's context is marked
// done. The failure is the caller's deadline (ClassCanceled: the model's
// breaker counts nothing), not the model's timeout: before, it read as an
// attempt timeout, and TestCallerDeadlineBoundsTheAttempt failed so in 3
// runs of 200 under -race beside two busy CPU loops.
func TestAttemptEndingAtTheCallersDeadlineIsTheCallers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := inertClient(t, inert.New())
		call := newTestCall(c)
		now := time.Now()
		caller := lateContext{Context: t.Context(), deadline: now} // its timer not fired yet

		_, v, _, err := call.ended(caller, c.states[0], now.Add(-3*time.Second), now, 0, false, true, nil, context.DeadlineExceeded)

		assert.Equal(t, ClassCanceled, v.Class)
		var timeout *attemptTimeoutError
		assert.False(t, errors.As(err, &timeout), "not the model's timeout: %v", err)
	})
}
