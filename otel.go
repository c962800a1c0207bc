package geminiguard

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/genai"
)

// OpenTelemetry: one CLIENT span per call and the GenAI client metrics of
// the semantic conventions (gen_ai.client.operation.duration,
// gen_ai.client.token.usage), plus the chain's own instruments under
// "geminiguard.". Nothing a user wrote or a model answered, and no key, is
// ever put in an attribute: only model names, classes, operation names and
// the server's host.
//
// When the providers are no-ops (the noop packages, or the global providers
// before otel.SetMeterProvider / otel.SetTracerProvider) a call does no
// telemetry work at all: tracing and metering are two pointer comparisons.

// instrumentationName names the Meter and Tracer.
const instrumentationName = "github.com/geminiguard/geminiguard"

// operation is what a call's span and metrics name it (gen_ai.operation.name).
// The zero value, opNone, is a call that records no telemetry of its own
// (CountTokens, GetModel, WaitVideos' polls).
type operation uint8

const (
	opNone operation = iota
	opGenerate
	opEmbed
	opGenerateImages
	opEditImage
	opUpscaleImage
	opRecontextImage
	opSegmentImage
	opGenerateVideos
	numOperations
)

// operationNames are the operation names, by operation: generate_content
// and embeddings of the GenAI semantic conventions, which define none for
// images or videos; those are genai's method names in snake case.
var operationNames = [numOperations]string{
	opGenerate: "generate_content", opEmbed: "embeddings",
	opGenerateImages: "generate_images", opEditImage: "edit_image", opUpscaleImage: "upscale_image",
	opRecontextImage: "recontext_image", opSegmentImage: "segment_image", opGenerateVideos: "generate_videos",
}

// operationOf is the operation of a call through endpoint e, unless the
// call names another (the image and video methods).
func operationOf(e endpoint) operation {
	switch e {
	case endpointGenerate:
		return opGenerate
	case endpointEmbed:
		return opEmbed
	}
	return opNone
}

// Bucket boundaries the GenAI semantic conventions give.
var (
	durationBuckets = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92}
	tokenBuckets    = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864}
)

// globalPkg is the package of the global providers' types: before
// otel.SetXxxProvider they record nothing, after it they delegate.
const globalPkg = "go.opentelemetry.io/otel/internal/global"

// telemetry is a Client's instrumentation. Its fields are set once by
// newTelemetry; it is safe for concurrent use. A nil *telemetry records
// nothing.
type telemetry struct {
	tracer trace.Tracer         // nil: tracing is off for good
	tp     trace.TracerProvider // the unset global provider the tracer came from; nil: none
	meter  bool                 // false: metrics are off for good
	mp     metric.MeterProvider // the unset global provider the instruments came from; nil: none
	ins    instruments
	reg    metric.Registration // the breaker gauge's callback; nil: none

	provider, server string
	backends         map[string]*modelBackend // WithModelBackend's: their entries' provider and server differ
	models           sync.Map                 // model name → *modelTel
}

// instruments are the Client's metric instruments.
type instruments struct {
	duration, tokens                    metric.Float64Histogram
	attempts, retries, skips, coolDowns metric.Int64Counter
	fallbacks, limiterWaits, cost       metric.Int64Counter
	limiterWaited                       metric.Float64Counter
	breakerState                        metric.Int64ObservableGauge
	bulkheadInFlight, bulkheadQueued    metric.Int64ObservableGauge
	bulkheadAdmitted, bulkheadRejected  metric.Int64ObservableCounter
	cacheLookups, cacheHits             metric.Int64ObservableCounter
	fleetRoundTrips, fleetFailures      metric.Int64ObservableCounter
	fleetUncoordinated                  metric.Int64ObservableCounter
	fleetReplicas, fleetConnected       metric.Int64ObservableGauge
	tokenInput, tokenOutput             attribute.KeyValue
}

