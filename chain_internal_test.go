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
