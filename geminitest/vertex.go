package geminitest

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/genai"
)

// What a Server made by NewVertex serves: Vertex AI's paths as the genai SDK
// builds them with Backend genai.BackendVertexAI (v1.77.0, models.go and
// api_client.go), and Vertex AI's error bodies where they differ from the
// Gemini API's.

// vertexSite is the project and location a Vertex AI Server answers for.
type vertexSite struct {
	project, location string
}

// NewVertex returns a Server that serves models as Vertex AI does for
// project in location: the same models, scripts, faults, quotas and hit
// counts as a Server made by New, on Vertex AI's paths
// (v1beta1/projects/{project}/locations/{location}/publishers/google/models/{model}:verb
// and, for models.get and models.list,
// v1beta1/publishers/google/models[/{model}]), with Vertex AI's bodies for
// the faults whose bodies differ there:
//
//   - ResourceExhausted: 429 RESOURCE_EXHAUSTED "Resource exhausted. Please
//     try again later. ..." without details (shared capacity exhausted);
//   - RateLimitMinute, RateLimitTokens, DailyAndMinute and the emulated
//     Quota: 429 RESOURCE_EXHAUSTED "Quota exceeded for
//     aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model
//     with base model: {model}. ..." without details (on an embedding
//     request, the metric embed_content_input_tokens_per_minute_per_base_model);
//   - NotFound: 404 NOT_FOUND "Publisher Model `projects/.../models/{model}`
//     was not found or your project does not have access to it. ...".
//
// Every other fault answers as on the Gemini API. A request for another
// project or location is answered 403 PERMISSION_DENIED, as Vertex AI
// answers a project the caller has no access to. Requests must carry
// "Authorization: Bearer " + Key (what ClientConfig's HTTP client adds) or,
// in Vertex AI express mode, the API key Key; anything else is answered 401
// UNAUTHENTICATED. Embedding requests (embedContent, and predict for
// gemini-embedding-001 and the text-embedding models) count as VerbEmbed.
// computeTokens, which only Vertex AI serves, counts as VerbComputeTokens:
// it answers, per content, its role and its tokens as the fake splits them
// (every 4 characters of text, as the fake's countTokens counts), each with
// a token id derived from its bytes.
//
// A cascade that spans the Gemini API and Vertex AI is tested with two
// Servers, one of each, so that the same model can fail on one and answer on
// the other.
func NewVertex(project, location string, models ...Model) *Server {
	s := New(models...)
	s.vertex = &vertexSite{project: project, location: location}
	return s
}

// vertexConfig returns the genai config that reaches s, a Vertex AI Server,
// through hc (whose transport is wrapped to add the bearer token) and base.
// Project, Location, Backend, the HTTP client and the base URL are all set
// explicitly, so the SDK reads nothing from the environment that matters and
// looks up no Google credentials (it does only when no HTTP client is
// given).
func (s *Server) vertexConfig(hc *http.Client, base string) *genai.ClientConfig {
	withToken := *hc
	withToken.Transport = bearer{next: hc.Transport}
	return &genai.ClientConfig{
		Backend:     genai.BackendVertexAI,
		Project:     s.vertex.project,
		Location:    s.vertex.location,
		HTTPClient:  &withToken,
		HTTPOptions: genai.HTTPOptions{BaseURL: base},
	}
}

// bearer adds the fake's access token to every request, as the credentials
// transport of a real Vertex AI client adds an OAuth token.
type bearer struct{ next http.RoundTripper }

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+Key)
	next := b.next
	if next == nil {
		next = http.DefaultTransport
	}
	return next.RoundTrip(r)
}

// Vertex AI's path segments.
const (
	vertexPublisher = "publishers/google/models"
	verbEmbedVertex = "embedContent"
	verbPredict     = "predict"
)

