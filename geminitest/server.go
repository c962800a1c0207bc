package geminitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"
)

// Key is the only API key the fake accepts (header x-goog-api-key, or the
// key query parameter). Any other key, or none, is answered with the real
// 400 API_KEY_INVALID body, so a real key that leaks into a test fails loudly.
const Key = "fake-test-key"

// BaseURL is the base URL to give the SDK with the in-memory transport. The
// host never resolves: only Transport can reach it.
const BaseURL = "http://geminitest.invalid"

// Verb is an API method of a model, as it appears after the colon in the
// URL path; VerbGet and VerbList are the two GET methods. The zero value is
// no verb.
type Verb string

// The verbs the fake serves.
const (
	VerbGenerate    Verb = "generateContent"
	VerbStream      Verb = "streamGenerateContent"
	VerbCountTokens Verb = "countTokens"
	VerbEmbed       Verb = "batchEmbedContents"
	VerbGet         Verb = "get"
	VerbList        Verb = "list"

	// VerbComputeTokens is Vertex AI's computeTokens (the tokens
	// themselves, not their count), served by a Server made by NewVertex
	// only: the Gemini API has no such method.
	VerbComputeTokens Verb = "computeTokens"
)

// Server is an in-process Gemini API. It implements http.Handler for
// httptest.Server and offers an in-memory Transport for testing/synctest.
// A Server is safe for concurrent use. Create it with New; the zero value is
// not usable.
type Server struct {
	mu         sync.Mutex // guards models, order, hits, requests, listScript
	models     map[string]*modelState
	order      []string // model names in the order they were first added
	hits       map[hitKey]int
	requests   map[string][]Request
	listScript []Step      // the scripted answers of the next models.list requests (ScriptList)
	vertex     *vertexSite // the project and location of a Vertex AI Server (NewVertex); nil: the Gemini API
	batch      batchSite   // the Batch API's jobs and scripts (batch.go), under a mutex of its own

	responses atomic.Uint64 // numbers responseId values
}

type hitKey struct {
	model string
	verb  Verb
}

// New returns a Server that serves models. A later model with the same Name
// replaces an earlier one.
func New(models ...Model) *Server {
	s := &Server{
		models:   make(map[string]*modelState),
		hits:     make(map[hitKey]int),
		requests: make(map[string][]Request),
	}
	for _, m := range models {
		s.SetModel(m)
	}
	return s
}

// SetModel adds m, or replaces the model of the same name. A replaced model
// starts afresh (script position, fault draws, request index, quota usage);
// hit counters and request logs are kept.
func (s *Server) SetModel(m Model) {
	st := newModelState(m)
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.models[m.Name]; !ok {
		s.order = append(s.order, m.Name)
	}
	s.models[m.Name] = st
}

// Script replaces the fixed script of model and rewinds it to its first
// step. It panics if the server has no such model.
func (s *Server) Script(model string, steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.models[model]
	if !ok {
		panic(fmt.Sprintf("geminitest: Script for unknown model %q", model))
	}
	st.m.Script, st.pos = slices.Clone(steps), 0
}

// ScriptList makes the next models.list requests answer with steps, one
// request each, in order; after the last, list answers normally again. Each
// step's Latency delays its answer; its Fault is OK (a normal page), an
// error fault (a 5xx, a quota 429, an auth 4xx, ...) or DropBeforeHeaders.
// It replaces the steps not yet answered; Reset forgets them. It panics on
// any other fault.
func (s *Server) ScriptList(steps ...Step) {
	for _, st := range steps {
		if st.Fault != OK && st.Fault != DropBeforeHeaders && !isErrorFault(st.Fault) {
			panic("geminitest: ScriptList with " + st.Fault.String() + ": use OK, an error fault or DropBeforeHeaders")
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listScript = slices.Clone(steps)
}

// Hits returns how many requests for model and verb the server received,
// rejected ones included (bad key, unknown model, quota). List requests are
// counted under the model "".
func (s *Server) Hits(model string, verb Verb) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[hitKey{model, verb}]
}

// Total returns the generate plus stream hits of model.
func (s *Server) Total(model string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[hitKey{model, VerbGenerate}] + s.hits[hitKey{model, VerbStream}]
}

// Requests returns a copy of every generate and stream request received for
// model, rejected ones included, in arrival order.
func (s *Server) Requests(model string) []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests[model])
}

