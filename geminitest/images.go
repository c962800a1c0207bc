package geminitest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The image and video routes, as the genai SDK (v1.77.0, models.go and
// operations.go) sends them:
//
//   - Imagen on Vertex AI (a Server made by NewVertex): POST
//     .../publishers/google/models/{model}:predict, whose body's instances
//     carry a prompt, an image, reference or product images (generateImages,
//     editImage, upscaleImage, recontextImage, segmentImage: the SDK sends
//     them only to Vertex AI), counted as VerbImages. An embedding predict
//     (instances with a "content") stays VerbEmbed.
//   - Veo on the Gemini API: POST /v1beta/models/{model}:predictLongRunning
//     (generateVideos), counted as VerbVideos, answers a long-running
//     operation {"name":"models/{model}/operations/{id}","done":false}; GET
//     /v1beta/models/{model}/operations/{id} (operations.get, counted as
//     VerbOperation) answers it done, with one generated video per
//     numberOfVideos, once VideoRenderTime has passed since it started.
//
// The model's next step decides each predict and predictLongRunning as it
// decides an embedding: its latency and error faults apply (Vertex AI's 429
// of an image model names the online_prediction_requests_per_base_model
// quota), its quiet and stream faults do not. Polls take no step.

// The image and video verbs.
const (
	VerbImages    Verb = "predict"
	VerbVideos    Verb = "predictLongRunning"
	VerbOperation Verb = "operations.get"
)

// VideoRenderTime is how long after generateVideos its operation is done.
const VideoRenderTime = 10 * time.Second

// fakeImage is the bytes of every image the fake answers: a PNG signature,
// enough for a client that checks the MIME type.
var fakeImage = base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\ngeminitest"))

// vertexImageMetric is the Vertex AI quota of Imagen requests, as named in
// its 429s to predict requests (https://github.com/cg-dot/vertexai-cf-workers/issues/18,
// https://github.com/langgenius/dify/issues/13830).
const vertexImageMetric = "aiplatform.googleapis.com/online_prediction_requests_per_base_model"

// serveMedia serves the image and video routes and reports whether r was
// one of them; ServeHTTP serves everything else.
func (s *Server) serveMedia(w http.ResponseWriter, r *http.Request) bool {
	if s.vertex != nil {
		rt, ok := s.parseVertexRoute(r)
		if !ok || rt.embedAs != verbPredict {
			return false
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return true // the client is gone
		}
		var req imageRequest
		if json.Unmarshal(body, &req) != nil || len(req.Instances) == 0 || req.Instances[0]["content"] != nil {
			r.Body = io.NopCloser(bytes.NewReader(body)) // an embedding: ServeHTTP's
			return false
		}
		rt.verb, rt.embedAs = VerbImages, ""
		s.record(rt, Request{Verb: VerbImages, Body: body, Header: r.Header.Clone(), At: time.Now()}, false)
		switch {
		case !vertexAuthorized(r):
			writeVertexError(w, vertexUnauthenticated())
		case rt.foreign:
			writeVertexError(w, vertexPermissionDenied(r))
		case !s.listed(rt.model):
			writeVertexError(w, s.vertexNotFound(rt.model))
		case s.mediaFault(w, r, rt):
		default:
			writeJSON(w, http.StatusOK, req.predictions())
		}
		return true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1beta/models/")
	if !ok {
		return false
	}
	model, verb, isVerb := strings.Cut(rest, ":")
	opModel, op, isOp := strings.Cut(rest, "/operations/")
	switch {
	case isVerb && verb == string(VerbVideos) && r.Method == http.MethodPost && !strings.Contains(model, "/"):
		s.generateVideos(w, r, model)
	case isOp && r.Method == http.MethodGet && op != "" && !strings.ContainsAny(opModel+op, "/:"):
		s.record(route{model: opModel, verb: VerbOperation}, Request{Verb: VerbOperation, Header: r.Header.Clone(), At: time.Now()}, false)
		if !authorized(r) {
			writeError(w, apiKeyInvalid())
			return true
		}
		s.pollVideos(w, opModel, op)
	default:
		return false
	}
	return true
}

// mediaFault answers the model's next step when it is a fault, and reports
// whether it did.
func (s *Server) mediaFault(w http.ResponseWriter, r *http.Request, rt route) bool {
	s.mu.Lock()
	st := s.models[rt.model]
	m := st.m
	step, idx, decide := st.next()
	s.mu.Unlock()
	if decide != nil {
		step = decide(Request{Verb: rt.verb, At: time.Now()}, idx)
	}
	if sleep(r.Context(), step.Latency) != nil {
		return true
	}
	switch {
	case step.Fault == DropBeforeHeaders:
		panic(http.ErrAbortHandler)
	case !isErrorFault(step.Fault):
		return false
	case rt.vertex && (step.Fault == RateLimitMinute || step.Fault == RateLimitTokens || step.Fault == DailyAndMinute):
		writeVertexError(w, vertexQuotaExceeded(vertexImageMetric, m.Name))
	case !(rt.vertex && s.writeVertexFault(w, rt, step.Fault, m.Name)):
		writeFault(w, step, m)
	}
	return true
}

// imageRequest is the part of a predict body the fake reads.
type imageRequest struct {
	Instances  []map[string]any `json:"instances"`
	Parameters struct {
		SampleCount int    `json:"sampleCount"`
		Mode        string `json:"mode"`
	} `json:"parameters"`
}

// predictions answers an image predict: sampleCount images (default 1), or,
// for a segmentation (an image without a prompt, not an upscale), one mask
// with its labels.
func (req imageRequest) predictions() any {
	type prediction struct {
		MimeType string           `json:"mimeType"`
		Bytes    string           `json:"bytesBase64Encoded"`
		Labels   []map[string]any `json:"labels,omitempty"`
	}
	n := max(req.Parameters.SampleCount, 1)
	in := req.Instances[0]
	segment := in["image"] != nil && in["prompt"] == nil && req.Parameters.Mode != "upscale"
	if segment || req.Parameters.Mode == "upscale" {
		n = 1
	}
	out := struct {
		Predictions []prediction `json:"predictions"`
	}{Predictions: make([]prediction, n)}
	for i := range out.Predictions {
		out.Predictions[i] = prediction{MimeType: "image/png", Bytes: fakeImage}
		if segment {
			// score is a string, as the API sends it (genai reads it with `json:",string"`)
			out.Predictions[i].Labels = []map[string]any{{"label": "foreground", "score": "0.97"}}
		}
	}
	return out
}

// generateVideos answers predictLongRunning: the operation, started now.
func (s *Server) generateVideos(w http.ResponseWriter, r *http.Request, model string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	rt := route{model: model, verb: VerbVideos}
	s.record(rt, Request{Verb: VerbVideos, Body: body, Header: r.Header.Clone(), At: time.Now()}, false)
	switch {
	case !authorized(r):
		writeError(w, apiKeyInvalid())
		return
	case !s.listed(model):
		writeError(w, notFound(model))
		return
	case s.mediaFault(w, r, rt):
		return
	}
	var req imageRequest
	_ = json.Unmarshal(body, &req)
	id := strconv.FormatInt(time.Now().UnixNano(), 36) + "-" + strconv.Itoa(max(req.Parameters.SampleCount, 1))
	writeJSON(w, http.StatusOK, map[string]any{"name": "models/" + model + "/operations/" + id, "done": false})
}

// pollVideos answers operations.get of an operation generateVideos started:
// done with its videos once VideoRenderTime has passed, else not yet done.
func (s *Server) pollVideos(w http.ResponseWriter, model, id string) {
	started, count, ok := strings.Cut(id, "-")
	at, err1 := strconv.ParseInt(started, 36, 64)
	n, err2 := strconv.Atoi(count)
	if !ok || err1 != nil || err2 != nil {
		writeError(w, apiError{Code: http.StatusNotFound, Status: "NOT_FOUND", Message: "Operation not found: models/" + model + "/operations/" + id})
		return
	}
	name := "models/" + model + "/operations/" + id
	if time.Since(time.Unix(0, at)) < VideoRenderTime {
		writeJSON(w, http.StatusOK, map[string]any{"name": name, "done": false})
		return
	}
	samples := make([]map[string]any, n)
	for i := range samples {
		samples[i] = map[string]any{"video": map[string]any{"uri": "https://generativelanguage.googleapis.com/v1beta/files/" + id + "-" + strconv.Itoa(i) + ":download?alt=media"}}
	}
	writeJSON(w, http.StatusOK, map[string]any{"name": name, "done": true, "response": map[string]any{
		"@type":                 "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",
		"generateVideoResponse": map[string]any{"generatedSamples": samples},
	}})
}
