package geminiguard

import (
	"context"
	"fmt"
	"iter"
	"net/url"
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
