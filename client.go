package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"
)

// modelsAPI is the part of *genai.Models the Client calls. Both the SDK's
// Models and test doubles of it satisfy it.
type modelsAPI interface {
	GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error)
	GenerateContentStream(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error]
	List(ctx context.Context, config *genai.ListModelsConfig) (genai.Page[genai.Model], error)
	CountTokens(ctx context.Context, model string, contents []*genai.Content, config *genai.CountTokensConfig) (*genai.CountTokensResponse, error)
	EmbedContent(ctx context.Context, model string, contents []*genai.Content, config *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error)
}

// Client calls Gemini through the chain limiter → breaker → retry → cascade.
// It is safe for concurrent use by many goroutines; create one per process
// (or per API key) and share it: the limiter, breakers and retry budget only
// protect what goes through the same Client. The zero value is not usable:
// create it with New.
type Client struct {
	api      modelsAPI
	cfg      config
	cascade  []string      // configured models, primary first
	states   []*modelState // the cascade's models, in its order
	budget   *retryBudget
	jitter   jitterDraws
	project  coolDown // the whole project cooling down (spend cap, invalid key, ...)
	stats    clientStats
	mu       sync.RWMutex           // guards models
	models   map[string]*modelState // per model name (without "models/")
	shutdown map[string]Shutdown    // announced shutdowns, built-in table merged with WithShutdowns

	sdkRetries     bool         // the SDK client retries on its own: turn it off per call
	allOpenProbeAt atomic.Int64 // Unix nanoseconds: no early probe before (see probeAllOpen)
}

// New builds a Client. Options are applied in order (the last one wins), then
// validated together: every problem is reported in one error (errors.Join)
// that says what to fix. Unless WithStartupCheck(false), New runs
// CheckCascade and fails when a cascade model does not exist; that error
// matches ErrModelNotFound. New never panics and never logs the API key.
func New(ctx context.Context, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("geminiguard: nil Option passed to New")
		}
		o.apply(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	gc := cfg.genaiClient
	if gc == nil {
		var err error
		if gc, err = newGenAIClient(ctx, &cfg); err != nil {
			return nil, err
		}
	}
	c := &Client{
		api: gc.Models,
		cfg: cfg,
		// The SDK retries only when its client was given RetryOptions: ours
		// is built without, an app's may have them.
		sdkRetries: cfg.genaiClient != nil && cfg.genaiClient.ClientConfig().HTTPOptions.RetryOptions != nil,
		cascade:    cfg.cascade,
		budget:     newRetryBudget(cfg.retry.BudgetRatio, cfg.retry.BudgetMinPerSecond, retryBudgetTTL),
		models:     make(map[string]*modelState, len(cfg.cascade)),
		shutdown:   mergeShutdowns(cfg.shutdowns),
	}
	if cfg.jitterSource != nil {
		c.jitter.rnd = rand.New(cfg.jitterSource)
	}
	c.states = make([]*modelState, len(cfg.cascade))
	for i, name := range cfg.cascade {
		c.states[i] = c.newModelState(name)
		c.models[name] = c.states[i]
	}
	if cfg.startupCheck {
		report, err := c.CheckCascade(ctx)
		if err != nil {
			return nil, err
		}
		c.logReport(report)
	}
	return c, nil
}

// newGenAIClient builds the SDK client from the options, with the SDK's own
// retry off (ours runs instead) and nothing taken from the environment that
// the options set explicitly. Its errors never carry the API key: some of the
// SDK's NewClient errors print the whole ClientConfig, so they are replaced.
func newGenAIClient(ctx context.Context, cfg *config) (*genai.Client, error) {
	cc := &genai.ClientConfig{
		APIKey:     cfg.apiKey,
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: cfg.httpClient,
	}
	cc.HTTPOptions.BaseURL = cfg.baseURL
	gc, err := genai.NewClient(ctx, cc)
	if err != nil {
		msg := err.Error()
		if cfg.apiKey != "" {
			msg = strings.ReplaceAll(msg, cfg.apiKey, "[redacted]")
		}
		if i := strings.Index(msg, "ClientConfig"); i >= 0 {
			msg = strings.TrimRight(msg[:i], " .:")
		}
		return nil, fmt.Errorf("geminiguard: creating the genai client: %s (set an API key with WithAPIKey or the GEMINI_API_KEY environment variable)", msg)
	}
	return gc, nil
}

