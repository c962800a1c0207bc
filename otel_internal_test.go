package geminiguard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// The global providers, before a provider is set, record nothing: a call
// must then do no telemetry work (the fast path), yet follow a provider set
// later. The noop providers turn telemetry off for good.
func TestTelemetryOffWhenProvidersAreNoOps(t *testing.T) {
	c := &Client{cfg: defaultConfig()}
	tel := newTelemetry(c)
	require.NotNil(t, tel, "the global providers are followed")
	assert.NotNil(t, tel.tp, "the unset global tracer provider is recognised")
	assert.NotNil(t, tel.mp, "the unset global meter provider is recognised")
	assert.False(t, tel.tracing())
	assert.False(t, tel.metering())
	tel.stop()

	c.cfg.tracerProvider, c.cfg.meterProvider = tracenoop.NewTracerProvider(), metricnoop.NewMeterProvider()
	assert.Nil(t, newTelemetry(c))
	var none *telemetry
	assert.False(t, none.tracing())
	assert.False(t, none.metering())
}

// BenchmarkTelemetryOff is what a one-attempt call adds with the default
// (unset global) providers: the checks of observed and of the attempt's
// report. Issue 12's budget: ≤ 20 ns and 0 allocations.
func BenchmarkTelemetryOff(b *testing.B) {
	c := &Client{cfg: defaultConfig()}
	c.tel = newTelemetry(c)
	defer c.tel.stop()
	m := c.newModelState("gemini-2.5-flash")
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		if c.tel.tracing() || c.tel.metering() {
			b.Fatal("telemetry on with the unset global providers")
		}
		c.tel.attempt(ctx, m, m.breakers[0], 1, 0, 0, Verdict{}, time.Time{})
	}
}
