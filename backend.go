package geminiguard

import (
	"context"
	"fmt"
	"iter"
	"net/url"
	"strings"
	"time"

	"google.golang.org/genai"
)

// A cascade entry may send its requests through an SDK client of its own
// (WithModelBackend): the same model on Vertex AI as a fallback for the
// Gemini API, or a second key. Everything else about the entry (breakers,
// cool-downs, limits, Stats, CallRecord) is kept under the entry's name.

// modelBackend is where a WithModelBackend or WithBackend entry sends its
// requests. Its fields are set by the option and never change.
type modelBackend struct {
	model  string        // the model name the requests carry
	api    modelsAPI     // what they go through: sdk.Models, or local's adapter
	sdk    *genai.Client // the SDK client they go through; nil for a Backend
	vertex bool          // sdk uses the Vertex AI backend
	local  bool          // a Backend (WithBackend): not Gemini, listed by no API
}

// Backend is a cascade entry that is not Gemini: typically a local model
// served by Ollama, llama.cpp's server or vLLM (see the openaicompat
// package), as the tier that answers when every Gemini model is down. Its
// methods have the shapes of genai's Models and the same contracts: model
// is the name given to WithBackend, contents and config are the caller's
// (never to be modified), an answer is a *genai.GenerateContentResponse
// with candidates, parts and a FinishReason, as Gemini sends them (the
// Client judges empty and blocked answers of a Backend as Gemini's), a
// stream yields such responses, the last with a FinishReason, and ends at
// its first error. Errors should read as Gemini's do to Classify: a
// genai.APIError value with the HTTP status (429 a rate limit, 503 an
// overload, 400 the caller's request), or the transport's error as is
// (connection refused is a network failure); the context's error when ctx
// ended. A Backend must be safe for concurrent use.
type Backend interface {
	GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error)
	GenerateContentStream(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error]
}

// WithBackend makes the cascade entry named entry send its generation
// requests as model to b, a Backend that is not Gemini, e.g. a local Gemma
// on Ollama as the last tier:
//
//	local := openaicompat.New("http://localhost:11434")
//	geminiguard.New(ctx, geminiguard.WithAPIKey(key),
//		geminiguard.WithCascade("gemini-3.1-pro", "gemini-3.7-flash", "local/gemma3"),
//		geminiguard.WithBackend("local/gemma3", "gemma3:4b", local),
//		geminiguard.WithModelTimeout("local/gemma3", 2*time.Minute))
//
// entry is the name used everywhere else, as for WithModelBackend; it has
// its own breakers, cool-downs, limiter (WithLimits), learned attempt
// deadlines and attempt timeout (WithModelTimeout: local models are slow).
// CheckCascade does not look for it in any API's list: it reports the entry
// as existing, with no generation and no shutdown date. A failure of b never
// reaches further than entry (no project-wide cool-down). b serves
// GenerateContent and GenerateContentStream only: CountTokens, ComputeTokens
// and EmbedContent on entry fail, before anything is sent, with an error
// that Classify reads as ClassBadRequest, and WithExactTokenCount estimates
// its tokens locally. It has no price unless WithPrices gives one.
// OpenTelemetry reports its calls with gen_ai.provider.name "local". The
// last WithBackend or WithModelBackend for an entry wins. Default: every
// entry is a Gemini model.
func WithBackend(entry, model string, b Backend) Option {
	return optionFunc(func(cfg *config) {
		switch {
		case entry == "" || model == "":
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithBackend(%q, %q): give the cascade entry's name and the model it sends, e.g. (\"local/gemma3\", \"gemma3:4b\")", entry, model))
			return
		case b == nil:
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithBackend(%q, %q, nil): pass a Backend, e.g. openaicompat.New(\"http://localhost:11434\")", entry, model))
			return
		}
		if cfg.backends == nil {
			cfg.backends = make(map[string]*modelBackend)
		} else {
			cfg.backends = cloneMap(cfg.backends)
		}
		cfg.backends[strings.TrimPrefix(entry, "models/")] = &modelBackend{model: model, api: backendAPI{b: b, entry: entry}, local: true}
	})
}