// model returns the state of a model, creating it for a model outside the
// cascade on first use.
func (c *Client) model(name string) *modelState {
	c.mu.RLock()
	m := c.models[name]
	c.mu.RUnlock()
	if m != nil {
		return m
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m = c.models[name]; m == nil {
		m = c.newModelState(name)
		c.models[name] = m
	}
	return m
}

// GenerateContent sends one request through the chain and returns the first
// good answer: from the requested model, from the next model of the cascade,
// or from the Fallback. model "" means the cascade's primary; a model outside
// the cascade is tried first and the cascade follows. The caller's config is
// never mutated.
//
// Errors: a *ResponseError (ErrBlocked, ErrEmptyResponse) or the API's error
// for request-scoped failures, returned at once; a *CascadeError
// (ErrAllModelsFailed, unwrapping to every attempt's error) when every model
// failed or was skipped and no Fallback answered; the context's error when
// the caller cancelled. Classify(err) gives the verdict of the failure that
// decided the outcome; WithCallRecord gives the attempts.
func (c *Client) GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	call := c.newGenerateCall(ctx, model, contents, config)
	defer releaseGenerateCall(call)
	resp, err := call.run(ctx)
	if err != nil || continuationOf(resp) == nil {
		return resp, err
	}
	return c.continueAnswer(ctx, call, resp)
}

// continueAnswer completes an answer the server paused with finishReason
// CONTINUATION: each further part is requested with the continuation token,
// from the model that answered (no other model can use its token), through
// the limiter, the breaker and retries like any request; the SDK's own
// continuation is off, so its hops cannot bypass them. The parts are joined
// into resp; its UsageMetadata becomes the last hop's. A hop that fails ends
// the call with its error rather than with a silently short answer.
func (c *Client) continueAnswer(ctx context.Context, first *generateCall, resp *genai.GenerateContentResponse) (*genai.GenerateContentResponse, error) {
	model := first.attempts[len(first.attempts)-1].Model
	for range maxContinuationHops {
		tok := continuationOf(resp)
		if tok == nil {
			return resp, nil
		}
		var cfg genai.GenerateContentConfig
		if first.user != nil {
			cfg = *first.user
		}
		cfg.ContinuationToken = tok
		hop := c.newGenerateCall(ctx, model, first.contents, &cfg)
		hop.only, hop.hop, hop.rec = true, true, nil
		more, err := hop.run(ctx)
		if first.rec != nil {
			first.rec.Attempts = append(first.rec.Attempts, hop.attempts...)
		}
		releaseGenerateCall(hop)
		if err != nil {
			return nil, err
		}
		cand, next := resp.Candidates[0], more.Candidates[0]
		if cand.Content == nil {
			cand.Content = &genai.Content{Role: genai.RoleModel}
		}
		if next.Content != nil {
			cand.Content.Parts = append(cand.Content.Parts, next.Content.Parts...)
		}
		cand.FinishReason, cand.ContinuationToken = next.FinishReason, next.ContinuationToken
		resp.UsageMetadata = more.UsageMetadata
	}
	return nil, &ModelError{Model: model, Verdict: Verdict{Class: ClassEmpty, Scope: ScopeModel}, Err: errTooManyHops}
}

// continuationOf returns the token of an answer paused with finishReason
// CONTINUATION, nil for any other answer.
func continuationOf(resp *genai.GenerateContentResponse) []byte {
	if finishReasonOf(resp) != genai.FinishReasonContinuation {
		return nil
	}
	return resp.Candidates[0].ContinuationToken
}

