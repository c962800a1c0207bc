package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/genai"
)

// modelsAPI is the part of *genai.Models the Client calls. Both the SDK's
// Models and test doubles of it satisfy it.
type modelsAPI interface {
	GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error)
	GenerateContentStream(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error]
	List(ctx context.Context, config *genai.ListModelsConfig) (genai.Page[genai.Model], error)
	CountTokens(ctx context.Context, model string, contents []*genai.Content, config *genai.CountTokensConfig) (*genai.CountTokensResponse, error)
	ComputeTokens(ctx context.Context, model string, contents []*genai.Content, config *genai.ComputeTokensConfig) (*genai.ComputeTokensResponse, error)
	EmbedContent(ctx context.Context, model string, contents []*genai.Content, config *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error)
}

// Client calls Gemini through the chain limiter → breaker → retry → cascade.
// It is safe for concurrent use by many goroutines; create one per process
// (or per API key) and share it: the limiter, breakers and retry budget only
// protect what goes through the same Client. The zero value is not usable:
// create it with New. On a Client not made by New (the zero value, a nil
// pointer), every method that returns an error returns one saying so
// (Classify reads it as ClassBadRequest), Stats returns zero Stats and
// GenAI nil.
type Client struct {
	api        modelsAPI
	sdk        func() *genai.Client // the SDK client api belongs to, for GenAI; a func so that no fmt verb prints its config (the key)
	cfg        config
	cascade    []string      // configured models, primary first
	states     []*modelState // the cascade's models, in its order
	budget     *retryBudget
	cuts       cutBudget    // attempts abandoned at their learned deadline (latency.go), in budget's slots
	hedges     *retryBudget // hedged attempts (hedge.go)
	hedgeClock *hedgeClock  // runs their delays and cuts; nil with hedging off
	answers    lastAnswer   // when any model last answered: an outage is every model silent
	failing    failureSpell // the counted failures since the last answer: an outage is every model failing (outage)
	outageOpen atomic.Int64 // breakers an outage opened, not yet walked by outageOver since (an estimate: 0 when none)
	jitter     jitterDraws
	project    coolDown // the whole project cooling down (spend cap, invalid key, ...)
	stats      clientStats
	others     *lru.Cache[string, *modelState] // models outside the cascade, by name (without "models/"), the least recently used forgotten first
	shutdown   map[string]Shutdown             // announced shutdowns, built-in table merged with WithShutdowns
	prices     map[string][]Price              // dated prices by model, built-in table with WithPrices applied

	sdkRetries     bool                      // the SDK client retries on its own: turn it off per call
	allOpenProbeAt atomic.Pointer[time.Time] // no early probe before; nil: none yet (see probeAllOpen)
	bulkheads      map[string]*bulkhead      // WithBulkhead's, by name; nil: none
	recheck        recheck                   // the background cascade check New started, if any (see Close)
	warnings       atomic.Pointer[[]string]  // the latest CheckCascade's warnings (Warnings); nil: none yet
	closed         atomic.Bool               // Close was called: every call is refused with ErrClosed
	tel            *telemetry                // OpenTelemetry; nil when the providers are no-ops
	shared         sharing                   // calls in flight and answers shared (WithDedup, Idempotent)
	spending       *spendBudget              // WithBudget's spend; nil: no budget
	fleet          *fleetLink                // WithSharedState's; nil: the Client is on its own
	admitSteps     []admitStep               // the admission steps its options call for, in order (admitStepsFor)
	projectID      string                    // projectOf: the hash the fleet's state and the answer cache's keys are scoped by
	signers        signers                   // which model made each thought signature received (turns.go)
	imageLimits    map[string]*limiter       // IPM limiters by model (WithLimits' IPM), never modified after New; nil: none
	batch          batchCounters             // the Batch API lane's (batch.go)
}

