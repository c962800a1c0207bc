package geminiguard

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
)

// Option configures a Client. Options are values: build them once and reuse
// them freely. The last option of a kind wins.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// config is everything New needs; defaultConfig sets the defaults once.
type config struct {
	genaiClient     *genai.Client
	apiKey          secret
	baseURL         string
	httpClient      *http.Client
	cascade         []string
	known           []string // WithKnownModels': models outside the cascade that per-model options may name
	limits          map[string]Limits
	adjust          map[string]func(*genai.GenerateContentConfig) // per model: WithModelConfig
	headroom        float64
	retry           RetryPolicy
	breaker         BreakerSettings
	attemptTimeout  time.Duration
	callTimeout     time.Duration
	firstChunk      time.Duration
	idle            time.Duration
	resume          bool
	fallback        Fallback
	answers         AnswerCache // WithAnswerCache; nil: none
	recorder        *recorder   // WithRecorder; nil: none
	startupCheck    bool
	logger          *slog.Logger
	hooks           Hooks
	projectCoolDown time.Duration
	exactTokens     bool
	shutdowns       map[string]Shutdown
	prices          map[string][]Price  // WithPrices, by model
	tables          tableFiles          // WithPricesFile, WithShutdownsFile
	bulkheads       map[string]Bulkhead // WithBulkhead, by name
	dedup           bool                // WithDedup
	idempotencyTTL  time.Duration       // WithIdempotencyTTL
	jitterSource    rand.Source
	hedge           HedgePolicy          // WithHedging's
	meterProvider   metric.MeterProvider // nil: otel.GetMeterProvider()
	tracerProvider  trace.TracerProvider // nil: otel.GetTracerProvider()
	problems        []error              // found while applying options; reported by validate
	budget          *Budget              // WithBudget's, SteerAt defaulted; nil: none
	shared          fleet.SharedState    // WithSharedState's; nil: none
	fleetSize       int                  // WithFleetSize's; 0: none
	project         string               // WithProject's; "": the key's hash
	// sdkOptions names the options given that build the SDK client
	// (WithAPIKey, WithBaseURL, WithHTTPClient), in order, once each:
	// validate rejects them next to WithGenAIClient.
	sdkOptions []string
	// modelTimeouts are WithModelTimeout's, by cascade entry; nil: none.
	modelTimeouts map[string]time.Duration
	// backends are WithModelBackend's, by cascade entry; nil: none.
	backends map[string]*modelBackend
}

// gave records that the option named opt, one that builds the SDK client,
// was given.
func (cfg *config) gave(opt string) {
	if !slices.Contains(cfg.sdkOptions, opt) {
		cfg.sdkOptions = append(cfg.sdkOptions, opt)
	}
}

// redacted is what is printed in place of an API key.
const redacted = "[redacted]"

// secret holds an API key that no fmt verb prints: String, GoString and
// Format print "[redacted]", and where fmt cannot call them (the unexported
// field of a struct printed with %v, which fmt reads by reflection) it finds
// only a pointer. Only reveal gives the key, for the SDK. The zero value is
// no key.
type secret struct{ key *string }

func newSecret(key string) secret { return secret{key: &key} }

// reveal returns the key, "" when there is none.
func (s secret) reveal() string {
	if s.key == nil {
		return ""
	}
	return *s.key
}

func (secret) String() string                { return redacted }
func (secret) GoString() string              { return redacted }
func (secret) Format(f fmt.State, verb rune) { io.WriteString(f, redacted) }

// Defaults of the options whose doc comments name them.
const (
	defaultModel           = "gemini-2.5-flash-lite" // not deprecated as of 2026-11 (see Shutdowns)
	defaultHeadroom        = 0.8
	defaultAttemptTimeout  = 60 * time.Second
	defaultCallTimeout     = 180 * time.Second
	defaultFirstChunk      = 30 * time.Second
	defaultIdle            = 20 * time.Second
	defaultProjectCoolDown = 5 * time.Minute
	retryBudgetTTL         = 10 * time.Second // Finagle's RetryBudget default TTL
)

func defaultConfig() config {
	return config{
		cascade:         []string{defaultModel},
		headroom:        defaultHeadroom,
		retry:           RetryPolicy{}.withDefaults(),
		breaker:         BreakerSettings{}.withDefaults(),
		attemptTimeout:  defaultAttemptTimeout,
		callTimeout:     defaultCallTimeout,
		firstChunk:      defaultFirstChunk,
		idle:            defaultIdle,
		startupCheck:    true,
		projectCoolDown: defaultProjectCoolDown,
		idempotencyTTL:  defaultIdempotencyTTL,
		hedge:           HedgePolicy{On: true, Budget: hedgeRatio},
	}
}

// WithGenAIClient makes the Client call through an SDK client the app already
// has. Its own retry is switched off per call (ours runs instead) and its
// automatic continuation too. The SDK client carries its own key, endpoint
// and HTTP client: New rejects WithAPIKey, WithBaseURL and WithHTTPClient
// given with it.
// Default: a new SDK client built from WithAPIKey, WithBaseURL, WithHTTPClient.
func WithGenAIClient(c *genai.Client) Option {
	return optionFunc(func(cfg *config) {
		if c == nil {
			cfg.problems = append(cfg.problems, errors.New("geminiguard: WithGenAIClient(nil): pass the *genai.Client from genai.NewClient, or leave the option out"))
			return
		}
		cfg.genaiClient = c
	})
}

