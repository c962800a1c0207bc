package geminiguard

import (
	"context"
	"errors"
	"iter"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/paired"
)

// The chain's own cost, apart from the SDK. The Client's upstream is replaced
// by inertAPI, which answers at once with a fixed response, so what is left
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

// chainModels is the cascade of the benchmarks: examples/internal/scenario's
// overhead scenario (examples/internal/failsafestack's benchmarks use the
// same).
var chainModels = []string{"gemini-3.5-flash", "gemini-2.5-flash-lite"}

// inertAPI is an upstream that answers every GenerateContent at once with
// resp, or with fail when set, and counts the calls. It is not safe for
// concurrent use.
type inertAPI struct {
	resp  *genai.GenerateContentResponse
	fail  error
	calls int
}

func (a *inertAPI) GenerateContent(context.Context, string, []*genai.Content, *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	a.calls++
	if a.fail != nil {
		return nil, a.fail
	}
	return a.resp, nil
}

func (a *inertAPI) GenerateContentStream(context.Context, string, []*genai.Content, *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error] {
	panic("inertAPI: not used by the benchmarks")
}

func (a *inertAPI) List(context.Context, *genai.ListModelsConfig) (genai.Page[genai.Model], error) {
	panic("inertAPI: not used by the benchmarks")
}

func (a *inertAPI) CountTokens(context.Context, string, []*genai.Content, *genai.CountTokensConfig) (*genai.CountTokensResponse, error) {
	panic("inertAPI: not used by the benchmarks")
}

func (a *inertAPI) EmbedContent(context.Context, string, []*genai.Content, *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error) {
	panic("inertAPI: not used by the benchmarks")
}

// newInertAPI returns an upstream answering a valid, complete response, as
// the fake's default text does.
func newInertAPI() *inertAPI {
	return &inertAPI{resp: &genai.GenerateContentResponse{
		Candidates: []*genai.Candidate{{
			Content:      genai.NewContentFromText("Hello from the inert upstream.", genai.RoleModel),
			FinishReason: genai.FinishReasonStop,
		}},
		UsageMetadata: &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 4, CandidatesTokenCount: 6, TotalTokenCount: 10},
		ModelVersion:  chainModels[0],
	}}
}

// overloaded is the error the inert upstream fails with to open breakers: a
// 503 UNAVAILABLE as the SDK reports it.
var overloaded = genai.APIError{Code: 503, Status: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."}

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
// attempt makes it (its largest single cost, kept: see attempt), and a
// geminiguard Client called with a deadline of the caller's that comes
// before the attempt timeout (as a request handler's 30s does before the
// default 60s; here 1h before 2h, to outlast the benchmark), which spares
// the attempt its own deadline context; in the order of their names.
func chainCalls(tb testing.TB) (names []string, calls []func() error) {
	api := newInertAPI()
	c := inertClient(tb, api)
	bounded := inertClient(tb, api, WithTimeouts(2*time.Hour, 3*time.Hour))
	ctx, contents := context.Background(), genai.Text("Say hi")
	callerCtx, cancel := context.WithTimeout(ctx, time.Hour)
	tb.Cleanup(cancel)
	check := func(resp *genai.GenerateContentResponse, err error) error {
		if err == nil && resp != api.resp {
			return errors.New("not the upstream's answer")
		}
		return err
	}
	return []string{"upstream", "geminiguard", "deadline", "caller-deadline"}, []func() error{
		func() error { return check(api.GenerateContent(ctx, chainModels[0], contents, nil)) },
		func() error { return check(c.GenerateContent(ctx, "", contents, nil)) },
		func() error {
			actx, cancel := context.WithDeadline(ctx, time.Now().Add(defaultAttemptTimeout))
			defer cancel()
			return check(api.GenerateContent(actx, chainModels[0], contents, nil))
		},
		func() error { return check(bounded.GenerateContent(callerCtx, "", contents, nil)) },
	}
}

// BenchmarkChainOwn is one call on an upstream that answers at once:
// upstream is the inert call alone, geminiguard the same call through the
// chain, deadline the inert call under an attempt's deadline context and
// nothing else of the chain, caller-deadline geminiguard under a caller's
// deadline that bounds the attempt; paired makes the four in turn (so the
// machine's drift falls on all alike) and reports each one's time per
// call and the chain's own cost over the inert call (own-ns), the same
// without the deadline context (rest-ns), and under the caller's deadline
// (caller-deadline-own-ns). The failsafe-go stack's own-ns, measured the
// same way, is examples/internal/failsafestack's BenchmarkChainOwn.
func BenchmarkChainOwn(b *testing.B) {
	names, calls := chainCalls(b)
	paired.Bench(b, names, calls, func(b *testing.B, per []float64) {
		b.ReportMetric(per[1]-per[0], "own-ns")
		b.ReportMetric(per[1]-per[2], "rest-ns")
		b.ReportMetric(per[3]-per[0], "caller-deadline-own-ns")
	})
}

// BenchmarkChainOwnRefused is a call refused by open breakers on every
// model, the upstream never reached. The failsafe-go stack's is
// examples/internal/failsafestack's BenchmarkChainOwnRefused.
func BenchmarkChainOwnRefused(b *testing.B) {
	api := newInertAPI()
	api.fail = overloaded
	c := inertClient(b, api, WithRetry(RetryPolicy{MaxAttempts: 1}), WithBreaker(BreakerSettings{OpenFor: time.Hour}))
	ctx, contents := context.Background(), genai.Text("Say hi")
	for range 2 * defaultFailureThreshold { // every model's threshold
		_, _ = c.GenerateContent(ctx, "", contents, nil)
	}
	before := api.calls
	_, err := c.GenerateContent(ctx, "", contents, nil)
	require.Error(b, err)
	require.Equal(b, before, api.calls, "every breaker is open: no request leaves")
	b.Run("geminiguard", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.GenerateContent(ctx, "", contents, nil); err == nil {
				b.Fatal("answered with every breaker open")
			}
		}
	})
}