// New builds a Client. Options are applied in order (the last one wins), then
// validated together: every problem is reported in one error (errors.Join)
// that says what to fix.
//
// Unless WithStartupCheck(false), New runs CheckCascade. It fails when the
// API says a cascade model does not exist (an error matching
// ErrModelNotFound) or refuses the key or the project (invalid key, API
// disabled, ...), or when ctx ends. When the listing fails for a reason
// that passes (a 5xx, a 429, a timeout, a network error), New logs a warning
// and returns a working Client, and runs the check again in the background:
// after 1s, then at doubling intervals up to 1 minute, at most 10 times,
// until it completes. A cascade model it then finds missing is left out of
// the cascade as CheckCascade does, and logged at Error. Close, or the end of
// ctx, stops the re-check. New never panics and never logs the API key; a
// nil ctx is refused with an error that says to pass context.Background().
func New(ctx context.Context, opts ...Option) (*Client, error) {
	if ctx == nil {
		return nil, errNilContext
	}
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
		sdk: func() *genai.Client { return gc },
		cfg: cfg,
		// The SDK retries only when its client was given RetryOptions: ours
		// is built without, an app's may have them.
		sdkRetries:  anySDKRetries(&cfg),
		cascade:     cfg.cascade,
		budget:      newRetryBudget(cfg.retry.BudgetRatio, cfg.retry.BudgetMinPerSecond, retryBudgetTTL),
		hedges:      newHedgeBudget(cfg.hedge),
		shutdown:    mergeShutdowns(cfg.tables.shutdowns, cfg.shutdowns),
		prices:      newPriceTable(cfg.tables.prices, cfg.prices),
		bulkheads:   newBulkheads(&cfg),
		spending:    newSpendBudget(cfg.budget),
		imageLimits: newImageLimits(&cfg),
	}
	c.projectID = projectOf(gc.ClientConfig(), cfg.project)
	c.fleet = newFleet(cfg.shared, c.projectID, cfg.fleetSize)
	if c.fleet != nil && c.spending != nil {
		c.spending.shared, c.spending.onSpend = true, c.reportSpendSoon // the budget is the project's
	}
	c.cuts = c.budget.fundCuts(cutRatio, cutMinPerSec)
	if cfg.hedge.On {
		c.hedgeClock = newHedgeClock()
	}
	c.admitSteps = admitStepsFor(c)
	if cfg.jitterSource != nil {
		c.jitter.rnd = rand.New(cfg.jitterSource)
	}
	c.answers.Origin = time.Now()
	c.states = make([]*modelState, len(cfg.cascade))
	for i, name := range cfg.cascade {
		c.states[i] = c.newModelState(name)
	}
	c.others, _ = lru.New[string, *modelState](maxOtherModels) // fails only for a size below 1
	c.tel = newTelemetry(c)
	if cfg.startupCheck {
		report, err := c.CheckCascade(ctx)
		switch {
		case err == nil:
			c.logReport(report)
		case transientCheckError(err) && ctx.Err() == nil:
			c.log(ctx, slog.LevelWarn, "geminiguard: cascade check failed; New goes on and retries it in the background",
				slog.Duration("retry_in", recheckFirstDelay), slog.String("error", c.redact(err)))
			c.startRecheck(ctx)
		default:
			return nil, err
		}
	}
	c.joinFleet(ctx)
	return c, nil
}

// errNilContext refuses a nil context, as net/http.NewRequestWithContext
// does, before anything is sent. Classify reads it as ClassBadRequest.
var errNilContext error = &requestError{where: "nil Context", what: "given", fix: "pass context.Background(), or the context of the request being served"}

// errNotNew refuses a call on a Client not made by New.
var errNotNew error = &requestError{where: "Client must be made with New", what: "(it is the zero value or nil)", fix: "create it with geminiguard.New"}

// usable returns the error of a call that cannot be made: on a Client not
// made by New (errNotNew), after Close (ErrClosed), or with a nil ctx
// (errNilContext). Every exported method that takes a context calls it
// first, before anything is sent or counted.
func (c *Client) usable(ctx context.Context) error {
	switch {
	case !c.made():
		return errNotNew
	case c.closed.Load():
		return ErrClosed
	case ctx == nil:
		return errNilContext
	}
	return nil
}

// made reports whether New made c.
func (c *Client) made() bool {
	return c != nil && c.sdk != nil
}

// newGenAIClient builds the SDK client from the options, with the SDK's own
// retry off (ours runs instead) and nothing taken from the environment that
// the options set explicitly. Its errors never carry the API key: some of the
// SDK's NewClient errors print the whole ClientConfig, so they are replaced.
func newGenAIClient(ctx context.Context, cfg *config) (*genai.Client, error) {
	cc := &genai.ClientConfig{
		APIKey:     cfg.apiKey.reveal(),
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: cfg.httpClient,
	}
	cc.HTTPOptions.BaseURL = cfg.baseURL
	gc, err := genai.NewClient(ctx, cc)
	if err != nil {
		msg := err.Error()
		if key := cfg.apiKey.reveal(); key != "" {
			msg = strings.ReplaceAll(msg, key, redacted)
		}
		if i := strings.Index(msg, "ClientConfig"); i >= 0 {
			msg = strings.TrimRight(msg[:i], " .:")
		}
		return nil, fmt.Errorf("geminiguard: creating the genai client: %s (set an API key with WithAPIKey or the GEMINI_API_KEY environment variable)", msg)
	}
	return gc, nil
}