// modelTel is what a model's spans and metrics start from, built once.
type modelTel struct {
	spanName [numOperations]string
	attrs    [numOperations][]attribute.KeyValue // operation, provider, request model, server
}

// newTelemetry sets up c's instrumentation from its options, the global
// providers by default. It returns nil when both providers are no-ops. An
// instrument the meter fails to create is a no-op one (the OTel API returns
// one with the error), so telemetry never fails New.
func newTelemetry(c *Client) *telemetry {
	t := &telemetry{provider: "gcp.gemini", server: "generativelanguage.googleapis.com", backends: c.cfg.backends}
	base := c.cfg.baseURL
	if gc := c.cfg.genaiClient; gc != nil {
		cc := gc.ClientConfig()
		base = cc.HTTPOptions.BaseURL
		if cc.Backend == genai.BackendVertexAI {
			t.provider, t.server = "gcp.vertex_ai", "aiplatform.googleapis.com"
		}
	}
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		t.server = u.Hostname()
	}
	tp := c.cfg.tracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	switch tp.(type) {
	case tracenoop.TracerProvider, *tracenoop.TracerProvider:
	default:
		if isGlobal(tp) {
			t.tp = tp
		}
		t.tracer = tp.Tracer(instrumentationName)
	}
	mp := c.cfg.meterProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	switch mp.(type) {
	case metricnoop.MeterProvider, *metricnoop.MeterProvider:
	default:
		if isGlobal(mp) {
			t.mp = mp
		}
		t.meter = true
		t.ins.init(mp.Meter(instrumentationName))
		t.reg, _ = mp.Meter(instrumentationName).RegisterCallback(c.observeState, t.ins.breakerState,
			t.ins.bulkheadInFlight, t.ins.bulkheadQueued, t.ins.bulkheadAdmitted, t.ins.bulkheadRejected,
			t.ins.fleetRoundTrips, t.ins.fleetFailures, t.ins.fleetUncoordinated, t.ins.fleetReplicas, t.ins.fleetConnected, t.ins.cacheLookups, t.ins.cacheHits)
	}
	if t.tracer == nil && !t.meter {
		return nil
	}
	return t
}

// isGlobal reports whether p is one of the global providers otel returns
// before a provider is set.
func isGlobal(p any) bool {
	typ := reflect.TypeOf(p)
	return typ.Kind() == reflect.Pointer && typ.Elem().PkgPath() == globalPkg
}