// generateOnce is one unary upstream request to m.
func generateOnce(ctx context.Context, call *generateCall, m *modelState) (*genai.GenerateContentResponse, error) {
	resp, err := call.c.api.GenerateContent(ctx, m.name, call.contents, call.config)
	if err != nil {
		return nil, err
	}
	if rerr := responseError(m.name, resp); rerr != nil {
		return resp, rerr
	}
	return resp, nil
}

// EmbedContent embeds contents with model through the limiter, the breaker
// of the model's embedding endpoint (separate from its generation breaker)
// and classifier-driven retries. There is no cascade and no Fallback: vectors
// of different models do not mix. The caller's config is never mutated.
//
// Errors: those of GenerateContent, where a *CascadeError lists the one
// model's attempts; an error when model is "".
func (c *Client) EmbedContent(ctx context.Context, model string, contents []*genai.Content, config *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error) {
	if model == "" {
		return nil, errors.New(`geminiguard: EmbedContent needs a model name, e.g. "gemini-embedding-001"`)
	}
	ec := newCall[*genai.EmbedContentResponse](ctx, c, endpointEmbed, model, contents)
	ec.only = true
	sent := embedConfig(config, c.sdkRetries)
	ec.send = func(ctx context.Context, _ *call[*genai.EmbedContentResponse], m *modelState) (*genai.EmbedContentResponse, error) {
		return c.api.EmbedContent(ctx, m.name, contents, sent)
	}
	return ec.run(ctx)
}

// embedConfig returns a copy of the caller's config with the SDK's retry off.
func embedConfig(user *genai.EmbedContentConfig, sdkRetries bool) *genai.EmbedContentConfig {
	var cfg genai.EmbedContentConfig
	if user != nil {
		cfg = *user
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, sdkRetries)
	return &cfg
}

// withoutSDKRetry returns per-call HTTPOptions that keep the SDK's own retry
// off (ours runs instead, and attempts must not multiply behind the limiter's
// back) and that the SDK will not write to: it fills in missing Headers in
// place. It returns opts itself when neither applies.
func withoutSDKRetry(opts *genai.HTTPOptions, sdkRetries bool) *genai.HTTPOptions {
	if opts == nil {
		if sdkRetries {
			return noRetryOptions
		}
		return nil
	}
	retries := sdkRetries || opts.RetryOptions != nil
	if !retries && opts.Headers != nil {
		return opts
	}
	out := *opts
	if retries {
		out.RetryOptions = noRetry
	}
	if out.Headers == nil {
		out.Headers = noHeaders
	}
	return &out
}

// callConfig returns the config to send: a shallow copy of the caller's with
// the SDK's automatic continuation and retry off. The caller's value is never
// modified, not even by the SDK (which sets a missing SystemInstruction role
// in place).
func callConfig(user *genai.GenerateContentConfig, sdkRetries bool) *genai.GenerateContentConfig {
	if user == nil {
		if sdkRetries {
			return defaultCallConfigNoRetry
		}
		return defaultCallConfig
	}
	cfg := *user
	cfg.AutomaticContinuation = noContinuation
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, sdkRetries)
	if si := cfg.SystemInstruction; si != nil && si.Role == "" {
		withRole := *si
		withRole.Role = genai.RoleUser
		cfg.SystemInstruction = &withRole
	}
	return &cfg
}

// Shared, read-only values of callConfig. The SDK only reads them: it fills
// in a per-call HTTPOptions.Headers when that is nil (a data race on a shared
// value), so noRetryOptions carries an empty map it merges from instead.
var (
	noRetry                  = &genai.HTTPRetryOptions{Attempts: genai.Ptr[int32](1)}
	noHeaders                = http.Header{}
	noRetryOptions           = &genai.HTTPOptions{RetryOptions: noRetry, Headers: noHeaders}
	noContinuation           = genai.Ptr(false)
	defaultCallConfig        = &genai.GenerateContentConfig{AutomaticContinuation: noContinuation}
	defaultCallConfigNoRetry = &genai.GenerateContentConfig{AutomaticContinuation: noContinuation, HTTPOptions: noRetryOptions}
)

