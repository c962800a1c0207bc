package geminiguard_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// secretPrompt is what the OTel tests ask: it must appear in no attribute.
const secretPrompt = "Tell me the secret recipe"

// telemetry is an in-memory OpenTelemetry SDK for one Client.
type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	opts   []geminiguard.Option
}

func newTelemetry() *telemetry {
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.opts = []geminiguard.Option{
		geminiguard.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))),
		geminiguard.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))),
	}
	return tel
}

// metrics collects the metrics, by name.
func (tel *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(t.Context(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs renders an attribute set as "key=value" strings, sorted.
func attrs(set attribute.Set) []string {
	var out []string
	for _, kv := range set.ToSlice() {
		out = append(out, string(kv.Key)+"="+kv.Value.String())
	}
	return out
}

// requireNoSecrets fails when the prompt, an answer or the key appears in
// any attribute of the metrics or spans.
func requireNoSecrets(t *testing.T, tel *telemetry, ms map[string]metricdata.Metrics, answers ...string) {
	t.Helper()
	var all []string
	for _, m := range ms {
		switch d := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				all = append(all, attrs(p.Attributes)...)
			}
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				all = append(all, attrs(p.Attributes)...)
			}
		case metricdata.Gauge[int64]:
			for _, p := range d.DataPoints {
				all = append(all, attrs(p.Attributes)...)
			}
		}
	}
	for _, s := range tel.spans.Ended() {
		all = append(all, attrs(attribute.NewSet(s.Attributes()...))...)
		for _, e := range s.Events() {
			all = append(all, attrs(attribute.NewSet(e.Attributes...))...)
		}
	}
	require.NotEmpty(t, all)
	for _, a := range all {
		requireNoKey(t, a)
		assert.NotContains(t, a, secretPrompt)
		for _, ans := range answers {
			if ans != "" {
				assert.NotContains(t, a, strings.TrimSpace(ans)[:10])
			}
		}
	}
}

// histogram returns the data points of a float histogram by their
// attributes, and checks its unit.
func histogram(t *testing.T, ms map[string]metricdata.Metrics, name, unit string) []metricdata.HistogramDataPoint[float64] {
	t.Helper()
	m, ok := ms[name]
	require.True(t, ok, "metric %s recorded", name)
	assert.Equal(t, unit, m.Unit, name)
	return m.Data.(metricdata.Histogram[float64]).DataPoints
}

// counts returns an int counter's values keyed by the given attributes'
// values joined with "/", and checks its unit.
func counts(t *testing.T, ms map[string]metricdata.Metrics, name, unit string, keys ...attribute.Key) map[string]int64 {
	t.Helper()
	m, ok := ms[name]
	require.True(t, ok, "metric %s recorded", name)
	assert.Equal(t, unit, m.Unit, name)
	out := map[string]int64{}
	for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
		var k []string
		for _, key := range keys {
			v, _ := p.Attributes.Value(key)
			k = append(k, v.String())
		}
		out[strings.Join(k, "/")] += p.Value
	}
	return out
}

func TestOTelCascadePrimary503SecondaryAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: flash, Latency: 800 * time.Millisecond},
		)
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(pro, flash))...)

		var rec geminiguard.CallRecord
		resp, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text(secretPrompt), nil)
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)

		ms := tel.metrics(t)
		dur := histogram(t, ms, "gen_ai.client.operation.duration", "s")
		require.Len(t, dur, 1)
		assert.Equal(t, uint64(1), dur[0].Count)
		assert.InDelta(t, rec.Latency.Seconds(), dur[0].Sum, 1e-9)
		assert.Equal(t, 0.01, dur[0].Bounds[0], "the semantic conventions' buckets")
		assert.Equal(t, 81.92, dur[0].Bounds[len(dur[0].Bounds)-1])
		assert.ElementsMatch(t, []string{
			"gen_ai.operation.name=generate_content", "gen_ai.provider.name=gcp.gemini",
			"gen_ai.request.model=" + pro, "gen_ai.response.model=" + resp.ModelVersion,
			"server.address=geminitest.invalid",
		}, attrs(dur[0].Attributes))

		tokens := map[string]float64{}
		for _, p := range histogram(t, ms, "gen_ai.client.token.usage", "{token}") {
			v, _ := p.Attributes.Value("gen_ai.token.type")
			tokens[v.String()] += p.Sum
		}
		require.Positive(t, rec.Tokens.Input)
		assert.Equal(t, map[string]float64{"input": float64(rec.Tokens.Input), "output": float64(rec.Tokens.Output + rec.Tokens.Thinking)}, tokens)

		assert.Equal(t, map[string]int64{pro + "/" + geminiguard.ClassOverloaded.String(): 1, flash + "/none": 1},
			counts(t, ms, "geminiguard.attempts", "{attempt}", "gen_ai.request.model", "geminiguard.class"))
		if rec.CostKnown && rec.Cost > 0 {
			assert.Equal(t, map[string]int64{resp.ModelVersion: int64(rec.Cost)},
				counts(t, ms, "geminiguard.cost", "{microdollar}", "gen_ai.request.model"))
		}
		states := ms["geminiguard.breaker.state"].Data.(metricdata.Gauge[int64]).DataPoints
		assert.Len(t, states, 6, "two models, three endpoints (generate, embed, count)")

		spans := tel.spans.Ended()
		require.Len(t, spans, 1, "one span per call, retries and cascade included")
		s := spans[0]
		assert.Equal(t, "generate_content "+pro, s.Name())
		assert.Equal(t, trace.SpanKindClient, s.SpanKind())
		assert.Equal(t, codes.Unset, s.Status().Code)
		var events []string
		for _, e := range s.Events() {
			set := attribute.NewSet(e.Attributes...)
			m, _ := set.Value("gen_ai.request.model")
			cl, _ := set.Value("geminiguard.class")
			events = append(events, e.Name+":"+m.String()+":"+cl.String())
		}
		assert.Equal(t, []string{"geminiguard.attempt:" + pro + ":" + geminiguard.ClassOverloaded.String(), "geminiguard.attempt:" + flash + ":none"}, events)
		requireNoSecrets(t, tel, ms, resp.Text())
		require.NoError(t, c.Close())
	})
}