func (ins *instruments) init(m metric.Meter) {
	ins.duration, _ = m.Float64Histogram("gen_ai.client.operation.duration", metric.WithUnit("s"),
		metric.WithDescription("GenAI operation duration."), metric.WithExplicitBucketBoundaries(durationBuckets...))
	ins.tokens, _ = m.Float64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"),
		metric.WithDescription("Number of input and output tokens used."), metric.WithExplicitBucketBoundaries(tokenBuckets...))
	ins.attempts, _ = m.Int64Counter("geminiguard.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Upstream requests sent, by model and class (none when answered)."))
	ins.retries, _ = m.Int64Counter("geminiguard.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Retries announced (OnRetry), by model and the class that caused them."))
	ins.skips, _ = m.Int64Counter("geminiguard.skips", metric.WithUnit("{skip}"),
		metric.WithDescription("Models skipped without a request (open, cooling down, out of tokens), by model and class."))
	ins.coolDowns, _ = m.Int64Counter("geminiguard.cooldowns", metric.WithUnit("{cooldown}"),
		metric.WithDescription("Cool-downs started or extended, by model (\"\" for the project) and reason."))
	ins.fallbacks, _ = m.Int64Counter("geminiguard.fallbacks", metric.WithUnit("{call}"),
		metric.WithDescription("Calls the Fallback answered, by first-choice model."))
	ins.limiterWaits, _ = m.Int64Counter("geminiguard.limiter.waits", metric.WithUnit("{wait}"),
		metric.WithDescription("Requests that waited for the limiter, by model."))
	ins.limiterWaited, _ = m.Float64Counter("geminiguard.limiter.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("Time requests waited for the limiter, by model."))
	ins.cost, _ = m.Int64Counter("geminiguard.cost", metric.WithUnit("{microdollar}"),
		metric.WithDescription("Cost of the responses, in micro-dollars, by operation and answering model (the first choice when none answered)."))
	ins.bulkheadInFlight, _ = m.Int64ObservableGauge("geminiguard.bulkhead.in_flight", metric.WithUnit("{call}"),
		metric.WithDescription("Calls holding a slot of the bulkhead now, by bulkhead."))
	ins.bulkheadQueued, _ = m.Int64ObservableGauge("geminiguard.bulkhead.queued", metric.WithUnit("{call}"),
		metric.WithDescription("Calls waiting for a slot of the bulkhead now, by bulkhead."))
	ins.cacheLookups, _ = m.Int64ObservableCounter("geminiguard.cache.lookups", metric.WithUnit("{lookup}"),
		metric.WithDescription("Answer cache lookups of calls whose every model failed, by result: exact, template, semantic or miss (Stats.Cache)."))
	ins.cacheHits, _ = m.Int64ObservableCounter("geminiguard.cache.hits", metric.WithUnit("{call}"),
		metric.WithDescription("Calls whose every model failed and that were answered all the same, by what answered: the answer cache's exact, template or semantic entry, or default, the Fallback (Stats.Cache, Stats.Fallbacks)."))
	ins.bulkheadAdmitted, _ = m.Int64ObservableCounter("geminiguard.bulkhead.admitted", metric.WithUnit("{call}"),
		metric.WithDescription("Calls given a slot of the bulkhead, by bulkhead."))
	ins.bulkheadRejected, _ = m.Int64ObservableCounter("geminiguard.bulkhead.rejected", metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused with ErrBulkheadFull, by bulkhead."))
	ins.fleetRoundTrips, _ = m.Int64ObservableCounter("geminiguard.fleet.round_trips", metric.WithUnit("{call}"),
		metric.WithDescription("Calls to the shared state (WithSharedState)."))
	ins.fleetFailures, _ = m.Int64ObservableCounter("geminiguard.fleet.failures", metric.WithUnit("{call}"),
		metric.WithDescription("Calls to the shared state that failed or timed out."))
	ins.fleetUncoordinated, _ = m.Int64ObservableCounter("geminiguard.fleet.uncoordinated", metric.WithUnit("{request}"),
		metric.WithDescription("Requests let through on the replica's share of the limits while the shared state was unreachable."))
	ins.fleetReplicas, _ = m.Int64ObservableGauge("geminiguard.fleet.replicas", metric.WithUnit("{replica}"),
		metric.WithDescription("Replicas of the project live at the last lease, this one included."))
	ins.fleetConnected, _ = m.Int64ObservableGauge("geminiguard.fleet.connected",
		metric.WithDescription("1 while the shared state answers, 0 while the replica carries on alone."))
	ins.breakerState, _ = m.Int64ObservableGauge("geminiguard.breaker.state", metric.WithUnit("{state}"),
		metric.WithDescription("Breaker state by model and endpoint: 0 closed, 1 open, 2 half-open."))
	ins.tokenInput = attribute.String("gen_ai.token.type", "input")
	ins.tokenOutput = attribute.String("gen_ai.token.type", "output")
}

// tracing reports whether spans are recorded now.
func (t *telemetry) tracing() bool {
	return t != nil && t.tracer != nil && (t.tp == nil || otel.GetTracerProvider() != t.tp)
}

// metering reports whether metrics are recorded now.
func (t *telemetry) metering() bool {
	return t != nil && t.meter && (t.mp == nil || otel.GetMeterProvider() != t.mp)
}

// model returns name's span names and base attributes, built on first use.
func (t *telemetry) model(name string) *modelTel {
	if mt, ok := t.models.Load(name); ok {
		return mt.(*modelTel)
	}
	mt := new(modelTel)
	provider, server := t.provider, t.server
	if b := t.backends[name]; b != nil {
		provider, server = b.telemetry()
	}
	for o, op := range operationNames {
		if operation(o) == opNone {
			continue
		}
		mt.spanName[o] = op + " " + name
		mt.attrs[o] = []attribute.KeyValue{
			attribute.String("gen_ai.operation.name", op),
			attribute.String("gen_ai.provider.name", provider),
			attribute.String("gen_ai.request.model", name),
			attribute.String("server.address", server),
		}
	}
	got, _ := t.models.LoadOrStore(name, mt)
	return got.(*modelTel)
}

// callEnd is what the end of a call tells its span and metrics.
type callEnd struct {
	op       operation
	first    string // the first-choice model
	response string // the model that answered (its version when the response says); "" when none
	attempts []Attempt
	err      error
	latency  time.Duration
	spent    spend
}

// start opens the span of a call of operation op to first; nil when
// tracing is off.
func (t *telemetry) start(ctx context.Context, op operation, first string) (context.Context, trace.Span) {
	if !t.tracing() {
		return ctx, nil
	}
	mt := t.model(first)
	return t.tracer.Start(ctx, mt.spanName[op], trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(mt.attrs[op]...))
}

// end closes a call's span (nil: none) and records its metrics.
func (t *telemetry) end(ctx context.Context, span trace.Span, ce callEnd) {
	attrs := t.model(ce.first).attrs[ce.op]
	attrs = attrs[:len(attrs):len(attrs)]
	if ce.response != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", ce.response))
	}
	if ce.err != nil {
		attrs = append(attrs, attribute.String("error.type", errorType(ce.err)))
	}
	if span != nil {
		span.SetAttributes(attrs[len(t.model(ce.first).attrs[ce.op]):]...) // what the start did not know
		span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", ce.spent.tokens.Input),
			attribute.Int64("gen_ai.usage.output_tokens", ce.spent.tokens.Output+ce.spent.tokens.Thinking))
		if ce.err != nil {
			span.SetStatus(codes.Error, errorType(ce.err))
		}
		span.End()
	}
	if !t.metering() {
		return
	}
	set := metric.WithAttributes(attrs...)
	t.ins.duration.Record(ctx, ce.latency.Seconds(), set)
	if ce.op == opGenerate && ce.spent.tokens != (Tokens{}) {
		t.ins.tokens.Record(ctx, float64(ce.spent.tokens.Input), metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], t.ins.tokenInput)...))
		t.ins.tokens.Record(ctx, float64(ce.spent.tokens.Output+ce.spent.tokens.Thinking), metric.WithAttributes(append(attrs[:len(attrs):len(attrs)], t.ins.tokenOutput)...))
	}
	if ce.spent.cost > 0 {
		model := ce.first
		if ce.response != "" && ce.response != FallbackModelVersion {
			model = ce.response
		}
		t.ins.cost.Add(ctx, int64(ce.spent.cost), metric.WithAttributes(
			attribute.String("gen_ai.operation.name", operationNames[ce.op]), attribute.String("gen_ai.request.model", model)))
	}
	for _, a := range ce.attempts {
		if a.Skipped {
			t.ins.skips.Add(ctx, 1, metric.WithAttributes(attribute.String("gen_ai.request.model", a.Model),
				attribute.String("geminiguard.class", Classify(a.Err).Class.String())))
		}
	}
}