// FullText returns the answer text model gives for a normal success (its
// Text, or the default), or "" if the server has no such model.
func (s *Server) FullText(model string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st, ok := s.models[model]; ok {
		return st.m.Text
	}
	return ""
}

// Reset zeroes the hit counters and request logs, rewinds every script and
// fault draw, forgets all emulated quota usage, the ScriptList steps not
// yet answered, and every batch job and ScriptBatch script. Models stay.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.hits)
	clear(s.requests)
	s.listScript = nil
	for _, st := range s.models {
		st.rewind()
	}
	s.batch.reset()
}

// ClientConfig returns a config for genai.NewClient that reaches s through
// its in-memory transport, with Key, the Gemini API backend and BaseURL set
// explicitly so that nothing is read from the environment. For a Server made
// by NewVertex it has the Vertex AI backend, the Server's project and
// location, and an HTTP client that sends Key as a bearer token instead (so
// the SDK looks up no Google credentials).
func (s *Server) ClientConfig() *genai.ClientConfig {
	if s.vertex != nil {
		return s.vertexConfig(s.HTTPClient(), BaseURL)
	}
	return &genai.ClientConfig{
		APIKey:      Key,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  s.HTTPClient(),
		HTTPOptions: genai.HTTPOptions{BaseURL: BaseURL},
	}
}

// HTTPClient returns an http.Client that reaches s through Transport, for
// code that takes an HTTP client and a base URL (BaseURL) rather than a
// genai.ClientConfig.
func (s *Server) HTTPClient() *http.Client {
	return &http.Client{Transport: s.Transport()}
}

// ClientConfigFor returns a config for genai.NewClient that reaches srv, an
// httptest.Server whose handler is a Server, over its loopback sockets, with
// Key, the Gemini API backend and srv.URL set explicitly so that nothing is
// read from the environment. Its HTTP client is srv.Client() (which trusts
// srv's certificate after StartTLS, and speaks HTTP/2 with EnableHTTP2) with
// keep-alives off: each request has its own connection, closed when its
// response ends, so no idle connection or its goroutine outlives a request
// (goleak stays quiet, and a testing/synctest bubble can end). Still, inside
// a bubble use Server.ClientConfig: fake time stands still while a goroutine
// waits on a socket. When srv's handler is a Server made by NewVertex, the
// config is a Vertex AI one, as ClientConfig's.
func ClientConfigFor(srv *httptest.Server) *genai.ClientConfig {
	hc := *srv.Client()
	if tr, ok := hc.Transport.(*http.Transport); ok {
		tr = tr.Clone()
		tr.DisableKeepAlives = true
		hc.Transport = tr
	}
	if s, ok := srv.Config.Handler.(*Server); ok && s.vertex != nil {
		return s.vertexConfig(&hc, srv.URL)
	}
	return &genai.ClientConfig{
		APIKey:      Key,
		Backend:     genai.BackendGeminiAPI,
		HTTPClient:  &hc,
		HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL},
	}
}