// WithAPIKey sets the Gemini API key. The key never appears in an error, a log
// line or a panic of this package.
// Default: the SDK's environment lookup (GOOGLE_API_KEY, then GEMINI_API_KEY).
func WithAPIKey(key string) Option {
	return optionFunc(func(cfg *config) { cfg.apiKey = newSecret(key); cfg.gave("WithAPIKey") })
}

// WithBaseURL sends requests to another endpoint: a proxy, a regional
// endpoint, a test server.
// Default: the SDK's (https://generativelanguage.googleapis.com/).
func WithBaseURL(url string) Option {
	return optionFunc(func(cfg *config) { cfg.baseURL = url; cfg.gave("WithBaseURL") })
}

// WithHTTPClient sets the HTTP client the SDK sends requests with.
// Default: the SDK's (an http.Client on http.DefaultTransport).
func WithHTTPClient(c *http.Client) Option {
	return optionFunc(func(cfg *config) { cfg.httpClient = c; cfg.gave("WithHTTPClient") })
}

// WithCascade sets the models to try, in order: the first is the primary.
// Names may carry the "models/" prefix. Default: "gemini-2.5-flash-lite" alone.
func WithCascade(models ...string) Option {
	return optionFunc(func(cfg *config) {
		cfg.cascade = make([]string, len(models))
		for i, m := range models {
			cfg.cascade[i] = strings.TrimPrefix(m, "models/")
		}
	})
}

// WithKnownModels declares models outside the cascade that calls name
// (an embedding model for EmbedContent, an image model for GenerateImages,
// a model a GenerateContent call asks for by name), so that the per-model
// options (WithLimits, WithModelConfig) may name them: New refuses those
// options for a model that is neither in the cascade, nor a
// WithModelBackend entry, nor declared here, as a misspelt name would
// otherwise silently switch that model's limits off. Declaring a model
// does not put it in the cascade. Names may carry the "models/" prefix.
// Several WithKnownModels add up. Default: none.
func WithKnownModels(models ...string) Option {
	return optionFunc(func(cfg *config) {
		cfg.known = slices.Clone(cfg.known)
		for _, m := range models {
			cfg.known = append(cfg.known, strings.TrimPrefix(m, "models/"))
		}
	})
}

// WithModelConfig adjusts the request config sent to model: before each
// request to it (a retry, a cascade step, a hop or a resume), adjust is
// called with a copy of the call's config (a zero config when the call
// passed nil) and may set any field: drop a CachedContent made for another
// model, change the thinking budget, swap tools. The copy is shallow: set
// fields and replace pointers, maps and slices, but do not write through
// them, as they are the caller's. The caller's config is never modified;
// the SDK's own retry and automatic continuation stay off whatever adjust
// sets. The adjusted config is checked as the caller's is (numbers JSON
// cannot encode, nil elements): a malformed one is that model's failure,
// not the call's: nothing is sent to the model, the call records it as
// skipped with an error that names the override and the field (Classify:
// ClassBadRequest, ScopeModel) and goes on to the next model. adjust must
// be safe for concurrent use and give the same config for the same input:
// it is called on the call's goroutine, once to check the config and once
// to send it. The last WithModelConfig for a model wins; a nil adjust
// removes it. model must be known to New, as for WithLimits. Default:
// every model gets the call's config as it is.
func WithModelConfig(model string, adjust func(cfg *genai.GenerateContentConfig)) Option {
	return optionFunc(func(cfg *config) {
		cfg.adjust = cloneMap(cfg.adjust)
		name := strings.TrimPrefix(model, "models/")
		if adjust == nil {
			delete(cfg.adjust, name)
			return
		}
		cfg.adjust[name] = adjust
	})
}

// WithLimits sets a model's quota as the Google project has it (see
// https://ai.google.dev/gemini-api/docs/rate-limits); the Client sends at most
// WithHeadroom of it. A zero field means no local limit on that dimension;
// IPM applies to the image methods (GenerateImages, ...). model must be in
// the cascade, a WithModelBackend entry or declared with WithKnownModels:
// New refuses any other name, as a misspelt one would switch the limits
// off. Default: no local limits; limits the server states in a 429 are
// learned.
func WithLimits(model string, l Limits) Option {
	return optionFunc(func(cfg *config) {
		if cfg.limits == nil {
			cfg.limits = make(map[string]Limits)
		} else {
			cfg.limits = cloneMap(cfg.limits)
		}
		cfg.limits[strings.TrimPrefix(model, "models/")] = l
	})
}

// WithHeadroom sets the fraction of each configured limit the Client uses, in
// (0, 1]. Default: 0.8.
func WithHeadroom(fraction float64) Option {
	return optionFunc(func(cfg *config) { cfg.headroom = fraction })
}

// WithRetry sets the retry policy; zero fields take their defaults.
// Default: RetryPolicy{} (see its fields).
func WithRetry(p RetryPolicy) Option {
	return optionFunc(func(cfg *config) { cfg.retry = p.withDefaults() })
}

// WithBreaker sets the circuit breaker settings; zero fields take their
// defaults. Default: BreakerSettings{} (see its fields).
func WithBreaker(s BreakerSettings) Option {
	return optionFunc(func(cfg *config) { cfg.breaker = s.withDefaults() })
}