// logReport logs what CheckCascade found that deserves attention.
func (c *Client) logReport(r *CascadeReport) {
	if c.cfg.logger == nil || r == nil {
		return
	}
	for _, w := range r.Warnings {
		c.cfg.logger.Warn("geminiguard: cascade check", slog.String("warning", w))
	}
}

// endpoint separates breakers of one model: generation and embedding fail
// independently.
type endpoint uint8

const (
	endpointGenerate endpoint = iota
	endpointEmbed
	numEndpoints
)

func (e endpoint) String() string {
	if e == endpointEmbed {
		return "embed"
	}
	return "generate"
}

// modelState is everything the chain keeps per model. Its fields are set
// once by newModelState; the layers inside are safe for concurrent use.
type modelState struct {
	name     string
	breakers [numEndpoints]*breaker
	cool     coolDown
	lim      *limiter
	counters modelCounters
	self     []*modelState              // this model alone: the order of a call without cascade
	openErr  *ModelError                // what a call records when a breaker is open: shared, never modified
	coolErr  atomic.Pointer[ModelError] // what a call records while cooling down, for the current cool-down
}

func (c *Client) newModelState(name string) *modelState {
	m := &modelState{name: name, lim: newLimiter(c.cfg.limits[name], c.cfg.headroom)}
	for e := range m.breakers {
		m.breakers[e] = newBreaker(c.cfg.breaker)
	}
	m.openErr = &ModelError{Model: name, Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel}, Err: ErrCircuitOpen}
	m.self = []*modelState{m}
	return m
}

// generateCall is a generate or stream call.
type generateCall = call[*genai.GenerateContentResponse]

// call is the state of one Client call across its attempts and models. R is
// the SDK's response type of the endpoint called.
type call[R any] struct {
	c        *Client
	first    string
	endpoint endpoint
	only     bool // the first model alone, no cascade (embeddings: other models' vectors do not mix)
	hop      bool // a continuation hop of another call: not counted as a call of its own
	contents []*genai.Content
	send     func(ctx context.Context, call *call[R], m *modelState) (R, error) // one upstream request
	usage    func(R) int32                                                      // input tokens the response reports; nil: none
	fallback func(ctx context.Context, err *CascadeError) (R, bool)             // the last resort; nil: none
	config   *genai.GenerateContentConfig                                       // generate: what is sent, the caller's with SDK retry and continuation off
	user     *genai.GenerateContentConfig                                       // generate: the caller's, untouched
	deadline time.Time
	tokens   int // input token estimate; -1 until computed
	start    time.Time
	now      time.Time // the latest clock reading, taken at the start and after whatever takes time (upstream requests, waits, the token count, the Fallback): a call reads the clock at no other moment
	attempts []Attempt
	buf      [2]Attempt // backing of attempts for the common short calls
	rec      *CallRecord

	stream *streamCall // nil unless the call opens a stream
	later  []retrySlot // models of the current round to try again in the next; allocated on the first such failure
}

// streamCall is what a call that opens a stream keeps for it.
type streamCall struct {
	parent  context.Context // the caller's context, which an open stream lives on
	held    heldPermit      // the answering model's permit: its outcome is known when the stream ends
	session *streamSession  // the open stream of the answering attempt
}

// heldPermit is a breaker permit whose outcome is still to be reported.
type heldPermit struct {
	m        *modelState
	br       *breaker
	p        permit
	endpoint endpoint
}

// settle reports the outcome of a permitted request to the model's breaker
// and counters, and fires the state-change hook after the breaker's lock is
// released.
func (c *Client) settle(h heldPermit, now time.Time, err error, v Verdict) {
	c.stateChanged(h.m.name, h.endpoint, h.br.done(h.p, now, outcomeOf(err, v)))
	h.m.count(err, v)
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
	call.endpoint = e
	call.deadline = deadline
	call.tokens = -1
	call.start, call.now = now, now
	call.rec = callRecordFrom(ctx)
	call.attempts = call.buf[:0]
}

