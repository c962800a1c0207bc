package geminiguard

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/genai"
)

// A call is one Client method call across its attempts and models: this
// file holds its state, how it starts, and its records (skips, failures,
// answers); chain.go walks it through the chain in call order.

// generateCall is a generate or stream call.
type generateCall = call[*genai.GenerateContentResponse]

// call is the state of one Client call across its attempts and models. R is
// the SDK's response type of the endpoint called.
type call[R any] struct {
	callState[R]

	// adm is the admission of the call's latest request (retry's): it
	// holds nothing until admit fills it, and is settled by try; retry
	// clears it before the next. Outside callState, it is zeroed when a
	// request was admitted, not once a call (680 bytes, mostly grants a
	// refused call never takes): admit takes it as a refusal left it.
	adm admission
}

// callState is a call's state but its admission: what releaseGenerateCall
// zeroes whole.
type callState[R any] struct {
	c        *Client
	first    string
	endpoint endpoint
	op       operation // what its telemetry names it (otel.go); by default the endpoint's
	only     bool      // the first model alone, no cascade (embeddings: other models' vectors do not mix; continuation hops)
	read     bool      // a read of the model itself (GetModel): a 404 of a model outside the cascade is the answer, as for a named one
	contents []*genai.Content
	send     func(ctx context.Context, call *call[R], m *modelState) (R, error)         // one upstream request
	usage    func(R) int32                                                              // input tokens the response reports; nil: none
	fallback func(ctx context.Context, err *CascadeError) (R, bool)                     // the last resort; nil: none
	complete func(ctx context.Context, call *call[R], resp R, m *modelState) (R, error) // completes a model's answer (continuation hops); nil: none
	config   *genai.GenerateContentConfig                                               // generate: what is sent, the caller's with SDK retry and continuation off
	user     *genai.GenerateContentConfig                                               // generate: the caller's, untouched
	deadline time.Time
	learns   bool          // generate: learns answer times, and attempts may be cut at the learned deadline
	class    int           // the request's latency class (latencyClass; streams' first chunks from sizeClasses on)
	cutOn    []*modelState // the model of each of the call's attempts cut at a learned deadline (stretch)
	share    *modelState   // the model whose record try shares with the fleet once the attempt settled (shareEnd); nil: none
	shareNow bool          // share even within shareLatencyEvery of the last round trip that did
	tokens   int           // input token estimate; -1 until computed
	images   int           // image calls: the images asked for, reserved from the model's IPM limiter (images.go)
	start    time.Time
	// now is the latest clock reading: taken at the start and read again
	// after whatever takes time (upstream requests, waits, the token count,
	// the store's round trips of a fleet lease or a shared budget, the
	// Fallback), so that no deadline or learned latency counts that time.
	now      time.Time
	attempts []Attempt
	// firstAttempts backs attempts for a call's first two (most calls
	// make one or two): no allocation of their own.
	firstAttempts [2]Attempt
	rec           *CallRecord
	finished      bool     // finish ran: the call is counted in the statistics
	hit           CacheHit // the answer cache's entry that answered (CallRecord.Cache)

	stream *streamCall // nil unless the call opens a stream
	later  []retrySlot // models of the current round to try again in the next; allocated on the first such failure
	open   openSeen    // the open breakers that refused the call's models in the current run, for probeAllOpen
	spent  spend       // tokens and cost of the call's responses
}

// streamCall is what a call that opens a stream keeps for it.
type streamCall struct {
	parent  context.Context // the caller's context, which an open stream lives on
	held    admission       // the answering model's admission: its outcome is known when the stream ends
	session *streamSession  // the open stream of the answering attempt
	opened  openedStream    // the answering request, for the recorder (WithRecorder)
	// continues: the request continues an answer whose text was yielded (a
	// resume, or a CONTINUATION hop): a chunk that only ends it is an answer.
	continues bool
	// yielded: a chunk of the answer reached the caller; the request is
	// never hedged (hedge.go).
	yielded bool
}

// newCall starts a call.
func newCall[R any](ctx context.Context, c *Client, e endpoint, model string, contents []*genai.Content) *call[R] {
	call := new(call[R])
	call.init(ctx, c, e, model, contents)
	return call
}

