package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

const (
	primary   = "gemini-2.5-flash"
	secondary = "gemini-2.5-flash-lite"
)

// script is the outage, in real time from the start of a play: the primary
// answers 503 from healthy to healthy+outage, and the secondary too for
// both in the middle of it. A call starts every every.
type script struct {
	healthy, outage, both, recovery time.Duration
	every                           time.Duration
}

var defaultScript = script{healthy: 1500 * time.Millisecond, outage: 4 * time.Second, both: time.Second,
	recovery: 2500 * time.Millisecond, every: 200 * time.Millisecond}

func (s script) String() string {
	return fmt.Sprintf("the outage: %v healthy, then %s answers 503 for %v (%s too for %v in the middle), then %v healthy; a call every %v",
		s.healthy, primary, s.outage, secondary, s.both, s.recovery, s.every)
}

// down reports whether model answers 503 at elapsed into the play.
func (s script) down(model string, elapsed time.Duration) bool {
	if model == primary {
		return elapsed >= s.healthy && elapsed < s.healthy+s.outage
	}
	from := s.healthy + (s.outage-s.both)/2
	return elapsed >= from && elapsed < from+s.both
}

// demo is the program's core: a geminiguard Client on the fake, with the
// OTel SDK's meter provider (read by the Prometheus exporter) and tracer
// provider (the stdout exporter), and the /metrics handler.
type demo struct {
	client  *geminiguard.Client
	script  script
	start   atomic.Int64 // the current play's start, Unix nanoseconds
	metrics http.Handler
	mp      *sdkmetric.MeterProvider
	tp      *sdktrace.TracerProvider
	cache   answers
}

// newDemo builds the demo; its spans print to out, as lines or (jsonSpans)
// as the exporter's JSON. Close it when done.
func newDemo(ctx context.Context, out io.Writer, s script, jsonSpans bool) (*demo, error) {
	d := &demo{script: s}
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, err
	}
	d.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	d.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})

	spanOpts := []stdouttrace.Option{stdouttrace.WithWriter(&spanLines{out: out})}
	if jsonSpans {
		spanOpts = []stdouttrace.Option{stdouttrace.WithWriter(out), stdouttrace.WithPrettyPrint()}
	}
	spans, err := stdouttrace.New(spanOpts...)
	if err != nil {
		return nil, err
	}
	d.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)) // each span prints as its call ends

	fake := geminitest.New(
		geminitest.Model{Name: primary, Latency: 30 * time.Millisecond, Decide: d.decide(primary)},
		geminitest.Model{Name: secondary, Latency: 20 * time.Millisecond, Decide: d.decide(secondary)},
	)
	d.client, err = geminiguard.New(ctx,
		geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL), geminiguard.WithHTTPClient(fake.HTTPClient()),
		geminiguard.WithCascade(primary, secondary),
		geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 2, BaseDelay: 100 * time.Millisecond}),
		geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 3, DeadAfter: s.outage / 4, OpenFor: s.outage / 4}),
		geminiguard.WithFallback(d.cache.fallback),
		geminiguard.WithSharedState(fleet.NewMemoryState()), // a fleet of one: the dashboard's fleet panel has series
		geminiguard.WithMeterProvider(d.mp),
		geminiguard.WithTracerProvider(d.tp),
	)
	if err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

// decide is model's script on the fake: 503 while the script says it is
// down, the blocked prompts blocked, else an answer.
func (d *demo) decide(model string) func(geminitest.Request, int) geminitest.Step {
	return func(req geminitest.Request, _ int) geminitest.Step {
		if strings.Contains(promptOf(req.Contents), "unsafe") {
			return geminitest.Step{Fault: geminitest.PromptBlocked}
		}
		if d.script.down(model, time.Since(time.Unix(0, d.start.Load()))) {
			return geminitest.Step{Fault: geminitest.Overloaded}
		}
		return geminitest.Step{}
	}
}

// play sends a call every script.every through the outage, one at a time.
func (d *demo) play(ctx context.Context, out io.Writer) error {
	s := d.script
	start := time.Now()
	d.start.Store(start.UnixNano())
	tick := time.NewTicker(s.every)
	defer tick.Stop()
	for i := 0; time.Since(start) < s.healthy+s.outage+s.recovery; i++ {
		below := 10 * (1 + i%4) // asked before: the cache can answer it
		if i%5 == 2 {
			below = 100 + i // never asked before: when both models are down, the call fails
		}
		prompt := fmt.Sprintf("Name a prime number below %d.", below)
		if i%10 == 9 {
			prompt = "Something unsafe."
		}
		resp, err := d.client.GenerateContent(ctx, "", genai.Text(prompt), nil)
		if err == nil {
			d.cache.keep(prompt, resp)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// close closes the Client, then the providers.
func (d *demo) close() {
	if d.client != nil {
		d.client.Close()
	}
	ctx := context.Background()
	_ = d.tp.Shutdown(ctx)
	_ = d.mp.Shutdown(ctx)
}

// answers is a cache of the last answer to each prompt; its fallback is the
// Client's Fallback: an earlier answer when every model failed, else
// nothing (the call fails).
type answers struct {
	mu   sync.Mutex
	text map[string]string
}

// keep remembers resp's text as the answer to prompt. It is safe for
// concurrent use, as is fallback.
func (a *answers) keep(prompt string, resp *genai.GenerateContentResponse) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.text == nil {
		a.text = make(map[string]string)
	}
	a.text[prompt] = resp.Text()
}

func (a *answers) fallback(ctx context.Context, req geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
	a.mu.Lock()
	text, ok := a.text[promptOf(req.Contents)]
	a.mu.Unlock()
	if !ok {
		return nil, req.Err
	}
	return geminiguard.TextFallback(text)(ctx, req)
}

// promptOf returns the text of a request's first part.
func promptOf(contents []*genai.Content) string {
	if len(contents) == 0 || len(contents[0].Parts) == 0 {
		return ""
	}
	return contents[0].Parts[0].Text
}