// generateCalls holds the states of unary generate calls that returned, for
// the next calls to reuse: a call on the success path then allocates no
// state of its own. Only releaseGenerateCall puts a state back; see there
// why that is safe.
var generateCalls = sync.Pool{New: func() any { return new(generateCall) }}

// releaseGenerateCall puts back, cleared, the state of a unary generate call
// (or continuation hop) that has returned. Nothing that outlives the call
// points into its state: finish hands out copies of the attempts (in the
// *CascadeError, the CallRecord), every other value a call hands out (its
// errors, the response) is a heap value of its own, and calls are
// synchronous, so no goroutine holds the state either. A stream's call is
// never released: its open stream keeps the state (it is then just garbage
// when the stream ends). Clearing keeps no caller data in the pool.
func releaseGenerateCall(call *generateCall) {
	*call = generateCall{}
	generateCalls.Put(call)
}

// newGenerateCall starts a generate (or stream) call: the cascade, the
// Fallback, token reconciliation from usageMetadata. Its state comes from
// generateCalls; a unary call gives it back with releaseGenerateCall once
// it has returned.
func (c *Client) newGenerateCall(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) *generateCall {
	call := generateCalls.Get().(*generateCall)
	call.init(ctx, c, endpointGenerate, model, contents)
	call.config, call.user = callConfig(config, c.sdkRetries), config
	call.send = generateOnce
	call.usage = func(r *genai.GenerateContentResponse) int32 {
		if r.UsageMetadata == nil {
			return 0
		}
		return r.UsageMetadata.PromptTokenCount
	}
	if c.cfg.fallback != nil {
		call.fallback = func(ctx context.Context, err *CascadeError) (*genai.GenerateContentResponse, bool) {
			resp, ferr := c.cfg.fallback(ctx, FallbackRequest{Model: call.firstModel(), Contents: contents, Config: config, Err: err})
			if ferr != nil || resp == nil {
				return nil, false
			}
			if resp.ModelVersion == "" {
				resp.ModelVersion = FallbackModelVersion
			}
			return resp, true
		}
	}
	return call
}

// errCallTimeout: the call timeout of WithTimeouts passed before any model
// answered.
var errCallTimeout = fmt.Errorf("geminiguard: the call timeout (WithTimeouts) passed: %w", context.DeadlineExceeded)

// step is what an attempt's outcome asks the call to do next.
type step int

const (
	stepRetry   step = iota // same model again after a delay
	stepNext                // next model of the cascade; this one is done for the call
	stepLater               // next model of the cascade; this one again in the next round
	stepStop                // return this error now (request scope, caller cancelled)
	stepProject             // skip the rest of the cascade: the project is down
)

// run sends the call through the chain: for each model of the cascade, in
// order, the limiter, the breaker and classifier-driven retries; then the
// Fallback; else a *CascadeError.
func (call *call[R]) run(ctx context.Context) (R, error) {
	var zero R
	c := call.c
	if call.stream == nil && !call.hop { // a stream counts once, however many times it opens
		c.stats.calls.Add(1)
	}
	if err := c.projectCooling(call.now); err != nil {
		call.skip(c.model(call.firstModel()), err, 0)
		return call.finish(ctx, zero, false, nil)
	}
	// The first round walks the cascade; a later round, after a backoff,
	// walks again the models that failed retryably while another model
	// could still answer (so a sick primary gets its retries too, after a
	// pause, and the call returns to it before giving up).
	var buf [4]retrySlot // rounds of short cascades stay off the heap
	slots := buf[:0]
	for _, m := range call.order() {
		slots = append(slots, retrySlot{m: m})
	}
	for pass := 1; ; pass++ {
		call.later = call.later[:0]
		for i := range slots {
			sl := &slots[i]
			if pass > 1 && !c.budget.withdraw(call.now) {
				continue // the Client is retrying too much: no second rounds now
			}
			resp, next, err := call.tryModel(ctx, sl)
			switch {
			case err == nil:
				return call.finish(ctx, resp, true, nil)
			case next == stepStop:
				return call.finish(ctx, zero, false, err)
			case next == stepProject:
				return call.finish(ctx, zero, false, nil)
			case next == stepLater:
				call.later = append(call.later, *sl)
			}
		}
		if len(call.later) == 0 {
			if resp, next, err, probed := call.probeAllOpen(ctx); probed {
				switch {
				case err == nil:
					return call.finish(ctx, resp, true, nil)
				case next == stepStop:
					return call.finish(ctx, zero, false, err)
				}
			}
			return call.finish(ctx, zero, false, nil)
		}
		switch err := call.pause(ctx, pass); {
		case err == errNoTimeForRound:
			return call.finish(ctx, zero, false, nil)
		case err != nil:
			return call.finish(ctx, zero, false, err)
		}
		slots = append(slots[:0], call.later...)
	}
}

