package failsafestack_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/examples/internal/failsafestack"
	"github.com/geminiguard/geminiguard/internal/inert"
	"github.com/geminiguard/geminiguard/internal/paired"
)

// The stack's own cost, apart from the SDK: the counterpart of the library's
// BenchmarkChainOwn and BenchmarkChainOwnRefused (chain_bench_test.go at the
// repository root), which measure geminiguard's chain on the same inert
// upstream. They live apart because failsafe-go is a requirement of this
// module only; both in one command, from the repository root:
//
//	go test -run '^$' -bench ChainOwn -benchmem -count 6 . ./examples/internal/failsafestack | tee own.txt
//
// Each side's paired run reports its own-ns (the chain's time per call over
// the inert call's, measured in turn); their ratio is geminiguard's cost
// over failsafe-go's. deadline, in both, is the same standard-library cost
// (the inert call under a deadline context), a check that the two runs saw
// the machine alike.

// chainModels is the cascade of the benchmarks, the library's.
var chainModels = inert.Models

// attemptTimeout is geminiguard's default attempt timeout, the deadline the
// deadline call sets as the chain's attempt does.
const attemptTimeout = time.Minute

// newStack returns the failsafe arm's stack over chainModels, with no
// RateLimiter (the overhead scenario has no quotas), its breakers open for
// openFor.
func newStack(openFor time.Duration) *failsafestack.Stack[*genai.GenerateContentResponse] {
	models := make([]failsafestack.Model, len(chainModels))
	for i, name := range chainModels {
		models[i] = failsafestack.Model{Name: name}
	}
	return failsafestack.New[*genai.GenerateContentResponse](models, openFor)
}

// stackCall makes one call through the stack, each attempt a call of api.
func stackCall(ctx context.Context, s *failsafestack.Stack[*genai.GenerateContentResponse], api *inert.API, contents []*genai.Content) (*genai.GenerateContentResponse, error) {
	return s.Run(ctx, func(ctx context.Context, model string) (*genai.GenerateContentResponse, error) {
		return api.GenerateContent(ctx, model, contents, nil)
	})
}

// BenchmarkChainOwn is one call on an upstream that answers at once:
// upstream is the inert call alone, failsafe the same call through the
// stack, deadline the inert call under an attempt's deadline context; paired
// makes the three in turn and reports each one's time per call and the
// stack's own cost over the inert call (own-ns).
func BenchmarkChainOwn(b *testing.B) {
	api := inert.New()
	stack := newStack(failsafestack.OpenFor)
	ctx, contents := context.Background(), genai.Text("Say hi")
	check := func(resp *genai.GenerateContentResponse, err error) error {
		if err == nil && resp != api.Resp {
			return errors.New("not the upstream's answer")
		}
		return err
	}
	names := []string{"upstream", "failsafe", "deadline"}
	calls := []func() error{
		func() error { return check(api.GenerateContent(ctx, chainModels[0], contents, nil)) },
		func() error { return check(stackCall(ctx, stack, api, contents)) },
		func() error {
			actx, cancel := context.WithDeadline(ctx, time.Now().Add(attemptTimeout))
			defer cancel()
			return check(api.GenerateContent(actx, chainModels[0], contents, nil))
		},
	}
	paired.Bench(b, names, calls, func(b *testing.B, per []float64) {
		b.ReportMetric(per[1]-per[0], "own-ns")
	})
}

// BenchmarkChainOwnRefused is a call refused by open breakers on every
// model, the upstream never reached.
func BenchmarkChainOwnRefused(b *testing.B) {
	api := inert.New()
	api.Fail = inert.Overloaded
	stack := newStack(time.Hour)
	ctx, contents := context.Background(), genai.Text("Say hi")
	for _, cb := range stack.Breakers {
		cb.Open() // failing calls would open them too, after seconds of backoff
	}
	_, err := stackCall(ctx, stack, api, contents)
	require.Error(b, err)
	require.Zero(b, api.Calls, "every breaker is open: no request leaves")
	b.Run("failsafe", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := stackCall(ctx, stack, api, contents); err == nil {
				b.Fatal("answered with every breaker open")
			}
		}
	})
}
