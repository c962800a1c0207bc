package scenario

import (
	"context"
	"iter"
	"math/rand/v2"
	"net/http"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// Arm is one way of calling Gemini that a scenario compares.
type Arm struct {
	Name string
	// New builds the arm's caller for one run; an error means the arm could
	// not start (it is reported, and no call is sent through it).
	New func(ctx context.Context, env Env) (Caller, error)
}

// Env is what an arm is built with for one run.
type Env struct {
	Scenario   *Scenario
	HTTPClient *http.Client // reaches this arm's fake
	BaseURL    string       // the fake's base URL for the SDK (geminitest.BaseURL in memory)
	Start      time.Time    // the run's start
}

// Caller sends one call of the workload. Implementations are safe for
// concurrent use. A Caller that is also an io.Closer is closed once the
// run's calls have ended and its figures are read: what it still does in
// the background (a fleet's notified round trips) ends within the run.
type Caller interface {
	Generate(ctx context.Context, call int) Outcome
	Stream(ctx context.Context, call int) Outcome
}

// Outcome is what the user of an arm got from one call.
type Outcome struct {
	Text  string // the answer's text; for streams, everything shown, in order
	Model string // the model that answered (ModelVersion; geminiguard.FallbackModelVersion for its Fallback), "" when none
	Err   error  // the error the call ended with, nil when none
}

// Arms returns the standard arms, in report order: raw, sdk-retry,
// failsafe, geminiguard (with opts added to its defaults), oracle.
func Arms(opts ...geminiguard.Option) []Arm {
	return []Arm{RawArm(), SDKRetryArm(), FailsafeArm(), GeminiguardArm("geminiguard", opts...), OracleArm()}
}

// RawArm is the genai SDK without retry, calling the primary model.
func RawArm() Arm {
	return Arm{Name: "raw", New: func(ctx context.Context, env Env) (Caller, error) {
		return newSDKCaller(ctx, env, nil)
	}}
}

// SDKRetryArm is the genai SDK with its own retry at its defaults
// (HTTPOptions.RetryOptions = &genai.HTTPRetryOptions{}: 5 attempts, 1s
// initial delay doubling to a 60s cap, up to 1s of jitter, on 408, 429,
// 500, 502, 503, 504 and transport errors), calling the primary model.
func SDKRetryArm() Arm {
	return Arm{Name: "sdk-retry", New: func(ctx context.Context, env Env) (Caller, error) {
		return newSDKCaller(ctx, env, &genai.HTTPRetryOptions{})
	}}
}

// newClient returns an SDK client on env's fake with the given retry.
func newClient(ctx context.Context, env Env, retry *genai.HTTPRetryOptions) (*genai.Client, error) {
	return genai.NewClient(ctx, &genai.ClientConfig{
		APIKey:     geminitest.Key,
		Backend:    genai.BackendGeminiAPI,
		HTTPClient: env.HTTPClient,
		HTTPOptions: genai.HTTPOptions{
			BaseURL:      env.BaseURL,
			RetryOptions: retry,
		},
	})
}

// sdkCaller calls one model through the SDK.
type sdkCaller struct {
	models *genai.Models
	model  string
}

func newSDKCaller(ctx context.Context, env Env, retry *genai.HTTPRetryOptions) (*sdkCaller, error) {
	c, err := newClient(ctx, env, retry)
	if err != nil {
		return nil, err
	}
	return &sdkCaller{models: c.Models, model: env.Scenario.Models[0].Name}, nil
}

func (s *sdkCaller) Generate(ctx context.Context, call int) Outcome {
	return generate(ctx, s.models.GenerateContent, s.model, call)
}

func (s *sdkCaller) Stream(ctx context.Context, call int) Outcome {
	var out Outcome
	out.Err = collect(s.models.GenerateContentStream(ctx, s.model, genai.Text(Prompt(call)), nil), &out)
	return out
}

// generateFunc is the shape of GenerateContent, the SDK's and geminiguard's.
type generateFunc func(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error)

// generate sends call's prompt to model through f.
func generate(ctx context.Context, f generateFunc, model string, call int) Outcome {
	resp, err := f(ctx, model, genai.Text(Prompt(call)), nil)
	if err != nil {
		return Outcome{Err: err}
	}
	return Outcome{Text: resp.Text(), Model: resp.ModelVersion}
}

// collect ranges over a stream, appending each chunk's text to out.Text as
// the user would see it, and returns the error that ended the stream.
func collect(stream iter.Seq2[*genai.GenerateContentResponse, error], out *Outcome) error {
	for resp, err := range stream {
		if err != nil {
			return err
		}
		out.Text += resp.Text()
		if resp.ModelVersion != "" {
			out.Model = resp.ModelVersion
		}
	}
	return nil
}

// GeminiguardArm is this module's Client named name, at its defaults plus
// guardOptions and opts.
func GeminiguardArm(name string, opts ...geminiguard.Option) Arm {
	return Arm{Name: name, New: func(ctx context.Context, env Env) (Caller, error) {
		c, err := geminiguard.New(ctx, append(guardOptions(env), opts...)...)
		if err != nil {
			return nil, err
		}
		return &guardCaller{c: c}, nil
	}}
}

// guardOptions are the options every geminiguard arm of env's scenario
// starts from: the fake's address, the scenario's cascade, each model's
// quota as WithLimits, the startup check on, and a seeded jitter source.
func guardOptions(env Env) []geminiguard.Option {
	all := []geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key),
		geminiguard.WithBaseURL(env.BaseURL),
		geminiguard.WithHTTPClient(env.HTTPClient),
		geminiguard.WithCascade(env.Scenario.names()...),
		geminiguard.WithStartupCheck(true),
		// Seeded, so that the arm's figures repeat from run to run.
		geminiguard.WithJitterSource(rand.NewPCG(1, 2)),
	}
	for _, m := range env.Scenario.Models {
		if q := m.Quota; q.RPM > 0 || q.TPM > 0 || q.RPD > 0 {
			all = append(all, geminiguard.WithLimits(m.Name, geminiguard.Limits{RPM: q.RPM, TPM: q.TPM, RPD: q.RPD}))
		}
	}
	return all
}