// WithTimeouts sets the timeout of one upstream attempt and of a whole call
// (all attempts, waits and models). attempt must be shorter than call; the
// remaining call budget shrinks the last attempts. For streams, attempt
// bounds the time to the first chunk only (see WithStreamDeadlines).
// Default: 60s and 180s.
func WithTimeouts(attempt, call time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.attemptTimeout, cfg.callTimeout = attempt, call })
}

// WithSharedState makes the Client one replica of a fleet: the Clients of
// one Google project, in any number of processes, that share s. Limits
// (WithLimits, and those learned from 429s) are then the project's,
// counted across the fleet; a cool-down (a daily quota, a spend cap, a
// retired model, a project-wide failure), an open or closed breaker and a
// learned limit seen by one replica hold for all of them. Give every
// replica the same Limits (the project's, not a share of them), the same
// key or Vertex AI project, and a [fleet.SharedState] of the same store: package
// redisstore keeps it on Redis; [fleet.NewMemoryState] in this process. A store that
// is also a [fleet.Subscriber] tells replicas of new facts at once (a
// [fleet.FactSubscriber] tells the fact itself, read without a round trip), one that is
// a [fleet.AnswerStore] keeps idempotent answers for the fleet (Idempotent),
// one that is a [fleet.VectorStore] shares the entries of each replica's
// SemanticCache (NewSemanticCache), and one that is a [fleet.JobStore]
// keeps the project's open batch jobs (Batches.Open); all four of those are.
//
// Cost: a replica leases requests of each limited model in batches sized
// to its recent traffic, so a call makes at most one round trip to the
// store, and a steady load far fewer; a model without limits costs one
// round trip a second while calls flow. What a replica learns from an error
// costs a round trip when it learns it.
//
// The store never fails a call: New makes one warm-up round trip (bounded
// by 1s within New's context) and subscribes in the background; each call
// to the store is bounded by what its latency taught (30ms to 250ms), a
// lease it does not answer sends the call to the next model, and three
// failed round trips put it behind a breaker for 2s ([fleet.StoreSettings], set by
// the store's options), during which the Client carries on alone, each
// limit divided by the most replicas seen live over about a minute (by
// WithFleetSize, else 10, until it has seen the fleet), and counts the
// requests it lets through (Stats.Fleet, a Warn log line when it starts,
// an Info one when the store answers again, the
// geminiguard.fleet.uncoordinated metric); they are reported to the fleet
// when the store answers again, with the facts learned meanwhile. A nil or
// typed-nil store is refused. Project ids are hashes (WithProject): no key
// reaches the store.
// Default: none; the Client's state is its own.
func WithSharedState(s fleet.SharedState) Option {
	return optionFunc(func(cfg *config) {
		if s == nil {
			cfg.problems = append(cfg.problems, errors.New("geminiguard: WithSharedState(nil): pass a store (redisstore.New, fleet.NewMemoryState), or leave the option out"))
			return
		}
		if _, err := storeSettingsOf(s); err != nil {
			cfg.problems = append(cfg.problems, err)
			return
		}
		cfg.shared = s
	})
}

// WithDedup makes identical GenerateContent calls in flight at once share
// one call: a call whose model, contents and config (compared by a SHA-256
// of their JSON) are those of a call in flight of the same bulkhead
// (InBulkhead) sends nothing and gets that call's answer or error.
// Calls of different bulkheads never share one: a feature's full bulkhead
// never queues nor refuses another feature's call. Default: off.
//
// Each caller gets a copy of the response's top-level struct, so setting
// its fields does not change another caller's answer; the values it points
// to (Candidates, UsageMetadata, ...) are shared, so treat them as
// read-only. The shared call keeps the values of the context of the caller
// that started it (its bulkhead, its trace), not its cancellation nor its
// deadline: it runs, within the call timeout of WithTimeouts, while any
// caller waits for it, and stops when the last one leaves. A caller never
// waits longer than it would alone: when its context ends it returns the
// context's error at once (an error matching ErrBulkheadFull too when its
// deadline passed while the shared call waits in the bulkhead's queue, as
// alone); when the shared call waits, or is about to wait (a backoff, a
// pause), past the caller's deadline, the caller gets at once
// what a call alone whose models all failed gets: the answer cache's
// answer (WithAnswerCache), the Fallback's, or a *CascadeError holding the
// shared call's attempts so far; it is then counted in Stats as a call of
// its own. The caller that started it
// gets its CallRecord; the others get one with Deduplicated set, take no
// bulkhead slot, and are not counted in Stats nor in metrics. Streams (GenerateContentStream) are never shared: a
// stream's chunks are consumed at each caller's pace.
func WithDedup(on bool) Option {
	return optionFunc(func(cfg *config) { cfg.dedup = on })
}

// WithIdempotencyTTL sets how long the answer of a call with an idempotency
// key (Idempotent) is replayed. It must be positive. Default: 10
// minutes.
func WithIdempotencyTTL(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.idempotencyTTL = d })
}

// WithStreamDeadlines sets how long a stream may wait for its first chunk and
// between two chunks before the stall counts as a failure (retried or
// cascaded before the first chunk, reported or resumed after it).
// Default: 30s and 20s.
func WithStreamDeadlines(firstChunk, idle time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.firstChunk, cfg.idle = firstChunk, idle })
}

