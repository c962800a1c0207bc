package geminitest

import (
	"net/http"
	"strings"
	"time"

	"google.golang.org/genai"
)

// Model describes one model the fake serves and how it behaves. Only Name is
// required; every other zero field means the default written next to it.
// The Server keeps its own copy: changing a Model after New or SetModel has
// no effect.
type Model struct {
	// Name is the model id without "models/", e.g. "gemini-2.5-flash".
	Name string
	// DisplayName (default Name) and Version (default "001") appear in
	// models.list and models.get.
	DisplayName, Version string
	// InputTokenLimit and OutputTokenLimit appear in models.list and
	// models.get. Defaults 1048576 and 65536.
	InputTokenLimit, OutputTokenLimit int
	// Unlisted hides the model: absent from models.list, 404 on models.get,
	// and the real 404 NOT_FOUND body on generateContent and
	// streamGenerateContent (a retired model).
	Unlisted bool
	// Latency is the wait before a 200 answer: before a unary answer, or
	// before a stream's headers and first event. Step.Latency overrides it.
	Latency time.Duration
	// ChunkInterval is the wait between stream events.
	ChunkInterval time.Duration
	// Text is the full answer. Default: "Hello from <Name>. " repeated to
	// about 200 characters.
	Text string
	// Chunks is the number of events a streamed answer is split into
	// (default 4; fewer when the text has fewer characters).
	Chunks int
	// Quota emulates the API's quotas for generate and stream requests.
	Quota Quota
	// Script is consumed one step per generate or stream request admitted
	// by the quota, and per batchEmbedContents request (which only its
	// error faults and latency affect). When it is exhausted, Faults are
	// drawn.
	Script []Step
	// Faults are drawn, in order, once the script is exhausted: a uniform
	// draw in [0,1) picks the first Chance whose cumulative P exceeds it;
	// none picks OK.
	Faults []Chance
	// Seed seeds the draws of Faults, so a run is deterministic.
	Seed int64
	// Decide, when set, decides every generate and stream request admitted
	// by the quota, instead of Script and Faults. Its int is the 0-based
	// index of the request among those. Decide is called without any lock
	// held, possibly from several goroutines at once; inside a
	// testing/synctest bubble time.Now() in it reads the fake clock.
	Decide func(Request, int) Step
	// RequireSignatures makes the model check thought signatures as Gemini 3
	// models do. Every model stamps its own signature on the thought parts
	// and the first function call of its answers; one that requires them
	// also refuses, with the real 400 bodies, a request carrying a
	// signature that is neither its own nor a documented stand-in
	// ("skip_thought_signature_validator", "context_engineering_is_the_way_to_go"):
	// "Corrupted thought signature." (Vertex AI: "... Thought signature is
	// not valid..."), and one whose current turn (from the last user content
	// that is not only function responses) has a model content whose first
	// function call carries no signature: "Function call is missing a
	// thought_signature in functionCall parts. ...". Refused requests are
	// counted in Hits and logged in Requests, and take no Script step.
	RequireSignatures bool
	// Embed, when set, gives the model's embedding of a text of dims values
	// (dims is the request's outputDimensionality, 0 when unset) in place of
	// the default: values drawn from a generator seeded by the text, so two
	// texts, however alike, get unrelated vectors. A test of similarity
	// search gives paraphrases close vectors with it. It is called without
	// any lock held, possibly from several goroutines at once.
	Embed func(text string, dims int) []float32
}

// Quota is an emulated quota. A zero limit is unlimited.
type Quota struct {
	// RPM is the requests allowed in any 60-second window.
	RPM int
	// TPM is the input tokens (the fake's estimate) allowed in any 60-second
	// window.
	TPM int
	// RPD is the requests allowed per day; the day ends at midnight
	// America/Los_Angeles.
	RPD int
	// PaidTier selects the paid-tier quota ids and metrics in 429 bodies
	// (no "-FreeTier" suffix).
	PaidTier bool
}

// Request is one generate or stream request as the fake received it. It is a
// copy: the Server never changes it after handing it out.
type Request struct {
	// Verb is VerbGenerate or VerbStream.
	Verb Verb
	// Contents is the request's "contents", decoded with genai types; nil
	// when the body is not valid JSON.
	Contents []*genai.Content
	// Body is the raw request body.
	Body []byte
	// Header is the request's header (X-Server-Timeout, X-Goog-Api-Key, ...).
	Header http.Header
	// At is when the request arrived (time.Now(): fake time in a bubble).
	At time.Time
}

// Defaults for Model fields.
const (
	defaultInputTokenLimit  = 1048576
	defaultOutputTokenLimit = 65536
	defaultChunks           = 4
	defaultTextLen          = 200
)

// withDefaults returns m with every zero field that has a default filled in.
func (m Model) withDefaults() Model {
	if m.DisplayName == "" {
		m.DisplayName = m.Name
	}
	if m.Version == "" {
		m.Version = "001"
	}
	if m.InputTokenLimit == 0 {
		m.InputTokenLimit = defaultInputTokenLimit
	}
	if m.OutputTokenLimit == 0 {
		m.OutputTokenLimit = defaultOutputTokenLimit
	}
	if m.Text == "" {
		unit := "Hello from " + m.Name + ". "
		m.Text = strings.Repeat(unit, (defaultTextLen+len(unit)-1)/len(unit))
	}
	if m.Chunks <= 0 {
		m.Chunks = defaultChunks
	}
	return m
}

// modelJSON is a model as models.list and models.get return it.
type modelJSON struct {
	Name                       string   `json:"name"`
	BaseModelID                string   `json:"baseModelId"`
	Version                    string   `json:"version"`
	DisplayName                string   `json:"displayName"`
	Description                string   `json:"description"`
	InputTokenLimit            int      `json:"inputTokenLimit"`
	OutputTokenLimit           int      `json:"outputTokenLimit"`
	SupportedGenerationMethods []string `json:"supportedGenerationMethods"`
	Temperature                float64  `json:"temperature"`
	MaxTemperature             float64  `json:"maxTemperature"`
	TopP                       float64  `json:"topP"`
	TopK                       int      `json:"topK"`
}

// wire returns m as models.list and models.get return it.
func (m Model) wire() modelJSON {
	return modelJSON{
		Name:             "models/" + m.Name,
		BaseModelID:      m.Name,
		Version:          m.Version,
		DisplayName:      m.DisplayName,
		Description:      "Served by geminitest.",
		InputTokenLimit:  m.InputTokenLimit,
		OutputTokenLimit: m.OutputTokenLimit,
		SupportedGenerationMethods: []string{
			string(VerbGenerate), string(VerbStream), string(VerbCountTokens), string(VerbEmbed),
		},
		Temperature:    1,
		MaxTemperature: 2,
		TopP:           0.95,
		TopK:           64,
	}
}