// guardCaller calls through a geminiguard Client.
type guardCaller struct {
	c *geminiguard.Client
}

func (g *guardCaller) Generate(ctx context.Context, call int) Outcome {
	return generate(ctx, g.c.GenerateContent, "", call)
}

func (g *guardCaller) Stream(ctx context.Context, call int) Outcome {
	var out Outcome
	out.Err = collect(g.c.GenerateContentStream(ctx, "", genai.Text(Prompt(call)), nil), &out)
	return out
}

// Close closes the Client.
func (g *guardCaller) Close() error { return g.c.Close() }

// FigCost is the name of the ArmRun.Figures that geminiguard arms report:
// what their Client's responses cost, in micro-dollars (the sum of
// Stats.Models' Cost, at the Client's prices).
const FigCost = "cost"

// figures reports the Client's cost (FigCost).
func (g *guardCaller) figures() map[string]float64 {
	var cost geminiguard.Micros
	for _, m := range g.c.Stats().Models {
		cost += m.Cost
	}
	return map[string]float64{FigCost: float64(cost)}
}

// featureKey is the context key of the feature that sends a call
// (Workload.Feature).
type featureKey struct{}

// withFeature returns ctx carrying the feature that sends the call.
func withFeature(ctx context.Context, feature string) context.Context {
	return context.WithValue(ctx, featureKey{}, feature)
}

// BulkheadArm is GeminiguardArm named name with one bulkhead per feature of
// the workload (heads, by feature name) and opts: each call enters its
// feature's bulkhead (geminiguard.InBulkhead); a call without a
// feature enters the default one.
func BulkheadArm(name string, heads map[string]geminiguard.Bulkhead, opts ...geminiguard.Option) Arm {
	for feature, b := range heads {
		opts = append(opts, geminiguard.WithBulkhead(feature, b))
	}
	arm := GeminiguardArm(name, opts...)
	return Arm{Name: name, New: func(ctx context.Context, env Env) (Caller, error) {
		c, err := arm.New(ctx, env)
		if err != nil {
			return nil, err
		}
		return featureCaller{c}, nil
	}}
}

// featureCaller puts each call in its feature's bulkhead.
type featureCaller struct {
	next Caller
}

// tag names the bulkhead of ctx's feature, if any, on ctx.
func tag(ctx context.Context) context.Context {
	if f, _ := ctx.Value(featureKey{}).(string); f != "" {
		return geminiguard.InBulkhead(ctx, f)
	}
	return ctx
}

func (f featureCaller) Generate(ctx context.Context, call int) Outcome {
	return f.next.Generate(tag(ctx), call)
}

func (f featureCaller) Stream(ctx context.Context, call int) Outcome {
	return f.next.Stream(tag(ctx), call)
}