// WithStreamResume makes GenerateContentStream continue a stream cut after
// its first chunk: it sends the request again with the text received so far
// as a partial model turn (to the same model, or the next in the cascade) and
// yields only the new text. Default: off (a cut is reported as a
// *StreamError).
func WithStreamResume(on bool) Option {
	return optionFunc(func(cfg *config) { cfg.resume = on })
}

// WithFallback sets the last resort that answers when every model failed.
// Default: none (the call returns a *CascadeError).
func WithFallback(f Fallback) Option {
	return optionFunc(func(cfg *config) { cfg.fallback = f })
}

// WithAnswerCache keeps recent good answers in c and answers from them a
// GenerateContent call whose every model failed: an exact-match cache
// fallback. Default: none.
//
// Filling: every unary GenerateContent call that a model answers puts that
// answer into c (never a Fallback's answer, nor a cached one, nor an error);
// streams do not fill it. Serving: when every model of a call failed (not
// for request-scoped failures, nor after the caller cancelled, as for the
// Fallback), the Client asks c first and then, when c has no answer, the
// Fallback of WithFallback. A cached answer is served exactly like the
// Fallback's: IsFallback(resp) is true (its ModelVersion is the model's that
// gave it), CallRecord.Fallback is set, the OnFallback hook and
// Stats.Fallbacks count it, and a stream gets it as its single chunk
// (before anything else was yielded).
//
// The key is exact: the model family of the call's first choice (the
// cascade's primary when the call names none) — the name without "models/"
// and without a final "-latest", three-digit version ("-001") or
// "-preview..." suffix, so "gemini-2.0-flash-001" and "gemini-2.0-flash"
// share answers — and a SHA-256 of the Client's project (WithProject's id,
// else the API key, hashed) and of the JSON of the family, contents and
// config: Clients of different projects sharing a cache share no answers.
// Only an identical request (same history, same config) finds an
// answer; a multi-turn chat's next turn never gets a previous turn's. The
// key's text is the family, ":", and the digest in hex, for stores that list
// keys. Requests whose contents or config JSON cannot encode are not cached.
//
// A cached answer may be stale (up to the cache's TTL): use it where an old
// good answer beats an error. NewAnswerCache is the in-memory cache.
func WithAnswerCache(c AnswerCache) Option {
	return optionFunc(func(cfg *config) { cfg.answers = c })
}

// WithStartupCheck turns the CheckCascade run by New on or off.
// Default: on.
func WithStartupCheck(on bool) Option {
	return optionFunc(func(cfg *config) { cfg.startupCheck = on })
}

// WithLogger logs breaker transitions and cool-downs at Info and attempts at
// Debug; never a key or a prompt. Default: no logging.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(cfg *config) { cfg.logger = l })
}

// WithHooks sets functions called synchronously, outside every lock, on
// retries, breaker state changes, cool-downs and fallbacks. They must be
// quick and safe for concurrent use. Default: none.
func WithHooks(h Hooks) Option {
	return optionFunc(func(cfg *config) { cfg.hooks = h })
}

// WithProjectCoolDown sets how long the whole Client stays away from the API
// after a project-scoped failure (spend cap, invalid or leaked key, API
// disabled); CheckCascade succeeding ends it early.
// Default: 5m.
func WithProjectCoolDown(d time.Duration) Option {
	return optionFunc(func(cfg *config) { cfg.projectCoolDown = d })
}

// WithExactTokenCount makes the Client ask the API's countTokens for the
// input tokens of each call before sending it, for models with a TPM limit,
// instead of the cheap local estimate. It costs one extra (quota-free)
// request per call. Default: off.
func WithExactTokenCount(on bool) Option {
	return optionFunc(func(cfg *config) { cfg.exactTokens = on })
}

// WithShutdowns adds to or overrides the built-in table of announced model
// shutdown dates that CheckCascade warns about. Default: the built-in table
// (Shutdowns).
func WithShutdowns(table map[string]Shutdown) Option {
	return optionFunc(func(cfg *config) { cfg.shutdowns = cloneMap(table) })
}

// WithJitterSource draws the random part of retry delays (see Jitter) from
// src instead of a process-wide generator. Seeded (rand.NewPCG(1, 2)), it
// makes the delays of a run repeat in the next: for tests and benchmarks
// that must give the same figures every time. The Client serialises its
// draws, so src need not be safe for concurrent use; nothing else may draw
// from it. Default: math/rand/v2's global generator.
func WithJitterSource(src rand.Source) Option {
	return optionFunc(func(cfg *config) {
		if src == nil {
			cfg.problems = append(cfg.problems, errors.New("geminiguard: WithJitterSource(nil): pass a source, e.g. rand.NewPCG(1, 2), or leave the option out"))
		}
		cfg.jitterSource = src
	})
}