// errorType is the error.type of a failed call: the class of the failure
// that decided it (its String).
func errorType(err error) string {
	if c := Classify(err).Class; c != ClassNone {
		return c.String()
	}
	return "_OTHER"
}

// observed runs the call (run) inside its span and records its metrics;
// a call of opNone records none.
func (call *call[R]) observed(ctx context.Context) (R, error) {
	t := call.c.tel
	if call.op == opNone || !t.tracing() && !t.metering() {
		return call.run(ctx)
	}
	ctx, span := t.start(ctx, call.op, call.firstModel())
	ended := false
	defer endUnended(span, &ended)
	resp, err := call.run(ctx)
	ce := callEnd{op: call.op, first: call.firstModel(), attempts: call.attempts, err: err,
		latency: call.now.Sub(call.start), spent: call.spent}
	if err == nil {
		ce.response = responseModel(resp, ce.attempts)
	}
	t.end(ctx, span, ce)
	ended = true
	return resp, err
}

// endUnended ends span (nil: none) as an error unless *ended: a panic (the
// SDK's, a hook's, the Fallback's, a stream consumer's) left it open. The
// panic goes on untouched. Deferred where a call's span starts.
func endUnended(span trace.Span, ended *bool) {
	if span != nil && !*ended {
		span.SetStatus(codes.Error, "panic")
		span.End()
	}
}