// GenerateContent sends one request through the chain and returns the first
// good answer: from the requested model, from the next model of the cascade,
// or from the Fallback. model "" means the cascade's primary; a model outside
// the cascade is tried first and the cascade follows, unless the API says
// that model does not exist (a 404): the call named it, so that is a
// mistake to see, not to cover (a misspelt name). The call then returns
// the 404 at once as a *ModelError naming the model and the cascade,
// matching ErrModelNotFound (Classify: ClassNotFound), without the cascade
// or the Fallback, and the model is not cooled down: the next call naming
// it asks the API again. The caller's config is never mutated.
//
// Errors: a request the SDK cannot send (nil elements, no contents,
// numbers JSON cannot encode) is refused before anything is sent, with an
// error that names what to fix and that Classify reads as ClassBadRequest;
// such a refusal is not counted in Stats. A *ResponseError (ErrBlocked,
// ErrEmptyResponse) or the API's error for request-scoped failures,
// returned at once; a *StreamError (ErrStreamInterrupted) holding the text
// so far when a CONTINUATION hop of the answer failed; a *CascadeError
// (ErrAllModelsFailed, unwrapping to every attempt's error) when every model
// failed or was skipped and no Fallback answered, or, for a call marked
// Deferrable that went to the Batch API lane instead, a *DeferredError
// (ErrDeferred) carrying the job and unwrapping to it; the context's error when
// the caller cancelled. An error matching ErrBulkheadFull when the call's
// bulkhead (InBulkhead) refused it, before anything was sent; such a
// refusal is counted in its bulkhead's Stats only. Classify(err) gives the
// verdict of the failure that decided the outcome; RecordCall gives the
// attempts. IsFallback(resp) tells the Fallback's answer (or the answer
// cache's, WithAnswerCache) from a model's.
// Under WithDedup, or with Idempotent, the answer (or error) may be
// another call's; see there. An idempotency key reused for a different
// request fails the call with an error that Classify reads as
// ClassBadRequest. A nil ctx, or a Client not made by New, is refused
// before anything is sent, as a malformed request is.
func (c *Client) GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if err := checkGenerate(contents, config); err != nil {
		return nil, err
	}
	var r generateRequest
	r.init(ctx, c, model, contents, config)
	return c.unary(ctx, &r, wrapDeferrable)
}

// EmbedContent embeds contents with model through the limiter, the breaker
// of the model's embedding endpoint (separate from its generation breaker)
// and classifier-driven retries. There is no cascade and no Fallback: vectors
// of different models do not mix. The caller's config is never mutated.
//
// Errors: those of GenerateContent, where a *CascadeError lists the one
// model's attempts; a refusal, as for a malformed request, when model is "".
func (c *Client) EmbedContent(ctx context.Context, model string, contents []*genai.Content, config *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if err := checkEmbed(contents, config); err != nil {
		return nil, err
	}
	if model == "" {
		return nil, &requestError{where: "EmbedContent's model", what: "is empty", fix: `give the embedding model's name, e.g. "gemini-embedding-001"`}
	}
	bh, err := c.enterBulkhead(ctx)
	if err != nil {
		return nil, err
	}
	defer bh.leave(&err)
	ec := newCall[*genai.EmbedContentResponse](ctx, c, endpointEmbed, model, contents)
	ec.only = true
	sent := embedConfig(config, c.sdkRetries)
	ec.send = func(ctx context.Context, _ *call[*genai.EmbedContentResponse], m *modelState) (*genai.EmbedContentResponse, error) {
		return c.modelsFor(m).EmbedContent(ctx, m.wire, contents, sent)
	}
	var resp *genai.EmbedContentResponse
	resp, err = ec.observed(ctx)
	return resp, err
}

