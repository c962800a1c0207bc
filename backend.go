package geminiguard

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/genai"
)

// A cascade entry may send its requests through an SDK client of its own
// (WithModelBackend): the same model on Vertex AI as a fallback for the
// Gemini API, or a second key. Everything else about the entry (breakers,
// cool-downs, limits, Stats, CallRecord) is kept under the entry's name.

// modelBackend is where a WithModelBackend entry sends its requests. Its
// fields are set by the option and never change.
type modelBackend struct {
	model  string        // the model name the requests carry
	sdk    *genai.Client // the SDK client they go through
	vertex bool          // sdk uses the Vertex AI backend
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
		if cfg.backends == nil {
			cfg.backends = make(map[string]*modelBackend)
		}
		cfg.backends[strings.TrimPrefix(entry, "models/")] = &modelBackend{
			model:  strings.TrimPrefix(model, "models/"),
			sdk:    sdk,
			vertex: sdk.ClientConfig().Backend == genai.BackendVertexAI,
		}
	})
}

// modelsFor returns the SDK methods m's requests go through: its backend's,
// or the Client's own.
func (c *Client) modelsFor(m *modelState) modelsAPI {
	if m.via != nil {
		return m.via.sdk.Models
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
		if b.sdk.ClientConfig().HTTPOptions.RetryOptions != nil {
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
		if b == nil {
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
	provider, server = "gcp.gemini", "generativelanguage.googleapis.com"
	if b.vertex {
		provider, server = "gcp.vertex_ai", "aiplatform.googleapis.com"
	}
	if u, err := url.Parse(b.sdk.ClientConfig().HTTPOptions.BaseURL); err == nil && u.Host != "" {
		server = u.Hostname()
	}
	return provider, server
}