// responseModel names the model of an answer: the response's ModelVersion
// when it has one, else the model of the attempt that answered; "" when
// none did.
func responseModel(resp any, attempts []Attempt) string {
	if r, ok := resp.(*genai.GenerateContentResponse); ok && r != nil && r.ModelVersion != "" {
		return r.ModelVersion
	}
	if n := len(attempts); n > 0 && attempts[n-1].Err == nil && !attempts[n-1].Skipped {
		return attempts[n-1].Model
	}
	return ""
}

// startStream opens a stream's span and makes s.ctx carry it. It returns nil
// when tracing is off.
func (t *telemetry) startStream(s *streamRun) trace.Span {
	if !t.tracing() {
		return nil
	}
	first := s.model
	if first == "" {
		first = s.c.cascade[0]
	}
	var span trace.Span
	s.ctx, span = t.start(s.ctx, opGenerate, trimModels(first))
	return span
}

// endStream closes a stream's span (nil: none) and records its metrics.
func (t *telemetry) endStream(s *streamRun, span trace.Span, err error, latency time.Duration) {
	if span == nil && !t.metering() {
		return
	}
	first := s.model
	if first == "" {
		first = s.c.cascade[0]
	}
	ce := callEnd{op: opGenerate, first: trimModels(first), attempts: s.attempts, err: err, latency: latency, spent: s.spent}
	if err == nil && !s.fallback {
		ce.response = responseModel(nil, s.attempts)
	} else if err == nil {
		ce.response = FallbackModelVersion
	}
	t.end(s.ctx, span, ce)
}