// CountTokens counts the tokens of contents as model would, through the
// call's bulkhead (InBulkhead) as GenerateContent goes, the
// breaker of the model's countTokens endpoint (separate from its generation
// and embedding breakers) and classifier-driven retries; not through the
// limiter, as countTokens is free of quota. There is no cascade and no
// Fallback: a count is the model's own. The caller's config is never
// mutated.
//
// Errors: those of EmbedContent.
func (c *Client) CountTokens(ctx context.Context, model string, contents []*genai.Content, config *genai.CountTokensConfig) (*genai.CountTokensResponse, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	sent := countConfig(config, c.sdkRetries)
	return tokenCall(ctx, c, "CountTokens", model, contents, func(ctx context.Context, api modelsAPI, wire string) (*genai.CountTokensResponse, error) {
		return api.CountTokens(ctx, wire, contents, sent)
	})
}

// ComputeTokens returns the tokens of contents as model splits them, with
// their ids, one TokensInfo per content. Only Vertex AI serves it: model
// must be called through a Vertex AI SDK client (the Client's own, or a
// WithModelBackend entry's). It goes as CountTokens does: through the
// call's bulkhead, the breaker of the model's countTokens endpoint (the one CountTokens uses) and
// classifier-driven retries, not through the limiter, with no cascade and
// no Fallback. The caller's config is never mutated.
//
// Errors: those of CountTokens; on the Gemini API, before anything is
// sent, an error that Classify reads as ClassBadRequest, saying to count
// with CountTokens instead.
func (c *Client) ComputeTokens(ctx context.Context, model string, contents []*genai.Content, config *genai.ComputeTokensConfig) (*genai.ComputeTokensResponse, error) {
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if model != "" && !c.vertex(c.model(strings.TrimPrefix(model, "models/"))) {
		return nil, &requestError{where: fmt.Sprintf("ComputeTokens' model %q", model), what: "is called on the Gemini API, which has no computeTokens (Vertex AI only)",
			fix: "count tokens with CountTokens, or call the model through a Vertex AI SDK client (WithGenAIClient, WithModelBackend)"}
	}
	var cfg genai.ComputeTokensConfig
	if config != nil {
		cfg = *config
	}
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.sdkRetries)
	return tokenCall(ctx, c, "ComputeTokens", model, contents, func(ctx context.Context, api modelsAPI, wire string) (*genai.ComputeTokensResponse, error) {
		return api.ComputeTokens(ctx, wire, contents, &cfg)
	})
}

// tokenCall sends one request of model's countTokens endpoint (CountTokens,
// ComputeTokens, named by method in errors) through the call's bulkhead,
// the endpoint's breaker and classifier-driven retries: not the limiter
// (free of quota), no cascade, no Fallback. send makes the request through
// api as the model named wire.
func tokenCall[R any](ctx context.Context, c *Client, method, model string, contents []*genai.Content, send func(ctx context.Context, api modelsAPI, wire string) (R, error)) (resp R, err error) {
	if err := checkContents(contents); err != nil {
		return resp, err
	}
	if model == "" {
		return resp, &requestError{where: method + "' model", what: "is empty", fix: `give the model's name, e.g. "gemini-2.5-flash"`}
	}
	bh, err := c.enterBulkhead(ctx)
	if err != nil {
		return resp, err
	}
	defer bh.leave(&err)
	tc := newCall[R](ctx, c, endpointCount, model, contents)
	tc.only = true
	tc.send = func(ctx context.Context, _ *call[R], m *modelState) (R, error) {
		return send(ctx, c.modelsFor(m), m.wire)
	}
	return tc.run(ctx)
}

// GenAI returns the SDK client the Client calls through, for what
// geminiguard does not wrap (Files, Caches, Live, Tunings, Models.Update,
// Models.Delete, ...).
// Calls made on it bypass the chain: no limiter, breaker, retry, cascade or
// Fallback, and Stats does not see them. With WithGenAIClient it is the
// client given; otherwise the one New built, whose own retry is off. Safe for concurrent use, as the SDK's client is.
// Nil on a Client not made by New.
func (c *Client) GenAI() *genai.Client {
	if !c.made() {
		return nil
	}
	return c.sdk()
}

// logReport logs what CheckCascade found that deserves attention.
func (c *Client) logReport(r *CascadeReport) {
	if c.cfg.logger == nil || r == nil {
		return
	}
	for _, w := range r.Warnings {
		c.cfg.logger.Warn("geminiguard: cascade check", slog.String("warning", w))
	}
}