// WithMeterProvider makes the Client record its metrics with mp: the GenAI
// client metrics of the OpenTelemetry semantic conventions
// (gen_ai.client.operation.duration, gen_ai.client.token.usage) and the
// chain's own under "geminiguard." (attempts, retries, skips, cool-downs,
// fallbacks, limiter waits, cost, breaker state). Default: the global
// provider, otel.GetMeterProvider(), read once by New (a provider set later
// with otel.SetMeterProvider is followed). A no-op provider costs a call
// nothing. Attributes never carry a prompt, an answer or a key. Close
// unregisters the breaker state gauge's callback.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp == nil {
			c.problems = append(c.problems, errors.New("geminiguard: WithMeterProvider(nil): pass a MeterProvider (noop.NewMeterProvider() records nothing), or leave the option out"))
			return
		}
		c.meterProvider = mp
	})
}

// WithTracerProvider makes the Client trace its calls with tp: one CLIENT
// span per call, named "generate_content {model}" ("embeddings {model}" for
// EmbedContent; streams as generate_content) after the GenAI semantic
// conventions, with an event per upstream request (model, class, wait,
// breaker state). The span is the parent of the SDK's requests, and rides
// in the context the hooks, the Fallback and the log get. Default: the
// global provider, otel.GetTracerProvider(), read once by New (a provider
// set later with otel.SetTracerProvider is followed). A no-op provider costs
// a call nothing. Attributes never carry a prompt, an answer or a key.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp == nil {
			c.problems = append(c.problems, errors.New("geminiguard: WithTracerProvider(nil): pass a TracerProvider (noop.NewTracerProvider() records nothing), or leave the option out"))
			return
		}
		c.tracerProvider = tp
	})
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// unknownModels reports the per-model options (WithLimits, WithModelConfig)
// that name a model New does not know: not in the cascade, not a
// WithModelBackend entry, not declared with WithKnownModels. Sorted by
// option, then model, so that the error reads the same every time.
func (cfg *config) unknownModels() []error {
	known := func(m string) bool {
		_, backend := cfg.backends[m]
		return backend || slices.Contains(cfg.cascade, m) || slices.Contains(cfg.known, m)
	}
	var errs []error
	for _, o := range []struct {
		option string
		models []string
	}{{"WithLimits", slices.Sorted(maps.Keys(cfg.limits))}, {"WithModelConfig", slices.Sorted(maps.Keys(cfg.adjust))}} {
		for _, m := range o.models {
			if !known(m) {
				errs = append(errs, fmt.Errorf("geminiguard: %s(%q): the model is not in the cascade (%s) and no WithModelBackend entry or WithKnownModels name: fix the name, or declare a model that calls name outside the cascade with WithKnownModels", o.option, m, strings.Join(cfg.cascade, ", ")))
			}
		}
	}
	return errs
}

// validate reports every problem of the configuration at once.
func (cfg *config) validate() error {
	errs := append([]error(nil), cfg.problems...)
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("geminiguard: "+format, args...)) }
	if len(cfg.cascade) == 0 {
		add("WithCascade needs at least one model name, e.g. WithCascade(%q)", defaultModel)
	}
	seen := make(map[string]bool, len(cfg.cascade))
	for i, m := range cfg.cascade {
		switch {
		case m == "":
			add("WithCascade: model %d is empty: give a name such as %q", i+1, defaultModel)
		case strings.ContainsAny(m, "?&") || strings.Contains(m, ".."):
			add("WithCascade: model %q contains '?', '&' or '..': give a bare model name", m)
		case seen[m]:
			add("WithCascade: model %q is listed twice: list each model once", m)
		}
		seen[m] = true
	}
	for m, l := range cfg.limits {
		if err := l.validate(m); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, cfg.unknownModels()...)
	if !(cfg.headroom > 0 && cfg.headroom <= 1) {
		add("WithHeadroom(%v): use a fraction in (0, 1], e.g. 0.8", cfg.headroom)
	}
	if err := cfg.retry.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, cfg.validateModelTimeouts()...)
	if err := cfg.breaker.validate(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case cfg.attemptTimeout <= 0 || cfg.callTimeout <= 0:
		add("WithTimeouts(%v, %v): both timeouts must be positive", cfg.attemptTimeout, cfg.callTimeout)
	case cfg.attemptTimeout >= cfg.callTimeout:
		add("WithTimeouts(%v, %v): the attempt timeout must be shorter than the call timeout, so a retry fits", cfg.attemptTimeout, cfg.callTimeout)
	}
	if cfg.firstChunk <= 0 || cfg.idle <= 0 {
		add("WithStreamDeadlines(%v, %v): both deadlines must be positive", cfg.firstChunk, cfg.idle)
	}
	if cfg.projectCoolDown <= 0 {
		add("WithProjectCoolDown(%v): must be positive", cfg.projectCoolDown)
	}
	if cfg.idempotencyTTL <= 0 {
		add("WithIdempotencyTTL(%v): must be positive, e.g. 10*time.Minute", cfg.idempotencyTTL)
	}
	for name, b := range cfg.bulkheads {
		if err := b.validate(name); err != nil {
			errs = append(errs, err)
		}
	}
	if cfg.genaiClient != nil {
		for _, opt := range cfg.sdkOptions {
			add("WithGenAIClient and %s: the SDK client has its own key, endpoint and HTTP client: set it in the genai.ClientConfig and leave %s out", opt, opt)
		}
	}
	return errors.Join(errs...)
}