// WithModelTimeout sets the attempt timeout of the cascade entry named
// entry, in place of WithTimeouts' attempt timeout: longer for a slow tier
// (a local model on a CPU), shorter for a model that must answer fast.
// Timeouts still nest: the call's remaining time bounds every attempt, and
// New rejects a timeout that is not positive or not shorter than the call
// timeout. A stream's first chunk is awaited for the shorter of this and
// the first-chunk deadline. The last WithModelTimeout for an entry wins.
// Default: the attempt timeout of WithTimeouts.
func WithModelTimeout(entry string, attempt time.Duration) Option {
	return optionFunc(func(cfg *config) {
		cfg.modelTimeouts = cloneMap(cfg.modelTimeouts)
		if cfg.modelTimeouts == nil {
			cfg.modelTimeouts = make(map[string]time.Duration)
		}
		cfg.modelTimeouts[strings.TrimPrefix(entry, "models/")] = attempt
	})
}

// validateModelTimeouts reports the WithModelTimeout values New rejects.
func (cfg *config) validateModelTimeouts() []error {
	var errs []error
	for entry, d := range cfg.modelTimeouts {
		switch {
		case entry == "":
			errs = append(errs, fmt.Errorf("geminiguard: WithModelTimeout(%q, %v): give the cascade entry's name", entry, d))
		case d <= 0 || d >= cfg.callTimeout:
			errs = append(errs, fmt.Errorf("geminiguard: WithModelTimeout(%q, %v): the attempt timeout must be positive and shorter than the call timeout (%v), so that the call's other models fit", entry, d, cfg.callTimeout))
		}
	}
	return errs
}

// attemptTimeoutOf returns the attempt timeout of the entry named name.
func (cfg *config) attemptTimeoutOf(name string) time.Duration {
	if d, ok := cfg.modelTimeouts[name]; ok {
		return d
	}
	return cfg.attemptTimeout
}

// backendAPI adapts a Backend to the methods the chain calls.
type backendAPI struct {
	b     Backend
	entry string // the cascade entry, for errors
}

func (a backendAPI) GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	return a.b.GenerateContent(ctx, model, contents, config)
}

func (a backendAPI) GenerateContentStream(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error] {
	return a.b.GenerateContentStream(ctx, model, contents, config)
}

// List is never called: CheckCascade lists no Backend's models.
func (a backendAPI) List(context.Context, *genai.ListModelsConfig) (genai.Page[genai.Model], error) {
	return genai.Page[genai.Model]{}, a.unserved("List")
}

func (a backendAPI) CountTokens(context.Context, string, []*genai.Content, *genai.CountTokensConfig) (*genai.CountTokensResponse, error) {
	return nil, a.unserved("CountTokens")
}

func (a backendAPI) ComputeTokens(context.Context, string, []*genai.Content, *genai.ComputeTokensConfig) (*genai.ComputeTokensResponse, error) {
	return nil, a.unserved("ComputeTokens")
}

func (a backendAPI) EmbedContent(context.Context, string, []*genai.Content, *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error) {
	return nil, a.unserved("EmbedContent")
}

// unserved is the error of a method a Backend does not serve.
func (a backendAPI) unserved(method string) error {
	return &requestError{where: fmt.Sprintf("%s on %q", method, a.entry), what: "is not served: the entry is a Backend (WithBackend), which generates only",
		fix: "call a Gemini model for it"}
}

