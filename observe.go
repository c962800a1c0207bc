package geminiguard

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// Hooks are called synchronously, outside every lock of the Client, from the
// goroutine of the call that caused the event, with that call's context: the
// caller's, carrying the call's span when tracing is on (see
// WithTracerProvider), so that a hook can correlate the event with the
// request (trace.SpanContextFromContext, the caller's values). They must be
// quick and safe for concurrent use. A nil field is skipped.
type Hooks struct {
	OnRetry       func(context.Context, RetryEvent)       // before sleeping for a retry of the same model
	OnStateChange func(context.Context, StateChangeEvent) // a breaker changed state
	OnCoolDown    func(context.Context, CoolDownEvent)    // a model or the project started (or extended) a cool-down
	OnFallback    func(context.Context, FallbackEvent)    // the Fallback answered a call
}

// RetryEvent: the call will retry Model after Delay.
type RetryEvent struct {
	Model   string
	Attempt int   // the attempt that failed, 1 for the first
	Err     error // its error
	Verdict Verdict
	Delay   time.Duration
}

// StateChangeEvent: a breaker of Model (for Endpoint "generate" or "embed")
// went From → To At.
type StateChangeEvent struct {
	Model    string
	Endpoint string
	From, To State
	At       time.Time
}

// CoolDownEvent: Model ("" for the whole project) is left alone until Until
// because of a Reason-class failure.
type CoolDownEvent struct {
	Model  string
	Until  time.Time
	Reason Class
}

// FallbackEvent: every model failed for a call whose first choice was Model,
// and the Fallback answered.
type FallbackEvent struct {
	Model string
	Err   *CascadeError
}

// CallRecord describes one call: the model that answered, every attempt with
// its error and the wait before it, and whether the Fallback answered.
type CallRecord struct {
	Model    string        // model that answered; "" when the call failed or the Fallback answered
	Attempts []Attempt     // in order, skipped models included
	Fallback bool          // the Fallback answered
	Resumes  int           // streams: times the stream was cut and resumed (WithStreamResume)
	Latency  time.Duration // whole call, waits included: from its start to the end of its last upstream request, wait or Fallback (0 for a call refused without a request)
	// Tokens and Cost add up every response of the call that reported
	// usageMetadata: the answer, its CONTINUATION parts, the streams a
	// resume joined, and failed unary answers that report usage (a blocked
	// prompt, an empty answer). Each response is priced at the instant it
	// arrived (a stream's when it ended) at its model's price then (Prices,
	// WithPrices), rounded to the micro-dollar. CostKnown is false when a
	// response's model had no price then: Cost is then what the priced ones
	// cost, a lower bound. The Fallback's answer and failures without a
	// response (a 429, a 503) count nothing. Embeddings are not counted.
	Tokens    Tokens
	Cost      Micros
	CostKnown bool
	// Deduplicated: the call sent nothing and got the answer of an
	// identical call in flight (WithDedup). Replayed: it got the answer of
	// an earlier call with the same idempotency key, stored or in flight
	// (Idempotent). Either way Model and Fallback are that call's,
	// Attempts, Tokens and Cost are empty, and Latency is the wait.
	Deduplicated bool
	Replayed     bool
	// Cache is the answer cache's entry that answered (WithAnswerCache,
	// SemanticCache): set with Fallback when a cache, not the Fallback,
	// gave the answer.
	Cache CacheHit
}

type callRecordKey struct{}

// RecordCall returns a context that makes the Client method called with
// it fill rec when the call returns. Use one record per call; rec must not be
// read before the call returns.
func RecordCall(ctx context.Context, rec *CallRecord) context.Context {
	return context.WithValue(ctx, callRecordKey{}, rec)
}

func callRecordFrom(ctx context.Context) *CallRecord {
	rec, _ := ctx.Value(callRecordKey{}).(*CallRecord)
	return rec
}

// Stats is a snapshot of the Client's counters, taken by Client.Stats.
type Stats struct {
	Calls        int64   // calls made through the Client
	Successes    int64   // calls answered by a model
	Fallbacks    int64   // calls answered by the Fallback
	SuccessRate  float64 // (Successes + Fallbacks) / Calls; 0 with no calls
	FallbackRate float64 // Fallbacks / Calls
	// Latency percentiles of the last 4096 calls (failed ones included).
	LatencyP50, LatencyP95, LatencyP99 time.Duration
	ProjectCoolDownUntil               time.Time    // zero when the project is not cooling down
	Models                             []ModelStats // cascade models first, in order, then the others kept (at most 256, the most recently called), by name

	Bulkheads []BulkheadStats // by name; nil without WithBulkhead
	Budget    BudgetStats     // the spend against WithBudget's limits; zero without
	Fleet     FleetStats      // the shared state's figures; zero without WithSharedState
	Cache     CacheStats      // the answer cache's lookups; zero without WithAnswerCache
	Batch     BatchStats      // the Batch API lane's jobs and requests (Client.Batches)
}