// WithBackend makes the cascade entry named entry send its generation
// requests as model to b, a Backend that is not Gemini, e.g. a local Gemma
// on Ollama as the last tier:
//
//	local := openaicompat.New("http://localhost:11434")
//	geminiguard.New(ctx, geminiguard.WithAPIKey(key),
//		geminiguard.WithCascade("gemini-3.1-pro", "gemini-3.7-flash", "local/gemma3"),
//		geminiguard.WithBackend("local/gemma3", "gemma3:4b", local),
//		geminiguard.WithModelTimeout("local/gemma3", 2*time.Minute))
//
// entry is the name used everywhere else, as for WithModelBackend; it has
// its own breakers, cool-downs, limiter (WithLimits), learned attempt
// deadlines and attempt timeout (WithModelTimeout: local models are slow).
// CheckCascade does not look for it in any API's list: it reports the entry
// as existing, with no generation and no shutdown date. A failure of b never
// reaches further than entry (no project-wide cool-down). b serves
// GenerateContent and GenerateContentStream only: CountTokens, ComputeTokens
// and EmbedContent on entry fail, before anything is sent, with an error
// that Classify reads as ClassBadRequest, and WithExactTokenCount estimates
// its tokens locally. It has no price unless WithPrices gives one.
// OpenTelemetry reports its calls with gen_ai.provider.name "local". The
// last WithBackend or WithModelBackend for an entry wins. Default: every
// entry is a Gemini model.
func WithBackend(entry, model string, b Backend) Option {
	return optionFunc(func(cfg *config) {
		switch {
		case entry == "" || model == "":
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithBackend(%q, %q): give the cascade entry's name and the model it sends, e.g. (\"local/gemma3\", \"gemma3:4b\")", entry, model))
			return
		case b == nil:
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithBackend(%q, %q, nil): pass a Backend, e.g. openaicompat.New(\"http://localhost:11434\")", entry, model))
			return
		}
		if cfg.backends == nil {
			cfg.backends = make(map[string]*modelBackend)
		} else {
			cfg.backends = cloneMap(cfg.backends)
		}
		cfg.backends[strings.TrimPrefix(entry, "models/")] = &modelBackend{model: model, api: backendAPI{b: b, entry: entry}, local: true}
	})
}

// WithModelTimeout sets the attempt timeout of the cascade entry named
// entry, in place of WithTimeouts' attempt timeout: longer for a slow tier
// (a local model on a CPU), shorter for a model that must answer fast.
// Timeouts still nest: the call's remaining time bounds every attempt, and
// New rejects a timeout that is not positive or not shorter than the call
// timeout. A stream's first chunk is awaited for the shorter of this and
// the first-chunk deadline. The last WithModelTimeout for an entry wins.
// Default: the attempt timeout of WithTimeouts.
func WithModelTimeout(entry string, attempt time.Duration) Option {
	return optionFunc(func(cfg *config) {
		cfg.modelTimeouts = cloneMap(cfg.modelTimeouts)
		if cfg.modelTimeouts == nil {
			cfg.modelTimeouts = make(map[string]time.Duration)
		}
		cfg.modelTimeouts[strings.TrimPrefix(entry, "models/")] = attempt
	})
}

// WithModelBackend makes the cascade entry named entry send its requests as
// model through sdk, an SDK client other than the Client's own: typically
// the same model on Vertex AI as a fallback for the Gemini API, e.g.
//
//	vertex, _ := genai.NewClient(ctx, &genai.ClientConfig{Backend: genai.BackendVertexAI, Project: "p", Location: "us-central1"})
//	geminiguard.New(ctx, geminiguard.WithAPIKey(key),
//		geminiguard.WithCascade("gemini-2.5-flash", "vertex/gemini-2.5-flash"),
//		geminiguard.WithModelBackend("vertex/gemini-2.5-flash", "gemini-2.5-flash", vertex))
//
// entry is the name used everywhere else: in WithCascade, WithLimits,
// WithModelConfig, Stats, CallRecord and the Fallback's Attempts, and as the
// model argument of GenerateContent; it has its own breakers, cool-downs and
// limiter, apart from model's on the Client's own SDK client. CheckCascade
// lists sdk's models to check entry; its shutdown date is looked up as
// "vertex/"+model when sdk uses Vertex AI (Vertex AI retires models on its
// own dates), else as model. A failure that says the whole project is down
// (an invalid key, a spend cap, a disabled API) cools only entry down: the
// project of sdk is not the Client's. sdk's own retry is switched off per
// call, as for WithGenAIClient. OpenTelemetry reports entry's calls with
// gen_ai.provider.name gcp.vertex_ai when sdk uses Vertex AI.
// Several entries may share one sdk. The last WithModelBackend for an entry
// wins. Default: every entry is a model of the Client's own SDK client.
func WithModelBackend(entry, model string, sdk *genai.Client) Option {
	return optionFunc(func(cfg *config) {
		switch {
		case entry == "" || model == "":
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithModelBackend(%q, %q): give the cascade entry's name and the model it sends, e.g. (\"vertex/gemini-2.5-flash\", \"gemini-2.5-flash\")", entry, model))
			return
		case sdk == nil:
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithModelBackend(%q, %q, nil): pass the *genai.Client from genai.NewClient", entry, model))
			return
		}
		cfg.backends = cloneMap(cfg.backends)
		if cfg.backends == nil {
			cfg.backends = make(map[string]*modelBackend)
		}
		cfg.backends[strings.TrimPrefix(entry, "models/")] = &modelBackend{
			model:  strings.TrimPrefix(model, "models/"),
			api:    sdk.Models,
			sdk:    sdk,
			vertex: sdk.ClientConfig().Backend == genai.BackendVertexAI,
		}
	})
}