// WithModelBackend makes the cascade entry named entry send its requests as
// model through sdk, an SDK client other than the Client's own: typically
// the same model on Vertex AI as a fallback for the Gemini API, e.g.
//
//	vertex, _ := genai.NewClient(ctx, &genai.ClientConfig{Backend: genai.BackendVertexAI, Project: "p", Location: "us-central1"})
//	geminiguard.New(ctx, geminiguard.WithAPIKey(key),
//		geminiguard.WithCascade("gemini-2.5-flash", "vertex/gemini-2.5-flash"),
//		geminiguard.WithModelBackend("vertex/gemini-2.5-flash", "gemini-2.5-flash", vertex))
//
// entry is the name used everywhere else: in WithCascade, WithLimits,
// WithModelConfig, Stats, CallRecord and the Fallback's Attempts, and as the
// model argument of GenerateContent; it has its own breakers, cool-downs and
// limiter, apart from model's on the Client's own SDK client. CheckCascade
// lists sdk's models to check entry; its shutdown date is looked up as
// "vertex/"+model when sdk uses Vertex AI (Vertex AI retires models on its
// own dates), else as model. A failure that says the whole project is down
// (an invalid key, a spend cap, a disabled API) cools only entry down: the
// project of sdk is not the Client's. sdk's own retry is switched off per
// call, as for WithGenAIClient. OpenTelemetry reports entry's calls with
// gen_ai.provider.name gcp.vertex_ai when sdk uses Vertex AI.
// Several entries may share one sdk. The last WithModelBackend for an entry
// wins. Default: every entry is a model of the Client's own SDK client.
func WithModelBackend(entry, model string, sdk *genai.Client) Option {
	return optionFunc(func(cfg *config) {
		switch {
		case entry == "" || model == "":
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithModelBackend(%q, %q): give the cascade entry's name and the model it sends, e.g. (\"vertex/gemini-2.5-flash\", \"gemini-2.5-flash\")", entry, model))
			return
		case sdk == nil:
			cfg.problems = append(cfg.problems, fmt.Errorf("geminiguard: WithModelBackend(%q, %q, nil): pass the *genai.Client from genai.NewClient", entry, model))
			return
		}
		cfg.backends = cloneMap(cfg.backends)
		if cfg.backends == nil {
			cfg.backends = make(map[string]*modelBackend)
		}
		cfg.backends[strings.TrimPrefix(entry, "models/")] = &modelBackend{
			model:  strings.TrimPrefix(model, "models/"),
			api:    sdk.Models,
			sdk:    sdk,
			vertex: sdk.ClientConfig().Backend == genai.BackendVertexAI,
		}
	})
}

// modelsFor returns the methods m's requests go through: its backend's,
// or the Client's own SDK client's.
func (c *Client) modelsFor(m *modelState) modelsAPI {
	if m.via != nil {
		return m.via.api
	}
	return c.api
}

// classify is Classify for a failure of m: a project-wide verdict from
// another backend's SDK client is m's alone.
func (m *modelState) classify(err error) Verdict {
	v := Classify(err)
	if m.via != nil && v.Scope == ScopeProject {
		v.Scope = ScopeModel
	}
	return v
}

// vertex reports whether m's requests go to Vertex AI.
func (c *Client) vertex(m *modelState) bool {
	if m.via != nil {
		return m.via.vertex
	}
	return c.sdk().ClientConfig().Backend == genai.BackendVertexAI
}

// shutdownKey is the key of m's model in the shutdown table: "vertex/" and
// the model name on Vertex AI, the model name on the Gemini API.
func (c *Client) shutdownKey(m *modelState) string {
	if c.vertex(m) {
		return vertexShutdownPrefix + m.wire
	}
	return m.wire
}

// vertexShutdownPrefix marks the shutdown table's Vertex AI entries.
const vertexShutdownPrefix = "vertex/"

// anySDKRetries reports whether the Client's own SDK client (when the app
// gave it) or a backend's retries on its own, so that calls turn it off.
func anySDKRetries(cfg *config) bool {
	if cfg.genaiClient != nil && cfg.genaiClient.ClientConfig().HTTPOptions.RetryOptions != nil {
		return true
	}
	for _, b := range cfg.backends {
		if b.sdk != nil && b.sdk.ClientConfig().HTTPOptions.RetryOptions != nil {
			return true
		}
	}
	return false
}

// listBackends lists the models of every WithModelBackend client a cascade
// entry uses, once per client. Its error names the entry.
func (c *Client) listBackends(ctx context.Context) (map[*genai.Client]map[string]*genai.Model, error) {
	lists := make(map[*genai.Client]map[string]*genai.Model)
	for _, name := range c.cascade {
		b := c.model(name).via
		if b == nil || b.local {
			continue
		}
		if _, ok := lists[b.sdk]; ok {
			continue
		}
		listed, err := c.listModels(ctx, b.sdk.Models)
		if err != nil {
			return nil, fmt.Errorf("geminiguard: listing models of %s's backend (WithModelBackend) for the cascade check: %w", name, err)
		}
		lists[b.sdk] = listed
	}
	return lists, nil
}

// telemetry returns the gen_ai.provider.name and server.address of b's
// requests.
func (b *modelBackend) telemetry() (provider, server string) {
	if b.local {
		return "local", ""
	}
	provider, server = "gcp.gemini", "generativelanguage.googleapis.com"
	if b.vertex {
		provider, server = "gcp.vertex_ai", "aiplatform.googleapis.com"
	}
	if u, err := url.Parse(b.sdk.ClientConfig().HTTPOptions.BaseURL); err == nil && u.Host != "" {
		server = u.Hostname()
	}
	return provider, server
}