// attempt counts one upstream request of m (the n-th of the call) and adds
// an event for it to the call's span: its class, the wait before it, its
// duration and the breaker's state after it.
func (t *telemetry) attempt(ctx context.Context, m *modelState, br *breaker, n int, delay, elapsed time.Duration, v Verdict, now time.Time) {
	if t.metering() {
		t.ins.attempts.Add(ctx, 1, metric.WithAttributes(attribute.String("gen_ai.request.model", m.name),
			attribute.String("geminiguard.class", v.Class.String())))
	}
	if !t.tracing() {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	state := StateClosed
	if br != nil {
		state = br.state(now)
	}
	span.AddEvent("geminiguard.attempt", trace.WithTimestamp(now), trace.WithAttributes(
		attribute.String("gen_ai.request.model", m.name),
		attribute.Int("geminiguard.attempt", n),
		attribute.String("geminiguard.class", v.Class.String()),
		attribute.Float64("geminiguard.delay", delay.Seconds()),
		attribute.Float64("geminiguard.elapsed", elapsed.Seconds()),
		attribute.String("geminiguard.breaker.state", state.String()),
	))
}

// count adds 1 to a counter of the chain, with the model and a class.
func (t *telemetry) count(ctx context.Context, ctr func(*instruments) metric.Int64Counter, model string, class Class) {
	if !t.metering() {
		return
	}
	ctr(&t.ins).Add(ctx, 1, metric.WithAttributes(attribute.String("gen_ai.request.model", model), attribute.String("geminiguard.class", class.String())))
}

// limiterWaited records a wait of d for m's limiter.
func (t *telemetry) limiterWaited(ctx context.Context, m *modelState, d time.Duration) {
	if !t.metering() {
		return
	}
	kv := metric.WithAttributes(attribute.String("gen_ai.request.model", m.name))
	t.ins.limiterWaits.Add(ctx, 1, kv)
	t.ins.limiterWaited.Add(ctx, d.Seconds(), kv)
}

// observeState reports every kept model's breaker states (generate, embed,
// count; not the Batch API lane's) and every bulkhead's figures to their
// observable instruments.
func (c *Client) observeState(_ context.Context, o metric.Observer) error {
	if c.tel == nil {
		return nil
	}
	ins := &c.tel.ins
	for _, b := range c.bulkheadStats() {
		kv := metric.WithAttributes(attribute.String("geminiguard.bulkhead", b.Name))
		o.ObserveInt64(ins.bulkheadInFlight, int64(b.InFlight), kv)
		o.ObserveInt64(ins.bulkheadQueued, int64(b.Queued), kv)
		o.ObserveInt64(ins.bulkheadAdmitted, b.Admitted, kv)
		o.ObserveInt64(ins.bulkheadRejected, b.Rejected, kv)
	}
	if c.cfg.answers != nil {
		for result, n := range map[string]int64{"exact": c.stats.cacheExact.Load(), "template": c.stats.cacheTemplate.Load(), "semantic": c.stats.cacheSemantic.Load(), "miss": c.stats.cacheMisses.Load()} {
			o.ObserveInt64(ins.cacheLookups, n, metric.WithAttributes(attribute.String("geminiguard.cache.result", result)))
			if result != "miss" {
				o.ObserveInt64(ins.cacheHits, n, metric.WithAttributes(attribute.String("geminiguard.cache.kind", result)))
			}
		}
	}
	if c.cfg.fallback != nil {
		o.ObserveInt64(ins.cacheHits, c.stats.defaults.Load(), metric.WithAttributes(attribute.String("geminiguard.cache.kind", "default")))
	}
	if c.fleet != nil {
		st := c.fleet.stats()
		o.ObserveInt64(ins.fleetRoundTrips, st.RoundTrips)
		o.ObserveInt64(ins.fleetFailures, st.Failures)
		o.ObserveInt64(ins.fleetUncoordinated, st.Uncoordinated)
		o.ObserveInt64(ins.fleetReplicas, int64(st.Replicas))
		connected := int64(0)
		if st.Connected {
			connected = 1
		}
		o.ObserveInt64(ins.fleetConnected, connected)
	}
	now := time.Now()
	observe := func(m *modelState) {
		for e := range m.breakers {
			if endpoint(e) == endpointBatch {
				continue // the Batch API lane's breaker is not one of the model's endpoints the gauge reports
			}
			o.ObserveInt64(c.tel.ins.breakerState, int64(m.breakers[e].state(now)), metric.WithAttributes(
				attribute.String("gen_ai.request.model", m.name), attribute.String("geminiguard.endpoint", endpoint(e).String())))
		}
	}
	for _, m := range c.states {
		observe(m)
	}
	for _, name := range c.otherModels() {
		if m, ok := c.others.Peek(name); ok {
			observe(m)
		}
	}
	return nil
}

// trimModels returns a model name without its "models/" prefix.
func trimModels(name string) string { return strings.TrimPrefix(name, "models/") }

// stop unregisters the breaker gauge's callback.
func (t *telemetry) stop() {
	if t != nil && t.reg != nil {
		_ = t.reg.Unregister()
	}
}