// WithPrices sets model's prices, replacing its built-in ones (Prices): the
// prices apply from their EffectiveFrom instants, in any order, each until
// the next takes effect; before the earliest, the model's cost is unknown.
// Use it for a model missing from the table, a price Google changed, a
// negotiated discount, or Price{} for a model that costs nothing. New
// rejects a rate below zero or above $100,000 per 1M tokens, two prices
// effective at the same instant, Long rates without LongPrompt and the
// reverse. Default: the built-in table (Prices).
func WithPrices(model string, prices ...Price) Option {
	model = strings.TrimPrefix(model, "models/")
	prices = slices.Clone(prices)
	return optionFunc(func(cfg *config) {
		if err := validatePrices(fmt.Sprintf("WithPrices(%q)", model), "price", prices); err != nil {
			cfg.problems = append(cfg.problems, err)
			return
		}
		if cfg.prices == nil {
			cfg.prices = make(map[string][]Price)
		} else {
			cfg.prices = cloneMap(cfg.prices)
		}
		cfg.prices[model] = prices
	})
}

// WithPricesFile loads a price table from the JSON file at path, of the
// format of the built-in one (see Prices; the format is described in the
// package's data/prices.json): each model in the file replaces the model's
// built-in prices, as WithPrices does, and WithPrices still replaces a
// model's prices from the file. Later files replace the models of earlier
// ones. New reports an unreadable or malformed file with an error naming
// the file, the model, the row and the field. CheckCascade warns when the
// file's as_of date is more than 90 days old. Default: the built-in table
// alone.
func WithPricesFile(path string) Option {
	return optionFunc(func(cfg *config) {
		prices, asOf, err := readTable(path, parsePrices)
		if err != nil {
			cfg.problems = append(cfg.problems, err)
			return
		}
		t := &cfg.tables
		t.prices = cloneMap(t.prices)
		if t.prices == nil {
			t.prices = make(map[string][]Price, len(prices))
		}
		for m, p := range prices {
			t.prices[m] = p
		}
		t.loaded = append(slices.Clip(t.loaded), table{name: fmt.Sprintf("price file %q", path), asOf: asOf})
		t.pricesBy = true
	})
}

// WithShutdownsFile loads a table of announced shutdowns from the JSON file
// at path, of the format of the built-in one (see Shutdowns; the format is
// described in the package's data/shutdowns.json): its keys add to or
// replace the built-in table's, and WithShutdowns adds to or replaces
// those. Later files replace the keys of earlier ones. New reports an
// unreadable or malformed file with an error naming the file, the key and
// the field. CheckCascade warns when the file's as_of date is more than 90
// days old. Default: the built-in table alone.
func WithShutdownsFile(path string) Option {
	return optionFunc(func(cfg *config) {
		shutdowns, asOf, err := readTable(path, parseShutdowns)
		if err != nil {
			cfg.problems = append(cfg.problems, err)
			return
		}
		t := &cfg.tables
		t.shutdowns = cloneMap(t.shutdowns)
		if t.shutdowns == nil {
			t.shutdowns = make(map[string]Shutdown, len(shutdowns))
		}
		for k, s := range shutdowns {
			t.shutdowns[k] = s
		}
		t.loaded = append(slices.Clip(t.loaded), table{name: fmt.Sprintf("shutdown file %q", path), asOf: asOf})
		t.shutsBy = true
	})
}

// WithBudget limits the Client's spend, as priced by the price table
// (Prices, WithPrices), per Pacific day and month: past SteerAt of a budget
// a call skips a model for a cheaper one of its order that can take it;
// once a budget is spent, every call fails at once, without a request, with
// an error matching ErrBudgetExhausted (or the Fallback's answer) until the
// day or month ends. Only responses with a known price count: a model
// without a price spends nothing. countTokens is free and never refused.
// A request counts against the budget from its admission: its estimated
// cost (input tokens as the limiter estimates them, output as the model's
// typical answer, or the config's MaxOutputTokens when the model's typical
// answer is longer or not known yet) is held until its response is
// billed at its real cost, and released when it fails, so that concurrent
// calls end at most about one call's worth above the budget (a request of
// a model that has answered nothing yet, without MaxOutputTokens, holds its
// input only until the model's first answer). With WithSharedState the
// budget is the project's: each request's estimate is reserved against the
// project's total in the shared state at admission (one round trip) and
// settled at its real cost after the answer, so that the fleet ends at most
// about one call's worth per replica in flight above the budget; while the
// store is unreachable a replica holds its estimates locally against the
// project's spend as it last heard it. New rejects a negative limit, a Budget without any limit, and
// a SteerAt outside [0, 1]. Default: no budget.
func WithBudget(b Budget) Option {
	return optionFunc(func(cfg *config) {
		var errs []error
		if b.PerDay < 0 || b.PerMonth < 0 {
			errs = append(errs, fmt.Errorf("geminiguard: WithBudget: PerDay %d and PerMonth %d must not be negative: give Micros (0.50 * Dollar is $0.50)", int64(b.PerDay), int64(b.PerMonth)))
		}
		if b.PerDay == 0 && b.PerMonth == 0 {
			errs = append(errs, errors.New("geminiguard: WithBudget: give PerDay or PerMonth (or both), e.g. Budget{PerDay: 5 * Dollar}, or leave the option out"))
		}
		if math.IsNaN(b.SteerAt) || b.SteerAt < 0 || b.SteerAt > 1 {
			errs = append(errs, fmt.Errorf("geminiguard: WithBudget: SteerAt %v is outside [0, 1]: give a fraction of the budget, e.g. 0.8 (0: the default 0.8)", b.SteerAt))
		}
		if len(errs) > 0 {
			cfg.problems = append(cfg.problems, errs...)
			return
		}
		if b.SteerAt == 0 {
			b.SteerAt = defaultSteerAt
		}
		cfg.budget = &b
	})
}