// CacheStats count the answer cache's lookups (WithAnswerCache), made when
// every model of a call failed: the answers it gave by kind (see CacheKind),
// and the lookups that found none (the Fallback, if any, was asked next:
// Stats.Fallbacks less the hits is the Fallback's own answers).
type CacheStats struct {
	Exact, Template, Semantic, Misses int64
}

// ModelStats are one model's counters.
type ModelStats struct {
	Model          string
	State          State           // generation breaker
	EmbedState     State           // embedding breaker
	Requests       int64           // upstream requests sent
	Successes      int64           // requests answered
	Failures       map[Class]int64 // failed requests by class
	Retries        int64           // retries of this model
	Skipped        int64           // times the model was skipped (open, cooling, out of tokens, the call ended before its request left): CallRecord's skipped attempts
	CoolDownUntil  time.Time       // zero when not cooling down
	CoolDownReason Class
	TokensUsed     int64 // input tokens granted by the limiter (0 without a token limit); Tokens counts what the API reported
	// Tokens and Cost add up the model's responses as CallRecord's do,
	// whether or not limits are set. CostKnown is false once a response
	// had no price for the model: Cost is then a lower bound.
	Tokens    Tokens
	Cost      Micros
	CostKnown bool
}

// modelCounters are one model's atomic counters.
type modelCounters struct {
	requests, successes, retries, skipped atomic.Int64
	failures                              [numClasses]atomic.Int64
}

// count records the outcome of one upstream request.
func (m *modelState) count(err error, v Verdict) {
	if err == nil {
		m.counters.successes.Add(1)
		return
	}
	if int(v.Class) < len(m.counters.failures) {
		m.counters.failures[v.Class].Add(1)
	}
}

// latencyWindow is how many recent call latencies Stats' percentiles cover.
const latencyWindow = 4096

// clientStats are the Client's call counters and its latency window, all
// lock-free: recording a call is a few atomic operations.
type clientStats struct {
	calls, successes, fallbacks atomic.Int64
	// The answer cache's answers by kind, and lookups that found none.
	cacheExact, cacheTemplate, cacheSemantic, cacheMisses atomic.Int64
	defaults                                              atomic.Int64                // the Fallback's own answers (fallbacks less the cache's)
	recorded                                              atomic.Uint64               // calls recorded; the next slot is recorded % latencyWindow
	latencies                                             [latencyWindow]atomic.Int64 // ring of the latest call latencies, in nanoseconds
}

// cacheHit counts an answer of the answer cache.
func (s *clientStats) cacheHit(k CacheKind) {
	switch k {
	case CacheExact:
		s.cacheExact.Add(1)
	case CacheTemplate:
		s.cacheTemplate.Add(1)
	case CacheSemantic:
		s.cacheSemantic.Add(1)
	}
}

func (s *clientStats) record(ok, fallback bool, latency time.Duration) {
	switch {
	case fallback:
		s.fallbacks.Add(1)
	case ok:
		s.successes.Add(1)
	}
	i := s.recorded.Add(1) - 1
	s.latencies[i%latencyWindow].Store(int64(latency))
}

// window returns the recorded latencies, sorted.
func (s *clientStats) window() []time.Duration {
	n := min(s.recorded.Load(), latencyWindow)
	lat := make([]time.Duration, n)
	for i := range lat {
		lat[i] = time.Duration(s.latencies[i].Load())
	}
	slices.Sort(lat)
	return lat
}

// Stats returns a snapshot of the Client's counters. Safe for concurrent use;
// it copies and sorts the latency window, so call it for dashboards, not per
// request. Zero on a Client not made by New.
func (c *Client) Stats() Stats {
	if !c.made() {
		return Stats{}
	}
	now := time.Now()
	st := Stats{Calls: c.stats.calls.Load(), Successes: c.stats.successes.Load(), Fallbacks: c.stats.fallbacks.Load()}
	if st.Calls > 0 {
		st.SuccessRate = float64(st.Successes+st.Fallbacks) / float64(st.Calls)
		st.FallbackRate = float64(st.Fallbacks) / float64(st.Calls)
	}
	lat := c.stats.window()
	st.LatencyP50, st.LatencyP95, st.LatencyP99 = percentile(lat, 0.50), percentile(lat, 0.95), percentile(lat, 0.99)
	if until, _, ok := c.project.until(now); ok {
		st.ProjectCoolDownUntil = until
	}
	for _, m := range c.states {
		st.Models = append(st.Models, m.stats(now))
	}
	for _, name := range c.otherModels() {
		if m, ok := c.others.Peek(name); ok {
			st.Models = append(st.Models, m.stats(now))
		}
	}
	st.Bulkheads = c.bulkheadStats()
	st.Budget = c.spending.stats(now)
	st.Fleet = c.fleet.stats()
	st.Cache = CacheStats{Exact: c.stats.cacheExact.Load(), Template: c.stats.cacheTemplate.Load(), Semantic: c.stats.cacheSemantic.Load(), Misses: c.stats.cacheMisses.Load()}
	st.Batch = c.batch.stats()
	return st
}