// retrySlot is a model's place in a call's rounds: its attempts so far and
// its previous backoff.
type retrySlot struct {
	m     *modelState
	tries int
	prev  time.Duration
	delay time.Duration // the wait before its next attempt, for the record
}

// errNoTimeForRound: the backoff before another round would overrun the
// call's deadline.
var errNoTimeForRound = errors.New("geminiguard: no time left for another round")

// pause waits the backoff between two rounds of a call. It returns nil to
// start the next round; errNoTimeForRound, without waiting, when the wait
// would overrun the call's deadline (the last failure is then marked as cut
// short by it); the caller's context error, recorded, when it ended during
// the wait.
func (call *call[R]) pause(ctx context.Context, pass int) error {
	c := call.c
	first := &call.later[0]
	d, _ := c.cfg.retry.retryDelay(0, first.prev, pass, c.jitter.float64())
	if !call.now.Add(d).Before(call.deadline) {
		for i := len(call.attempts) - 1; i >= 0; i-- {
			if a := call.attempts[i]; !a.Skipped { // skips share their errors: never modify those
				if me, ok := a.Err.(*ModelError); ok {
					me.Err = &waitError{Err: me.Err, Wait: d}
				}
				break
			}
		}
		return errNoTimeForRound
	}
	for i := range call.later {
		call.later[i].prev, call.later[i].delay = d, 0
	}
	first.delay = d
	c.retrying(RetryEvent{Model: first.m.name, Attempt: first.tries, Err: call.attempts[len(call.attempts)-1].Err, Delay: d})
	if err := call.sleep(ctx, d); err != nil {
		return call.fail(first.m.name, err, d, 0)
	}
	return nil
}

// order returns the call's models: the first choice, then (unless only) the
// cascade.
func (call *call[R]) order() []*modelState {
	if call.only {
		return call.c.model(call.firstModel()).self
	}
	return call.c.order(call.first)
}

// hasNext reports whether a model after current in the call's order could
// take a request now (not open, not cooling down).
func (call *call[R]) hasNext(current *modelState) bool {
	now := call.now
	after := false
	for _, m := range call.order() {
		if after && m.cooling(now) == nil && m.breakers[call.endpoint].state(now) != StateOpen {
			return true
		}
		after = after || m == current
	}
	return false
}

func (call *call[R]) firstModel() string {
	if call.first != "" {
		return call.first
	}
	return call.c.cascade[0]
}