// WithBulkhead adds a bulkhead named name (see Bulkhead). Calls whose context
// carries the name (InBulkhead) go through it; calls that name no
// bulkhead go through the one named "default" if there is one, and through
// none otherwise. A name given twice keeps the last Bulkhead. New reports an
// empty name and invalid fields. Default: no bulkheads.
func WithBulkhead(name string, b Bulkhead) Option {
	return optionFunc(func(cfg *config) {
		if cfg.bulkheads == nil {
			cfg.bulkheads = make(map[string]Bulkhead)
		} else {
			cfg.bulkheads = cloneMap(cfg.bulkheads)
		}
		cfg.bulkheads[name] = b
	})
}

// WithFleetSize tells a replica of a fleet (WithSharedState) how many
// replicas to expect, for the moments it has not seen the fleet yet: from
// New until its round trips to the store have answered for a second, a
// replica that cannot reach the store divides each limit by at least n.
// Once it has seen the fleet, it divides by the most replicas it saw live
// over about the last minute. Default: each limit divided by 10.
func WithFleetSize(n int) Option {
	return optionFunc(func(cfg *config) {
		if n < 0 {
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithFleetSize(%d): pass the replicas expected, or 0 for the default", n))
			return
		}
		cfg.fleetSize = n
	})
}

// WithProject names the Google project (for Vertex AI, its project and
// location, as one string) whose quota a fleet (WithSharedState) shares:
// replicas given the same id are one fleet whatever key each uses, so a key
// rotation, or two keys of one project, keep one fleet. The store keeps
// state, idempotent answers and cached answers under a hash of the id,
// never the id itself. Default: the project is a hash of the API key (or
// of the Vertex AI project, location and key).
func WithProject(id string) Option {
	return optionFunc(func(cfg *config) {
		if id == "" {
			cfg.problems = append(cfg.problems, errors.New("geminiguard: WithProject(\"\"): pass the Google project's id, or leave the option out"))
			return
		}
		cfg.project = id
	})
}

// WithRecorder writes one line of JSON to w for every upstream request the
// Client sends and that ends (answered, or failed as the classifier read
// it), so that an incident can be played back later in fake time
// (geminitest.Replay) against another configuration. Each line is
//
//	{"at_ms":1200.25,"model":"gemini-2.5-flash","endpoint":"generate","status":503,"class":"overloaded","latency_ms":840}
//	{"at_ms":2210,"model":"gemini-2.5-flash","endpoint":"generate","status":200,"class":"stream_cut","latency_ms":310.5,"chunks":3}
//
// at_ms is the request's start in milliseconds (to the microsecond) after
// the first request recorded, status the HTTP status the API answered (200
// for an answer, for a quiet failure such as "blocked" or "empty", and for
// a stream that opened, 0 when no response came: a network error, an
// attempt timeout), class the classifier's Class (Class.String), latency_ms
// the request's time until its answer or failure (a stream's: until its
// first chunk). A stream that opened is recorded when it ends, with chunks,
// the number of chunks it delivered, and the class of what ended it:
// "none" for a whole answer, "stream_cut" for a cut (a transport error, a
// clean end without finishReason), the error's class for an error inside
// the 200. A line never holds a prompt, an answer, a header or a key.
// Requests never sent (skipped, refused locally) are not recorded; hedged
// requests that lost are not either.
//
// Lines are written whole, one Write each, under a lock, from the call's
// goroutine: w should be quick (a buffered file). A failed Write is
// dropped. Default: no recording.
func WithRecorder(w io.Writer) Option {
	return optionFunc(func(cfg *config) {
		if w == nil {
			cfg.recorder = nil
			return
		}
		cfg.recorder = &recorder{w: w}
	})
}

// WithHedging configures hedged requests; WithHedging(HedgePolicy{})
// turns them off. New rejects a Budget outside [0, 1].
// Default: on, HedgePolicy{On: true, Budget: 0.05}.
func WithHedging(p HedgePolicy) Option {
	return optionFunc(func(cfg *config) {
		if math.IsNaN(p.Budget) || p.Budget < 0 || p.Budget > 1 {
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithHedging: Budget %v is outside [0, 1]: give hedges per first attempt, e.g. 0.05 (0: the default 0.05)", p.Budget))
			return
		}
		if p.Budget == 0 {
			p.Budget = hedgeRatio
		}
		cfg.hedge = p
	})
}