// parseVertexRoute reads a Vertex AI path: /{version}/publishers/google/models
// (GET list), /{version}/publishers/google/models/{model} (GET get), and
// POST /{version}[/projects/{p}/locations/{l}]/publishers/google/models/{model}:{verb}
// (without the project prefix in express mode).
func (s *Server) parseVertexRoute(r *http.Request) (route, bool) {
	_, rest, ok := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/") // drop the version
	if !ok {
		return route{}, false
	}
	rt := route{vertex: true}
	if p, ok := strings.CutPrefix(rest, "projects/"); ok {
		project, l, _ := strings.Cut(p, "/")
		l, ok = strings.CutPrefix(l, "locations/")
		location, tail, _ := strings.Cut(l, "/")
		if !ok || project == "" || location == "" {
			return route{}, false
		}
		rt.foreign = project != s.vertex.project || location != s.vertex.location
		rt.scoped, rest = true, tail
	}
	if rest == vertexPublisher {
		rt.verb = VerbList
		return rt, r.Method == http.MethodGet && !rt.scoped
	}
	name, ok := strings.CutPrefix(rest, vertexPublisher+"/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return route{}, false
	}
	model, verb, hasVerb := strings.Cut(name, ":")
	rt.model = model
	if !hasVerb {
		rt.verb = VerbGet
		return rt, r.Method == http.MethodGet && !rt.scoped
	}
	switch v := Verb(verb); v {
	case VerbGenerate, VerbStream, VerbCountTokens, VerbComputeTokens:
		rt.verb = v
	case verbEmbedVertex, verbPredict:
		rt.verb, rt.embedAs = VerbEmbed, verb
	default:
		return route{}, false
	}
	return rt, r.Method == http.MethodPost
}

// vertexAuthorized reports whether r carries the fake's bearer token or, in
// express mode, its API key.
func vertexAuthorized(r *http.Request) bool {
	if r.Header.Get("Authorization") == "Bearer "+Key {
		return true
	}
	return r.Header.Get("X-Goog-Api-Key") == Key
}

// vertexEmbed answers Vertex AI's embedContent (one content, one embedding)
// and predict (one embedding per instance) with the values the Gemini API
// path gives the same text.
func vertexEmbed(w http.ResponseWriter, rt route, body []byte, f func(string, int) []float32) {
	type embedding struct {
		Values []float32 `json:"values"`
	}
	if rt.embedAs == verbEmbedVertex {
		var req struct {
			Content *genai.Content `json:"content"`
			Config  struct {
				OutputDimensionality int `json:"outputDimensionality"`
			} `json:"embedContentConfig"`
		}
		if json.Unmarshal(body, &req) != nil || req.Content == nil {
			writeError(w, invalidArgument(invalidArgumentMessage))
			return
		}
		t := text(req.Content)
		writeJSON(w, http.StatusOK, map[string]any{
			"embedding":     embedding{Values: embeddingOf(t, req.Config.OutputDimensionality, f)},
			"usageMetadata": map[string]any{"promptTokenCount": tokensOf(len([]rune(t)))},
			"truncated":     false,
		})
		return
	}
	var req struct {
		Instances []struct {
			Content string `json:"content"`
		} `json:"instances"`
		Parameters struct {
			OutputDimensionality int `json:"outputDimensionality"`
		} `json:"parameters"`
	}
	if json.Unmarshal(body, &req) != nil || len(req.Instances) == 0 {
		writeError(w, invalidArgument(invalidArgumentMessage))
		return
	}
	type prediction struct {
		Embeddings struct {
			Values     []float32      `json:"values"`
			Statistics map[string]any `json:"statistics"`
		} `json:"embeddings"`
	}
	out := struct {
		Predictions []prediction `json:"predictions"`
	}{Predictions: make([]prediction, len(req.Instances))}
	for i, in := range req.Instances {
		out.Predictions[i].Embeddings.Values = embeddingOf(in.Content, req.Parameters.OutputDimensionality, f)
		out.Predictions[i].Embeddings.Statistics = map[string]any{"token_count": tokensOf(len([]rune(in.Content))), "truncated": false}
	}
	writeJSON(w, http.StatusOK, out)
}