func (m *modelState) stats(now time.Time) ModelStats {
	ms := ModelStats{
		Model:      m.name,
		State:      m.breakers[endpointGenerate].state(now),
		EmbedState: m.breakers[endpointEmbed].state(now),
		Requests:   m.counters.requests.Load(),
		Successes:  m.counters.successes.Load(),
		Retries:    m.counters.retries.Load(),
		Skipped:    m.counters.skipped.Load(),
		Failures:   make(map[Class]int64),
		TokensUsed: m.lim.snapshot().TokensUsed,
		Tokens: Tokens{Input: m.spent.input.Load(), Output: m.spent.output.Load(),
			Thinking: m.spent.thinking.Load(), Cached: m.spent.cached.Load()},
		Cost:      Micros(m.spent.cost.Load()),
		CostKnown: m.spent.unpriced.Load() == 0,
	}
	for cl := range m.counters.failures {
		if n := m.counters.failures[cl].Load(); n > 0 {
			ms.Failures[Class(cl)] = n
		}
	}
	if until, reason, ok := m.cool.until(now); ok {
		ms.CoolDownUntil, ms.CoolDownReason = until, reason
	}
	return ms
}

// percentile of sorted durations, nearest rank; 0 when empty.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// The reports below go to the hook, the log and the metrics, with the
// context of the call that caused the event (the log's handler gets it too).

// stateChanged reports a breaker transition.
func (c *Client) stateChanged(ctx context.Context, model string, e endpoint, tr *transition) {
	if tr == nil {
		return
	}
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "geminiguard: breaker state changed", slog.String("model", model), slog.String("endpoint", e.String()),
			slog.String("from", tr.From.String()), slog.String("to", tr.To.String()))
	}
	if h := c.cfg.hooks.OnStateChange; h != nil {
		h(ctx, StateChangeEvent{Model: model, Endpoint: e.String(), From: State(tr.From), To: State(tr.To), At: tr.At})
	}
}

// cooledDown reports a new or extended cool-down.
func (c *Client) cooledDown(ctx context.Context, ev CoolDownEvent) {
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "geminiguard: cooling down", slog.String("model", ev.Model), slog.Time("until", ev.Until), slog.String("reason", ev.Reason.String()))
	}
	c.tel.count(ctx, func(ins *instruments) metric.Int64Counter { return ins.coolDowns }, ev.Model, ev.Reason)
	if h := c.cfg.hooks.OnCoolDown; h != nil {
		h(ctx, ev)
	}
}

// retrying reports a retry.
func (c *Client) retrying(ctx context.Context, ev RetryEvent) {
	if l := c.cfg.logger; l != nil && l.Enabled(ctx, slog.LevelDebug) {
		l.LogAttrs(ctx, slog.LevelDebug, "geminiguard: retrying", slog.String("model", ev.Model), slog.Int("attempt", ev.Attempt),
			slog.String("class", ev.Verdict.Class.String()), slog.String("rule", ev.Verdict.Rule), slog.Duration("delay", ev.Delay))
	}
	c.tel.count(ctx, func(ins *instruments) metric.Int64Counter { return ins.retries }, ev.Model, ev.Verdict.Class)
	if h := c.cfg.hooks.OnRetry; h != nil {
		h(ctx, ev)
	}
}

// fellBack reports a fallback answer.
func (c *Client) fellBack(ctx context.Context, ev FallbackEvent) {
	if c.cfg.logger != nil {
		c.cfg.logger.LogAttrs(ctx, slog.LevelInfo, "geminiguard: fallback answered", slog.String("model", ev.Model))
	}
	c.tel.count(ctx, func(ins *instruments) metric.Int64Counter { return ins.fallbacks }, ev.Model, Classify(ev.Err).Class)
	if h := c.cfg.hooks.OnFallback; h != nil {
		h(ctx, ev)
	}
}