// init starts a call in a zero call state. Its deadline is the caller's or
// the call timeout, whichever comes first: every wait and attempt is bounded
// by it, so no context of its own is needed.
func (call *call[R]) init(ctx context.Context, c *Client, e endpoint, model string, contents []*genai.Content) {
	now := time.Now()
	deadline := now.Add(c.cfg.callTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	call.c = c
	call.first = strings.TrimPrefix(model, "models/")
	call.contents = contents
	call.endpoint, call.op = e, operationOf(e)
	call.deadline = deadline
	call.tokens = -1
	call.start, call.now = now, now
	call.attempts = call.firstAttempts[:0]
	call.rec = callRecordFrom(ctx)
}

// generateCalls holds the states of unary generate calls that returned, for
// the next calls to take: allocating and collecting a state of its own
// (480 bytes, with pointers) doubled a refused call's cost and added a
// third to an answered call's chain (BenchmarkChainOwnRefused,
// BenchmarkChainOwn).
var generateCalls = sync.Pool{New: func() any { return new(generateCall) }}

// releaseGenerateCall clears the state of a unary generate call that has
// returned and puts it back in generateCalls. Nothing outlives the call
// that points into it: what it hands out (the *CascadeError, the
// CallRecord, a shared call's waiters) holds copies of its attempts, and
// every request it raced is joined before it returns (hedged). A stream's
// state is never released: the open stream keeps it. The admission is
// zeroed when a request was admitted or it holds what a panic in admit
// left; a refusal's, which holds nothing and points nowhere, is left for
// the next call's admit.
func releaseGenerateCall(call *generateCall) {
	if call.adm.m != nil || call.adm.holds() {
		*call = generateCall{}
	} else {
		call.callState = callState[*genai.GenerateContentResponse]{}
	}
	generateCalls.Put(call)
}

// newGenerateCall starts a generate (or stream) call: the cascade, the
// Fallback, token reconciliation from usageMetadata. Its state comes from
// generateCalls; a unary call gives it back (releaseGenerateCall).
func (c *Client) newGenerateCall(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) *generateCall {
	call := generateCalls.Get().(*generateCall)
	call.init(ctx, c, endpointGenerate, model, contents)
	call.config, call.user = callConfig(config, c.sdkRetries), config
	call.class = latencyClass(config)
	call.send = generateOnce
	call.usage = promptTokens
	if c.cfg.fallback != nil || c.cfg.answers != nil {
		call.fallback = func(ctx context.Context, err *CascadeError) (*genai.GenerateContentResponse, bool) {
			if c.cfg.answers != nil { // the answer cache first (WithAnswerCache), then the Fallback
				if resp, hit := c.cachedAnswer(ctx, model, contents, config); resp != nil {
					call.hit = hit
					return markFallback(resp), true
				}
			}
			if c.cfg.fallback == nil {
				return nil, false
			}
			resp, ferr := c.cfg.fallback(ctx, FallbackRequest{Model: call.firstModel(), Contents: contents, Config: config, Err: err})
			if ferr != nil || resp == nil {
				return nil, false
			}
			return markFallback(resp), true // a copy: the Fallback's value may be shared
		}
	}
	return call
}

// promptTokens returns the input tokens a response reports, 0 when none.
func promptTokens(r *genai.GenerateContentResponse) int32 {
	if r.UsageMetadata == nil {
		return 0
	}
	return r.UsageMetadata.PromptTokenCount
}

// generateOnce is one unary upstream request to m.
func generateOnce(ctx context.Context, call *generateCall, m *modelState) (*genai.GenerateContentResponse, error) {
	resp, err := call.c.modelsFor(m).GenerateContent(ctx, m.wire, call.turnsFor(m), configFor(m, call.user, call.config, call.c.sdkRetries))
	if err != nil {
		return nil, err
	}
	call.c.signers.learn(m.name, resp)
	if rerr := responseError(m.name, resp); rerr != nil {
		return resp, rerr
	}
	return resp, nil
}

func (call *call[R]) firstModel() string {
	if call.first != "" {
		return call.first
	}
	return call.c.cascade[0]
}

// maxCountWait bounds the countTokens request of WithExactTokenCount: a
// count that takes longer is abandoned for the local estimate.
const maxCountWait = 5 * time.Second

// inputTokens returns the call's input token estimate for models that limit
// tokens, computing it once. With WithExactTokenCount it asks the API,
// within maxCountWait and a quarter of the call's remaining time; a count
// that fails or takes longer falls back to the local estimate and blames no
// model.
func (call *call[R]) inputTokens(ctx context.Context, m *modelState) int {
	if !m.lim.limitsTokens() {
		return 0
	}
	if call.tokens < 0 {
		call.tokens = estimateTokens(call.contents, call.user)
		if call.c.cfg.exactTokens {
			wait := min(maxCountWait, call.deadline.Sub(call.now)/4)
			cctx, cancel := context.WithTimeout(ctx, wait)
			if r, err := call.c.modelsFor(m).CountTokens(cctx, m.wire, call.contents, nil); err == nil && r != nil {
				call.tokens = int(r.TotalTokens)
			}
			cancel()
			call.now = time.Now()
		}
	}
	return call.tokens
}

// errCallTimeout: the call timeout of WithTimeouts passed before any model
// answered.
var errCallTimeout = fmt.Errorf("geminiguard: the call timeout (WithTimeouts) passed: %w", context.DeadlineExceeded)

// skip records a model that was not sent a request.
func (call *call[R]) skip(m *modelState, err error, delay time.Duration) {
	call.attempts = append(call.attempts, Attempt{Model: m.name, Err: err, Delay: delay, Skipped: true})
	m.counters.skipped.Add(1)
}

// unsent records the end of a call before its request to m left: the
// caller's context (err) ended the wait for it after waited, or its
// deadline had passed. The request was never sent: the record says skipped,
// with the time actually waited. It returns the error recorded.
func (call *call[R]) unsent(m *modelState, err error, waited time.Duration) error {
	if _, ok := err.(*ModelError); !ok {
		err = &ModelError{Model: m.name, Verdict: Classify(err), Err: err}
	}
	call.skip(m, err, waited)
	return err
}

// fail records a failed attempt and returns its error.
func (call *call[R]) fail(model string, err error, delay, elapsed time.Duration) error {
	if _, ok := err.(*ModelError); !ok {
		err = &ModelError{Model: model, Verdict: Classify(err), Err: err}
	}
	call.attempts = append(call.attempts, Attempt{Model: model, Err: err, Delay: delay, Elapsed: elapsed})
	return err
}

// answered records the attempt that answered.
func (call *call[R]) answered(model string, delay, elapsed time.Duration) {
	call.attempts = append(call.attempts, Attempt{Model: model, Delay: delay, Elapsed: elapsed})
}

// sleep waits d or until ctx is done, whichever is first, and then reads
// the clock into call.now.
func (call *call[R]) sleep(ctx context.Context, d time.Duration) error {
	sharedSleep(ctx, call.now.Add(d), call.attempts) // a shared call's waiters whose deadline comes first give up (dedup.go)
	err := sleep(ctx, d)
	call.now = time.Now()
	return err
}

// sleep waits d or until ctx is done, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