// ServeHTTP serves the Gemini API routes under /v1beta/models: GET list
// (paged), GET {model}, POST {model}:generateContent,
// {model}:streamGenerateContent?alt=sse, {model}:countTokens and
// {model}:batchEmbedContents; a Server made by NewVertex serves Vertex AI's
// routes instead, computeTokens among them (see there). It also serves the
// Batch API (ScriptBatch). Anything else is a 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.serveMedia(w, r) || s.serveBatch(w, r) { // images.go, batch.go
		return
	}
	rt, ok := s.parseRoute(r)
	if !ok {
		writeError(w, methodNotFound())
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client is gone
	}
	req := Request{Verb: rt.verb, Body: body, Header: r.Header.Clone(), At: time.Now()}
	var gen generateRequest
	isGen := rt.verb == VerbGenerate || rt.verb == VerbStream
	if isGen && json.Unmarshal(body, &gen) == nil {
		req.Contents = gen.Contents
	}
	s.record(rt, req, isGen)

	switch {
	case rt.vertex && !vertexAuthorized(r):
		writeVertexError(w, vertexUnauthenticated())
	case rt.foreign:
		writeVertexError(w, vertexPermissionDenied(r))
	case !rt.vertex && !authorized(r):
		writeError(w, apiKeyInvalid())
	case rt.verb == VerbList:
		s.list(w, r)
	case !s.listed(rt.model) && rt.vertex:
		writeVertexError(w, s.vertexNotFound(rt.model))
	case !s.listed(rt.model):
		writeError(w, notFound(rt.model))
	case rt.verb == VerbGet:
		s.get(w, rt.model)
	case rt.verb == VerbCountTokens:
		countTokens(w, body)
	case rt.verb == VerbComputeTokens:
		computeTokens(w, body)
	case rt.verb == VerbEmbed:
		s.embed(w, r, rt, req, body)
	case rt.verb == VerbStream && r.URL.Query().Get("alt") != "sse":
		writeError(w, invalidArgument("geminitest serves streamGenerateContent with alt=sse only."))
	case len(req.Contents) == 0:
		writeError(w, invalidArgument(invalidArgumentMessage))
	case refuse(w, req.Contents):
	default:
		s.generate(w, r, rt, req, gen.ContinuationToken)
	}
}

// route is what a request path names.
type route struct {
	model string // "" for list
	verb  Verb

	vertex  bool   // a Vertex AI path
	scoped  bool   // Vertex AI: the path names a project and location
	foreign bool   // Vertex AI: ... other than the Server's
	embedAs string // Vertex AI's embedding method: verbEmbedVertex or verbPredict
}

func (s *Server) parseRoute(r *http.Request) (route, bool) {
	if s.vertex != nil {
		return s.parseVertexRoute(r)
	}
	const prefix = "/v1beta/models"
	if r.URL.Path == prefix {
		return route{verb: VerbList}, r.Method == http.MethodGet
	}
	rest, ok := strings.CutPrefix(r.URL.Path, prefix+"/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return route{}, false
	}
	model, verb, hasVerb := strings.Cut(rest, ":")
	if !hasVerb {
		return route{model: model, verb: VerbGet}, r.Method == http.MethodGet
	}
	switch v := Verb(verb); v {
	case VerbGenerate, VerbStream, VerbCountTokens, VerbEmbed:
		return route{model: model, verb: v}, r.Method == http.MethodPost
	}
	return route{}, false
}

// record counts a hit and, for generate and stream, logs the request.
func (s *Server) record(rt route, req Request, isGen bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hits[hitKey{rt.model, rt.verb}]++
	if isGen {
		s.requests[rt.model] = append(s.requests[rt.model], req)
	}
}

func authorized(r *http.Request) bool {
	key := r.Header.Get("X-Goog-Api-Key")
	if key == "" {
		key = r.URL.Query().Get("key")
	}
	return key == Key
}

// listed reports whether the server has model and it is not Unlisted.
func (s *Server) listed(model string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.models[model]
	return ok && !st.m.Unlisted
}

// writeJSON writes v as a JSON body with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		panic("geminitest: marshal response: " + err.Error())
	}
	writeBody(w, status, "application/json; charset=UTF-8", b)
}

func writeBody(w http.ResponseWriter, status int, contentType string, b []byte) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	_, _ = w.Write(b) // a write error means the client is gone
}

func writeError(w http.ResponseWriter, e apiError) {
	writeBody(w, e.Code, "application/json; charset=UTF-8", e.body())
}
