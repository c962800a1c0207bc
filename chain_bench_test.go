package geminiguard

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/inert"
	"github.com/geminiguard/geminiguard/internal/paired"
)

// The chain's own cost, apart from the SDK. The Client's upstream is replaced
// by inert.API, which answers at once with a fixed response, so what is left
// is the chain alone: limiter, breaker, retry and cascade bookkeeping, the
// per-attempt deadline context, the call record and the statistics. Beside
// it, in the same run, the inert call itself. The failsafe-go stack of the
// scenarios' failsafe arm around the same inert call has the benchmarks of
// the same names in examples/internal/failsafestack (the examples module,
// so that failsafe-go is not a requirement of the library's); both in one
// command, from the repository root:
//
//	go test -run '^$' -bench ChainOwn -benchmem -count 6 . ./examples/internal/failsafestack | tee own.txt
//
// The figures end to end, through the real SDK on three wires, are
// examples/internal/scenario's BenchmarkPaired and friends: there the SDK's own
// reaction to what the chain sends per attempt (a deadline, a config with
// the automatic continuation off) counts too.

// chainModels is the cascade of the benchmarks (and of the step tables):
// internal/inert's, the overhead scenario's.
var chainModels = inert.Models

// inertClient returns a Client with the cascade chainModels, at its defaults
// plus opts, whose upstream is api. It is built over the fake's in-memory
// transport, which no call reaches.
func inertClient(tb testing.TB, api modelsAPI, opts ...Option) *Client {
	tb.Helper()
	srv := geminitest.New()
	base := []Option{
		WithAPIKey(geminitest.Key),
		WithBaseURL(geminitest.BaseURL),
		WithHTTPClient(srv.HTTPClient()),
		WithCascade(chainModels...),
		WithStartupCheck(false),
	}
	c, err := New(context.Background(), append(base, opts...)...)
	require.NoError(tb, err)
	c.api = api
	return c
}

// chainCalls returns one call each of the upstream alone, a geminiguard
// Client, the upstream under a context with a deadline as the chain's
// attempt makes it (its largest single cost, kept: see attempt), a
// geminiguard Client called with a deadline of the caller's that comes
// before the attempt timeout (as a request handler's 30s does before the
// default 60s; here 1h before 2h, to outlast the benchmark), which spares
// the attempt its own deadline context, and a geminiguard Client with
// hedging off; in the order of their names.
func chainCalls(tb testing.TB) (names []string, calls []func() error) {
	api := inert.New()
	c := inertClient(tb, api)
	bounded := inertClient(tb, api, WithTimeouts(2*time.Hour, 3*time.Hour))
	unhedged := inertClient(tb, api, WithHedging(HedgePolicy{}))
	ctx, contents := context.Background(), genai.Text("Say hi")
	callerCtx, cancel := context.WithTimeout(ctx, time.Hour)
	tb.Cleanup(cancel)
	check := func(resp *genai.GenerateContentResponse, err error) error {
		if err == nil && resp != api.Resp {
			return errors.New("not the upstream's answer")
		}
		return err
	}
	return []string{"upstream", "geminiguard", "deadline", "caller-deadline", "unhedged"}, []func() error{
		func() error { return check(api.GenerateContent(ctx, chainModels[0], contents, nil)) },
		func() error { return check(c.GenerateContent(ctx, "", contents, nil)) },
		func() error {
			actx, cancel := context.WithDeadline(ctx, time.Now().Add(defaultAttemptTimeout))
			defer cancel()
			return check(api.GenerateContent(actx, chainModels[0], contents, nil))
		},
		func() error { return check(bounded.GenerateContent(callerCtx, "", contents, nil)) },
		func() error { return check(unhedged.GenerateContent(ctx, "", contents, nil)) },
	}
}

// BenchmarkChainOwn is one call on an upstream that answers at once:
// upstream is the inert call alone, geminiguard the same call through the
// chain, deadline the inert call under an attempt's deadline context and
// nothing else of the chain, caller-deadline geminiguard under a caller's
// deadline that bounds the attempt, unhedged geminiguard with hedging off
// (WithHedging(HedgePolicy{})); paired makes the five in turn (so the
// machine's drift falls on all alike) and reports each one's time per
// call and the chain's own cost over the inert call (own-ns), the same
// without the deadline context (rest-ns), under the caller's deadline
// (caller-deadline-own-ns), and what hedging on (the default) costs an
// attempt answered before its hedge delay (hedging-ns). The failsafe-go stack's own-ns, measured the
// same way, is examples/internal/failsafestack's BenchmarkChainOwn.
func BenchmarkChainOwn(b *testing.B) {
	names, calls := chainCalls(b)
	paired.Bench(b, names, calls, func(b *testing.B, per []float64) {
		b.ReportMetric(per[1]-per[0], "own-ns")
		b.ReportMetric(per[1]-per[2], "rest-ns")
		b.ReportMetric(per[3]-per[0], "caller-deadline-own-ns")
		b.ReportMetric(per[1]-per[4], "hedging-ns")
	})
}

// BenchmarkChainOwnRefused is a call refused by open breakers on every
// model, the upstream never reached. The failsafe-go stack's is
// examples/internal/failsafestack's BenchmarkChainOwnRefused.
func BenchmarkChainOwnRefused(b *testing.B) {
	api := inert.New()
	api.Fail = inert.Overloaded
	c := inertClient(b, api, WithRetry(RetryPolicy{MaxAttempts: 1}), WithBreaker(BreakerSettings{OpenFor: time.Hour}))
	ctx, contents := context.Background(), genai.Text("Say hi")
	for range 2 * defaultFailureThreshold { // every model's threshold
		_, _ = c.GenerateContent(ctx, "", contents, nil)
	}
	before := api.Calls
	_, err := c.GenerateContent(ctx, "", contents, nil)
	require.Error(b, err)
	require.Equal(b, before, api.Calls, "every breaker is open: no request leaves")
	b.Run("geminiguard", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.GenerateContent(ctx, "", contents, nil); err == nil {
				b.Fatal("answered with every breaker open")
			}
		}
	})
}