// embeddingOf is the fake's embedding of text: f's when f is not nil (a
// Model's Embed), else dims values (default defaultDimensions) drawn from a
// generator seeded by the text.
func embeddingOf(text string, dims int, f func(string, int) []float32) []float32 {
	if f != nil {
		return f(text, dims)
	}
	if dims <= 0 {
		dims = defaultDimensions
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(text))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0))
	values := make([]float32, dims)
	for i := range values {
		values[i] = float32(rng.Float64()*2 - 1)
	}
	return values
}

// vertexModel is a model as Vertex AI's publisher models get and list return
// it (the SDK reads name, displayName, description and versionId).
type vertexModel struct {
	Name        string `json:"name"`
	VersionID   string `json:"versionId"`
	DisplayName string `json:"displayName,omitempty"`
	Description string `json:"description,omitempty"`
}

func (m Model) vertexWire() vertexModel {
	return vertexModel{Name: vertexPublisher + "/" + m.Name, VersionID: m.Version, DisplayName: m.DisplayName, Description: "Served by geminitest."}
}

// vertexError is a Vertex AI error object: the Google API error with the
// legacy "errors" list that Vertex AI's REST answers carry.
type vertexError struct {
	Code    int                 `json:"code"`
	Message string              `json:"message"`
	Errors  []map[string]string `json:"errors,omitempty"`
	Status  string              `json:"status"`
	Details []map[string]any    `json:"details,omitempty"`
}

func writeVertexError(w http.ResponseWriter, e vertexError) {
	b, err := json.Marshal(map[string]vertexError{"error": e})
	if err != nil {
		panic("geminitest: marshal error body: " + err.Error())
	}
	writeBody(w, e.Code, "application/json; charset=UTF-8", b)
}

// vertexResourceExhausted is Vertex AI's 429 when the shared capacity
// (dynamic shared quota) is exhausted: no details.
// https://github.com/google-gemini/gemini-cli/issues/14831 (the REST body,
// with its "errors" list); https://github.com/google-gemini/gemini-cli/issues/15498
func vertexResourceExhausted() vertexError {
	const msg = "Resource exhausted. Please try again later. Please refer to " +
		"https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details."
	return vertexError{Code: http.StatusTooManyRequests, Status: "RESOURCE_EXHAUSTED", Message: msg,
		Errors: []map[string]string{{"message": msg, "domain": "global", "reason": "rateLimitExceeded"}}}
}

// Vertex AI quota metrics, as named in its 429s.
// https://github.com/GoogleCloudPlatform/Open_Data_QnA/issues/61,
// https://github.com/langchain-ai/langchain-google/pull/283 (requests);
// https://github.com/cocoindex-io/cocoindex/issues/1151 (embedding tokens).
const (
	vertexRequestsMetric = "aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model"
	vertexEmbedMetric    = "aiplatform.googleapis.com/embed_content_input_tokens_per_minute_per_base_model"
)

// vertexQuotaExceeded is Vertex AI's 429 of a project quota: no details.
func vertexQuotaExceeded(metric, model string) vertexError {
	return vertexError{Code: http.StatusTooManyRequests, Status: "RESOURCE_EXHAUSTED",
		Message: fmt.Sprintf("Quota exceeded for %s with base model: %s. Please submit a quota increase request. "+
			"https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.", metric, model)}
}

// vertexNotFound is Vertex AI's 404 of a model the project cannot use.
// https://github.com/truefoundry/models/pull/946; https://github.com/genkit-ai/genkit/issues/4688
func (s *Server) vertexNotFound(model string) vertexError {
	return vertexError{Code: http.StatusNotFound, Status: "NOT_FOUND",
		Message: fmt.Sprintf("Publisher Model `projects/%s/locations/%s/%s/%s` was not found or your project does not have access to it. "+
			"Please ensure you are using a valid model version. For more information, see: "+
			"https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions", s.vertex.project, s.vertex.location, vertexPublisher, model)}
}