// tryModel runs the attempts on one model. It returns the answer, or the
// decisive error and whether to move to the next model or stop.
func (call *call[R]) tryModel(ctx context.Context, sl *retrySlot) (R, step, error) {
	var zero R
	c, m := call.c, sl.m
	delay, prev := sl.delay, sl.prev // wait before this attempt; previous backoff
	for n := sl.tries + 1; ; n++ {
		sl.tries = n
		now := call.now
		if !now.Before(call.deadline) {
			if err := ctx.Err(); err != nil {
				return zero, stepStop, call.fail(m.name, err, delay, 0)
			}
			return zero, stepStop, call.fail(m.name, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassTimeout, Scope: ScopeRequest}, Err: errCallTimeout}, delay, 0)
		}
		if err := m.cooling(now); err != nil {
			call.skip(m, err, delay)
			return zero, stepNext, err
		}
		br := m.breakers[call.endpoint]
		if br.state(now) == StateOpen {
			call.skip(m, m.openErr, delay)
			return zero, stepNext, m.openErr
		}
		g, wait, err := m.lim.reserve(now, call.inputTokens(ctx, m), call.deadline)
		if err != nil {
			err = localLimitError(m.name, err, now)
			call.skip(m, err, delay)
			return zero, stepNext, err
		}
		if wait > 0 && call.hasNext(m) {
			// Out of tokens for now, and another model can answer at once:
			// skip this one rather than queue behind its quota.
			err := g.skip(m.name, now, wait)
			call.skip(m, err, delay)
			return zero, stepNext, err
		}
		if wait > 0 {
			if err := call.sleep(ctx, wait); err != nil {
				g.cancel()
				return zero, stepStop, call.fail(m.name, err, delay+wait, 0)
			}
			delay += wait
		}
		p, tr, err := br.allow(call.now)
		c.stateChanged(m.name, call.endpoint, tr)
		if err != nil {
			g.cancel()
			err = &ModelError{Model: m.name, Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel}, Err: err}
			call.skip(m, err, delay)
			return zero, stepNext, err
		}
		if n == 1 {
			c.budget.deposit(call.now)
		} else {
			m.counters.retries.Add(1)
		}
		resp, v, elapsed, err := call.attempt(ctx, m)
		end := call.now
		if err == nil && call.stream != nil {
			// A stream's outcome is known when it ends: hold the permit.
			call.stream.held = heldPermit{m: m, br: br, p: p, endpoint: call.endpoint}
		} else {
			c.settle(heldPermit{m: m, br: br, p: p, endpoint: call.endpoint}, end, err, v)
		}
		if err == nil {
			if call.usage != nil && call.tokens >= 0 {
				m.lim.reconcile(end, call.tokens, int(call.usage(resp)))
			}
			call.answered(m.name, delay, elapsed)
			return resp, 0, nil
		}
		err = call.fail(m.name, &ModelError{Model: m.name, Verdict: v, Err: err}, delay, elapsed)
		c.applyVerdict(m, v, end)
		next := call.nextStep(m, v, n)
		if next != stepRetry {
			sl.prev = prev
			return zero, next, err
		}
		d, ok := c.cfg.retry.retryDelay(v.RetryAfter, prev, n, c.jitter.float64())
		if !ok {
			return zero, stepNext, err
		}
		if !end.Add(d).Before(call.deadline) {
			// Sleeping would overrun the call's deadline: do not sleep.
			me := err.(*ModelError)
			me.Err = &waitError{Err: me.Err, Wait: d}
			return zero, stepNext, err
		}
		if !c.budget.withdraw(end) {
			return zero, stepNext, err
		}
		c.retrying(RetryEvent{Model: m.name, Attempt: n, Err: err, Verdict: v, Delay: d})
		if err := call.sleep(ctx, d); err != nil {
			return zero, stepStop, call.fail(m.name, err, d, 0)
		}
		delay, prev = d, d
	}
}

// nextStep decides what a failed attempt with verdict v asks for.
func (call *call[R]) nextStep(m *modelState, v Verdict, n int) step {
	switch {
	case v.Class == ClassCanceled, v.Scope == ScopeRequest:
		return stepStop
	case v.Scope == ScopeProject:
		return stepProject
	case !v.Retryable, n >= call.c.cfg.retry.MaxAttempts, m.breakers[call.endpoint].state(call.now) == StateOpen:
		// (The last: this failure opened the breaker, which would refuse
		// the retry after its backoff.)
		return stepNext
	case call.hasNext(m), len(call.later) > 0:
		// Another model can answer now, or the call will come back to one
		// after a pause: move on rather than retry a model that just failed
		// (the next model answers sooner than a backoff), and come back to
		// this one in the next round.
		return stepLater
	}
	return stepRetry
}

