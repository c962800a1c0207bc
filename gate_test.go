package geminiguard

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/inert"
)

// Step tables of the call's layers on their own: the gate (admit, settle,
// abandon) and the retry decision (decide), over an inert upstream.

// newTestCall starts a generate call on c, first choice the primary.
func newTestCall(c *Client) *generateCall {
	return c.newGenerateCall(context.Background(), "", genai.Text("Say hi"), nil)
}

// trip opens br with as many counted failures as it takes.
func trip(br *breaker, now time.Time) {
	for br.state(now) != StateOpen {
		p, _, _ := br.allow(now)
		br.done(p, now, outcomeFailure)
	}
}

func TestAdmit(t *testing.T) {
	primary := chainModels[0]
	tests := []struct {
		name    string
		opts    []Option
		arrange func(c *Client, call *generateCall)
		step    step
		class   Class         // of the recorded attempt; ClassNone: none recorded
		is      error         // the recorded error matches it; nil: not checked
		delay   time.Duration // the token wait admit slept
	}{
		{name: "closed, no limits", step: stepGo},
		{
			name:    "deadline passed",
			arrange: func(_ *Client, call *generateCall) { call.deadline = call.now },
			step:    stepStop, class: ClassTimeout, is: context.DeadlineExceeded,
		},
		{
			name: "cooling down after a daily quota",
			arrange: func(c *Client, call *generateCall) {
				c.states[0].cool.set(call.now.Add(time.Hour), ClassDailyQuota)
			},
			step: stepNext, class: ClassCircuitOpen, is: ErrQuotaExhausted,
		},
		{
			name:    "breaker open",
			arrange: func(c *Client, call *generateCall) { trip(c.states[0].breakers[endpointGenerate], call.now) },
			step:    stepNext, class: ClassCircuitOpen, is: ErrCircuitOpen,
		},
		{
			name: "half-open, its one probe in flight",
			arrange: func(c *Client, call *generateCall) {
				br := c.states[0].breakers[endpointGenerate]
				trip(br, call.now.Add(-time.Hour))
				_, _, err := br.allow(br.snapshot(call.now.Add(-time.Hour)).OpenUntil) // probed as it turned half-open
				require.NoError(t, err)
			},
			step: stepNext, class: ClassCircuitOpen, is: ErrCircuitOpen,
		},
		{
			name: "half-open after a silence longer than it was open, a probe in flight",
			arrange: func(c *Client, call *generateCall) {
				br := c.states[0].breakers[endpointGenerate]
				p, _, err := br.allow(call.now.Add(-2 * time.Hour))
				require.NoError(t, err)
				br.done(p, call.now.Add(-2*time.Hour), outcomeSuccess) // the model has answered
				require.NotNil(t, br.sm.Trip(call.now.Add(-time.Hour)))
				_, _, err = br.allow(call.now)
				require.NoError(t, err)
			},
			step: stepGo,
		},
		{
			name: "out of requests for a minute, the next model free",
			opts: []Option{WithHeadroom(1), WithLimits(primary, Limits{RPM: 1})},
			arrange: func(c *Client, call *generateCall) {
				_, _, err := c.states[0].lim.reserve(call.now, 0, time.Time{})
				require.NoError(t, err)
			},
			step: stepNext, class: ClassLocalRateLimit, is: ErrRateLimited,
		},
		{
			name: "out of requests for a minute, no other model",
			opts: []Option{WithHeadroom(1), WithLimits(primary, Limits{RPM: 1})},
			arrange: func(c *Client, call *generateCall) {
				call.only = true
				_, _, err := c.states[0].lim.reserve(call.now, 0, time.Time{})
				require.NoError(t, err)
			},
			step: stepGo, delay: time.Minute,
		},
		{
			name: "the day's requests spent",
			opts: []Option{WithHeadroom(1), WithLimits(primary, Limits{RPD: 1})},
			arrange: func(c *Client, call *generateCall) {
				_, _, err := c.states[0].lim.reserve(call.now, 0, time.Time{})
				require.NoError(t, err)
			},
			step: stepNext, class: ClassLocalRateLimit, is: ErrQuotaExhausted,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := inertClient(t, inert.New(), tt.opts...)
				call := newTestCall(c)
				if tt.arrange != nil {
					tt.arrange(c, call)
				}
				sl := &retrySlot{m: c.states[0], tries: 1}
				start := time.Now()

				var a admission
				got, err := call.admit(t.Context(), sl, &a)

				assert.Equal(t, tt.step, got)
				assert.Equal(t, tt.delay, time.Since(start))
				assert.Equal(t, tt.delay, sl.delay)
				if tt.class == ClassNone {
					assert.Empty(t, call.attempts)
					require.NoError(t, err)
					assert.Same(t, c.states[0], a.m)
					c.settle(&a, call.now, nil, Verdict{})
					return
				}
				require.Len(t, call.attempts, 1)
				assert.Equal(t, tt.class, Classify(call.attempts[0].Err).Class)
				assert.Same(t, err, call.attempts[0].Err, "the recorded error is the one returned")
				if tt.is != nil {
					assert.ErrorIs(t, err, tt.is)
				}
				assert.Nil(t, a.br, "no admission")
			})
		})
	}
}

func TestAbandonFreesTheProbeSlotAndTheGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := inertClient(t, inert.New(), WithHeadroom(1), WithLimits(chainModels[0], Limits{RPM: 2}))
		call := newTestCall(c)
		br := c.states[0].breakers[endpointGenerate]
		trip(br, call.now.Add(-time.Hour))

		var a admission
		step, err := call.admit(t.Context(), &retrySlot{m: c.states[0]}, &a)
		require.NoError(t, err)
		require.Equal(t, stepGo, step)
		require.Equal(t, 1, br.snapshot(call.now).ProbesInFlight)

		a.abandon()
		a.abandon() // once only

		st := br.snapshot(call.now)
		assert.Equal(t, StateHalfOpen, State(st.State), "an abandoned probe says nothing about the model")
		assert.Zero(t, st.ProbesInFlight, "its slot is free")
		for range 2 { // the unsent request's RPM slot came back: two leave now
			_, wait, err := c.states[0].lim.reserve(call.now, 0, time.Time{})
			require.NoError(t, err)
			assert.Zero(t, wait)
		}
		c.settle(&a, call.now, errors.New("late"), Verdict{counts: true})
		assert.Zero(t, br.snapshot(call.now).ProbesInFlight, "a settled admission is not settled again")
		assert.Equal(t, StateHalfOpen, br.state(call.now))
	})
}

// lateContext has a deadline its Err does not report yet: the instant of a
// caller's deadline, before the context's timer fires.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

func TestAdmitAtTheCallersDeadlineReturnsTheCallersError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := inertClient(t, inert.New())
		ctx := lateContext{Context: t.Context(), deadline: time.Now()}
		call := c.newGenerateCall(ctx, "", genai.Text("Say hi"), nil)

		var a admission
		step, err := call.admit(ctx, &retrySlot{m: c.states[0], tries: 1}, &a)

		assert.Equal(t, stepStop, step)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, ClassCanceled, Classify(err).Class, "the caller's deadline, not the call timeout")
		assert.NotErrorIs(t, err, errCallTimeout)
	})
}