// vertexPermissionDenied is Vertex AI's 403 for a project or location the
// caller has no access to (the path's, not the Server's).
// https://github.com/rpurinton/gemini-php/issues/4; https://github.com/rpurinton/gemini-php/issues/2
func vertexPermissionDenied(r *http.Request) vertexError {
	_, resource, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/") // drop the version
	resource, _, _ = strings.Cut(resource, ":")
	return vertexError{Code: http.StatusForbidden, Status: "PERMISSION_DENIED",
		Message: "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/" + resource + "' (or it may not exist)."}
}

// vertexUnauthenticated is the 401 of a request without valid credentials.
func vertexUnauthenticated() vertexError {
	return vertexError{Code: http.StatusUnauthorized, Status: "UNAUTHENTICATED",
		Message: "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. " +
			"See https://developers.google.com/identity/sign-in/web/devconsole-project."}
}

// writeVertexFault writes Vertex AI's body for the faults whose body differs
// from the Gemini API's, and reports whether it did.
func (s *Server) writeVertexFault(w http.ResponseWriter, rt route, f Fault, model string) bool {
	metric := vertexRequestsMetric
	if rt.verb == VerbEmbed {
		metric = vertexEmbedMetric
	}
	switch f {
	case ResourceExhausted:
		writeVertexError(w, vertexResourceExhausted())
	case RateLimitMinute, RateLimitTokens, DailyAndMinute:
		writeVertexError(w, vertexQuotaExceeded(metric, model))
	case NotFound:
		writeVertexError(w, s.vertexNotFound(model))
	default:
		return false
	}
	return true
}

// computeTokens answers Vertex AI's computeTokens: one tokensInfo per
// content, in order, with its role, its tokens (base64 in JSON, as bytes
// are) and their ids (int64 as JSON strings, as Vertex AI sends them), e.g.
//
//	{"tokensInfo":[{"tokens":["SGVs","bG8h"],"tokenIds":["90211","1804"],"role":"user"}]}
//
// The tokens are the content's text in runs of 4 characters, so that their
// number is what countTokens answers for the same content.
func computeTokens(w http.ResponseWriter, body []byte) {
	var req struct {
		Contents []*genai.Content `json:"contents"`
	}
	if err := json.Unmarshal(body, &req); err != nil || len(req.Contents) == 0 {
		writeError(w, invalidArgument(invalidArgumentMessage))
		return
	}
	type tokensInfo struct {
		Tokens   [][]byte `json:"tokens"`
		TokenIDs []string `json:"tokenIds"`
		Role     string   `json:"role,omitempty"`
	}
	out := struct {
		TokensInfo []tokensInfo `json:"tokensInfo"`
	}{TokensInfo: make([]tokensInfo, 0, len(req.Contents))}
	for _, c := range req.Contents {
		info := tokensInfo{Tokens: [][]byte{}, TokenIDs: []string{}}
		if c != nil {
			info.Role = c.Role
		}
		runes := []rune(text(c))
		for i := 0; i < len(runes); i += 4 {
			tok := []byte(string(runes[i:min(i+4, len(runes))]))
			h := fnv.New32a()
			_, _ = h.Write(tok) // a hash never fails to write
			info.Tokens = append(info.Tokens, tok)
			info.TokenIDs = append(info.TokenIDs, strconv.FormatUint(uint64(h.Sum32()%vocabulary), 10))
		}
		out.TokensInfo = append(out.TokensInfo, info)
	}
	writeJSON(w, http.StatusOK, out)
}

// vocabulary bounds the fake's token ids, as a tokenizer's vocabulary
// (Gemini's has 256k entries) bounds real ones.
const vocabulary = 262144
