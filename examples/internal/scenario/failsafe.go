package scenario

import (
	"context"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/examples/internal/failsafestack"
)

// FailsafeArm is the failsafe-go stack of examples/internal/failsafestack
// around the genai SDK (SDK retry off), over the scenario's cascade and its
// per-minute quotas. In the latency scenarios (Scenario.HedgeAfter set)
// each model's stack has a HedgePolicy with that fixed delay, the way a
// developer who measured the primary's p95 on ordinary requests sets it; in
// the brownout family (Scenario.HedgeQuantile set) one that hedges after
// that quantile of the model's recent durations, within a budget, the way a
// developer who read failsafe-go's documentation sets it. Streams are never
// hedged (the attempts of a stream share what the user sees).
func FailsafeArm() Arm {
	return Arm{Name: "failsafe", New: func(ctx context.Context, env Env) (Caller, error) {
		c, err := newClient(ctx, env, nil)
		if err != nil {
			return nil, err
		}
		return newFailsafeCaller(c.Models, env.Scenario), nil
	}}
}

// failsafeCaller runs each call through the failsafe-go stack.
type failsafeCaller struct {
	stack *failsafestack.Stack[Outcome]
	api   *genai.Models
}

func newFailsafeCaller(api *genai.Models, sc *Scenario) *failsafeCaller {
	models := make([]failsafestack.Model, len(sc.Models))
	for i, m := range sc.Models {
		models[i] = failsafestack.Model{Name: m.Name, RPM: m.Quota.RPM}
		if !sc.Workload.Stream {
			models[i].HedgeAfter, models[i].HedgeQuantile = sc.HedgeAfter, sc.HedgeQuantile
		}
	}
	return &failsafeCaller{stack: failsafestack.New[Outcome](models, failsafestack.OpenFor), api: api}
}

// run runs one call whose attempts are try.
func (f *failsafeCaller) run(ctx context.Context, try failsafestack.Attempt[Outcome]) Outcome {
	out, err := f.stack.Run(ctx, try)
	out.Err = err
	return out
}

func (f *failsafeCaller) Generate(ctx context.Context, call int) Outcome {
	return f.run(ctx, func(ctx context.Context, model string) (Outcome, error) {
		out := generate(ctx, f.api.GenerateContent, model, call)
		return out, out.Err
	})
}

// Stream shows each chunk to the user as it arrives, as a streaming UI
// does; an attempt cut midway is retried (or falls back) from the start,
// and what the user already saw stays on screen.
func (f *failsafeCaller) Stream(ctx context.Context, call int) Outcome {
	var shown Outcome
	return f.run(ctx, func(ctx context.Context, model string) (Outcome, error) {
		err := collect(f.api.GenerateContentStream(ctx, model, genai.Text(Prompt(call)), nil), &shown)
		return shown, err
	})
}