// attempt makes one upstream request under the attempt timeout and
// classifies its outcome. The request starts at call.now (nothing that takes
// time comes between the latest clock reading and it); call.now is then its
// end, the one clock reading of an attempt.
func (call *call[R]) attempt(ctx context.Context, m *modelState) (R, Verdict, time.Duration, error) {
	start := call.now
	deadline := start.Add(call.c.cfg.attemptTimeout)
	if call.deadline.Before(deadline) {
		deadline = call.deadline
	}
	actx := ctx
	if d, ok := ctx.Deadline(); !ok || deadline.Before(d) {
		// The caller's deadline does not bound the attempt already. (When it
		// does, the context and timer are saved: half the chain's own cost.)
		var cancel context.CancelFunc
		actx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	m.counters.requests.Add(1)
	resp, err := call.send(actx, call, m)
	call.now = time.Now()
	elapsed := call.now.Sub(start)
	if err != nil && ctx.Err() == nil && actx.Err() != nil {
		err = &attemptTimeoutError{err: err}
	}
	var v Verdict
	if err != nil {
		v = Classify(err)
	}
	if l := call.c.cfg.logger; l != nil && l.Enabled(ctx, slog.LevelDebug) {
		l.LogAttrs(ctx, slog.LevelDebug, "geminiguard: attempt", slog.String("model", m.name),
			slog.Duration("elapsed", elapsed), slog.String("class", v.Class.String()))
	}
	return resp, v, elapsed, err
}

// inputTokens returns the call's input token estimate for models that limit
// tokens, computing it once.
func (call *call[R]) inputTokens(ctx context.Context, m *modelState) int {
	if !m.lim.limitsTokens() {
		return 0
	}
	if call.tokens < 0 {
		call.tokens = estimateTokens(call.contents, call.user)
		if call.c.cfg.exactTokens {
			if r, err := call.c.api.CountTokens(ctx, m.name, call.contents, nil); err == nil {
				call.tokens = int(r.TotalTokens)
			}
			call.now = time.Now()
		}
	}
	return call.tokens
}

// skip records a model that was not sent a request.
func (call *call[R]) skip(m *modelState, err error, delay time.Duration) {
	call.attempts = append(call.attempts, Attempt{Model: m.name, Err: err, Delay: delay, Skipped: true})
	m.counters.skipped.Add(1)
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

// finish ends the call: the answer (ok), a request-scoped error, or, when
// every model failed, the Fallback or a *CascadeError. It fills the
// CallRecord and the client's statistics.
func (call *call[R]) finish(ctx context.Context, resp R, ok bool, stopErr error) (R, error) {
	c := call.c
	err := stopErr
	fallback := false
	// What outlives the call gets its own copy of the attempts: the call's
	// state may be reused once it has returned (releaseGenerateCall).
	failed := !ok && err == nil
	recorded := call.rec != nil && call.stream == nil && !call.hop // a stream records its call when it ends; a hop is part of its call
	var attempts []Attempt
	if failed || recorded {
		attempts = slices.Clone(call.attempts)
	}
	if failed {
		cerr := &CascadeError{Attempts: attempts}
		err = cerr
		if call.fallback != nil && ctx.Err() == nil {
			fresp, fok := call.fallback(ctx, cerr)
			call.now = time.Now()
			if fok {
				resp, err, fallback = fresp, nil, true
				c.fellBack(FallbackEvent{Model: call.firstModel(), Err: cerr})
			}
		}
	}
	if call.stream == nil && !call.hop {
		latency := call.now.Sub(call.start)
		c.stats.record(err == nil, fallback, latency)
		if recorded {
			*call.rec = CallRecord{Attempts: attempts, Fallback: fallback, Latency: latency}
			if err == nil && !fallback {
				call.rec.Model = attempts[len(attempts)-1].Model
			}
		}
	}
	if err != nil {
		var zero R
		return zero, err
	}
	return resp, nil
}

// sleep waits d or until ctx is done, whichever is first, and then reads
// the clock into call.now.
func (call *call[R]) sleep(ctx context.Context, d time.Duration) error {
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