func TestOTelStream(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, ChunkInterval: 100 * time.Millisecond})
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash))...)

		var rec geminiguard.CallRecord
		var text strings.Builder
		for resp, err := range c.GenerateContentStream(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text(secretPrompt), nil) {
			require.NoError(t, err)
			text.WriteString(resp.Text())
		}
		assert.Equal(t, srv.FullText(flash), text.String())

		ms := tel.metrics(t)
		dur := histogram(t, ms, "gen_ai.client.operation.duration", "s")
		require.Len(t, dur, 1)
		assert.Equal(t, uint64(1), dur[0].Count)
		assert.InDelta(t, rec.Latency.Seconds(), dur[0].Sum, 1e-9)
		assert.Contains(t, attrs(dur[0].Attributes), "gen_ai.response.model="+flash)
		tokens := map[string]float64{}
		for _, p := range histogram(t, ms, "gen_ai.client.token.usage", "{token}") {
			v, _ := p.Attributes.Value("gen_ai.token.type")
			tokens[v.String()] += p.Sum
		}
		require.Positive(t, rec.Tokens.Output)
		assert.Equal(t, map[string]float64{"input": float64(rec.Tokens.Input), "output": float64(rec.Tokens.Output + rec.Tokens.Thinking)}, tokens)
		assert.Equal(t, map[string]int64{flash + "/none": 1}, counts(t, ms, "geminiguard.attempts", "{attempt}", "gen_ai.request.model", "geminiguard.class"))

		spans := tel.spans.Ended()
		require.Len(t, spans, 1)
		assert.Equal(t, "generate_content "+flash, spans[0].Name())
		assert.Equal(t, trace.SpanKindClient, spans[0].SpanKind())
		assert.Len(t, spans[0].Events(), 1)
		requireNoSecrets(t, tel, ms, text.String())
		require.NoError(t, c.Close())
	})
}

func TestOTelFallbackAndFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}
		srv := geminitest.New(geminitest.Model{Name: pro, Faults: down})
		tel := newTelemetry()
		var hookSpans []trace.SpanContext
		var retries int
		hooks := geminiguard.Hooks{
			OnFallback: func(ctx context.Context, _ geminiguard.FallbackEvent) {
				hookSpans = append(hookSpans, trace.SpanContextFromContext(ctx))
			},
			OnRetry: func(ctx context.Context, _ geminiguard.RetryEvent) {
				retries++
				assert.True(t, trace.SpanContextFromContext(ctx).IsValid(), "OnRetry gets the call's span")
			},
		}
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(pro), geminiguard.WithHooks(hooks),
			geminiguard.WithFallback(geminiguard.TextFallback("Try again later")))...)

		resp, err := c.GenerateContent(t.Context(), "", genai.Text(secretPrompt), nil)
		require.NoError(t, err)
		assert.Equal(t, geminiguard.FallbackModelVersion, resp.ModelVersion)

		ms := tel.metrics(t)
		assert.Equal(t, map[string]int64{pro: 1}, counts(t, ms, "geminiguard.fallbacks", "{call}", "gen_ai.request.model"))
		attempts := counts(t, ms, "geminiguard.attempts", "{attempt}", "gen_ai.request.model", "geminiguard.class")
		assert.Equal(t, map[string]int64{pro + "/" + geminiguard.ClassOverloaded.String(): int64(srv.Total(pro))}, attempts)
		assert.Equal(t, map[string]int64{pro + "/" + geminiguard.ClassOverloaded.String(): int64(retries)},
			counts(t, ms, "geminiguard.retries", "{retry}", "gen_ai.request.model", "geminiguard.class"))
		dur := histogram(t, ms, "gen_ai.client.operation.duration", "s")
		require.Len(t, dur, 1)
		assert.Contains(t, attrs(dur[0].Attributes), "gen_ai.response.model="+geminiguard.FallbackModelVersion)

		spans := tel.spans.Ended()
		require.Len(t, spans, 1)
		assert.Equal(t, codes.Unset, spans[0].Status().Code, "the Fallback answered")
		assert.Len(t, spans[0].Events(), srv.Total(pro), "one event per upstream request")
		require.Len(t, hookSpans, 1)
		assert.Equal(t, spans[0].SpanContext().SpanID(), hookSpans[0].SpanID(), "OnFallback gets the call's span")

		// Without the Fallback the call fails: the span says so, with
		// error.type the class of the failure.
		tel2 := newTelemetry()
		c2 := newClient(t, srv, nil, append(tel2.opts, geminiguard.WithCascade(pro))...)
		_, err = c2.GenerateContent(t.Context(), "", genai.Text(secretPrompt), nil)
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		spans = tel2.spans.Ended()
		require.Len(t, spans, 1)
		assert.Equal(t, codes.Error, spans[0].Status().Code)
		errType := geminiguard.Classify(err).Class.String()
		assert.Contains(t, attrs(attribute.NewSet(spans[0].Attributes()...)), "error.type="+errType)
		ms2 := tel2.metrics(t)
		dur = histogram(t, ms2, "gen_ai.client.operation.duration", "s")
		require.Len(t, dur, 1)
		assert.Contains(t, attrs(dur[0].Attributes), "error.type="+errType)
		requireNoSecrets(t, tel, ms)
		requireNoSecrets(t, tel2, ms2)
		require.NoError(t, c.Close())
		require.NoError(t, c2.Close())
	})
}

func TestOTelEmbeddings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: "gemini-embedding-001"})
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash))...)
		_, err := c.EmbedContent(t.Context(), "gemini-embedding-001", genai.Text(secretPrompt), nil)
		require.NoError(t, err)
		spans := tel.spans.Ended()
		require.Len(t, spans, 1)
		assert.Equal(t, "embeddings gemini-embedding-001", spans[0].Name())
		dur := histogram(t, tel.metrics(t), "gen_ai.client.operation.duration", "s")
		require.Len(t, dur, 1)
		assert.Contains(t, attrs(dur[0].Attributes), "gen_ai.operation.name=embeddings")
	})
}

// A panic in the caller's loop body or in the transport still ends the
// call's span, as an error; the panic reaches the caller.
func TestOTelSpanEndsOnPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		tel := newTelemetry()
		tr := &panickingTransport{base: srv.Transport()}
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash), geminiguard.WithHTTPClient(&http.Client{Transport: tr}))...)

		p := recovered(func() {
			for range c.GenerateContentStream(t.Context(), "", genai.Text("Tell me a story"), nil) {
				panic("the caller's loop body")
			}
		})
		tr.armed.Store(true)
		q := recovered(func() { _, _, _ = ask(t.Context(), c, "") })

		assert.Equal(t, "the caller's loop body", p)
		assert.Equal(t, "the transport", q)
		spans := tel.spans.Ended()
		require.Len(t, spans, 2, "both calls' spans ended")
		for _, s := range spans {
			assert.Equal(t, codes.Error, s.Status().Code, "%s", s.Name())
		}
	})
}

func TestOTelBulkheadFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 10 * time.Second})
		tel := newTelemetry()
		c := newClient(t, srv, nil, append(tel.opts, geminiguard.WithCascade(flash),
			geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 1}))...)
		batch := geminiguard.InBulkhead(t.Context(), "batch")

		done := make(chan error)
		go func() { _, _, err := ask(batch, c, ""); done <- err }()
		synctest.Wait() // the first call holds the one slot
		_, _, refused := ask(batch, c, "")
		ms := tel.metrics(t)
		require.NoError(t, <-done)

		assert.ErrorIs(t, refused, geminiguard.ErrBulkheadFull)
		assert.Equal(t, map[string]int64{"batch": 1}, counts(t, ms, "geminiguard.bulkhead.admitted", "{call}", "geminiguard.bulkhead"))
		assert.Equal(t, map[string]int64{"batch": 1}, counts(t, ms, "geminiguard.bulkhead.rejected", "{call}", "geminiguard.bulkhead"))
		inFlight := ms["geminiguard.bulkhead.in_flight"].Data.(metricdata.Gauge[int64]).DataPoints
		require.Len(t, inFlight, 1)
		assert.Equal(t, int64(1), inFlight[0].Value, "the first call still holds its slot")
	})
}
