package geminitest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The Batch API's methods, as Hits counts them: create under the job's
// model, get, cancel and delete under the model of the job they name (""
// for a job the server does not know), list under "".
const (
	VerbBatchCreate Verb = "batchGenerateContent"
	VerbBatchGet    Verb = "batches.get"
	VerbBatchList   Verb = "batches.list"
	VerbBatchCancel Verb = "batches.cancel"
	VerbBatchDelete Verb = "batches.delete"
)

// BatchEnd is how a scripted batch job ends. The zero value is
// BatchSucceeded.
type BatchEnd int

const (
	// BatchSucceeded: BATCH_STATE_SUCCEEDED, a result for every request
	// (a response, or the per-request error BatchScript.Each chose).
	BatchSucceeded BatchEnd = iota
	// BatchFailed: BATCH_STATE_FAILED once BatchScript.FailAfter of its
	// requests are answered. Those keep their results (the output lists
	// them, and only them); the others have none. The operation's error
	// is a 500 INTERNAL, which the SDK does not map (BatchJob.Error stays
	// nil on the Gemini API, as against the real service).
	BatchFailed
	// BatchExpired: BATCH_STATE_EXPIRED, without results, as the real
	// service does for a job still pending or running after 48h.
	BatchExpired
)

// DefaultBatchLimit is how many batch jobs a Server holds pending or
// running at once across its models when BatchScript.Limit is 0: the
// Gemini API's 100 concurrent batches. Past it, create answers a 429
// RESOURCE_EXHAUSTED.
const DefaultBatchLimit = 100

// BatchScript decides the batch jobs of a model, in fake time inside a
// testing/synctest bubble: a job is BATCH_STATE_PENDING for Queue after its
// create, then BATCH_STATE_RUNNING for Run (batchStats counting its
// requests done in proportion), then ends as End says. A job cancelled
// before it ended is BATCH_STATE_CANCELLED, without results. The zero value
// is a job pending 1 minute, running 10 and succeeding, every request
// answered with the model's text.
type BatchScript struct {
	Queue time.Duration // PENDING for; 0: 1 minute
	Run   time.Duration // RUNNING for; 0: 10 minutes
	End   BatchEnd
	// FailAfter is, for BatchFailed, the fraction of the job's requests
	// (rounded down) answered before it fails: 0.5 fails it halfway.
	FailAfter float64
	// Each, when not nil, decides the result of the request at index (in
	// the job): OK (or a step with Text or PromptTokens) answers it as
	// generateContent would; a quiet fault answers the fault's 200 body; an
	// error fault gives the request the code and message of the fault's
	// error body, without details (a per-request error with object details
	// makes the SDK's Get fail to decode). Other faults answer OK.
	Each func(index int) Step
	// Control are the answers of the next create, get, cancel and delete
	// requests of the model's jobs, one request each, in order: OK (a
	// normal answer), an error fault, or DropBeforeHeaders; each step's
	// Latency delays its answer. After the last, they answer normally.
	Control []Step
	// Limit is the concurrent jobs (pending or running, every model's)
	// past which this model's create answers a 429; 0: DefaultBatchLimit.
	Limit int
}

// ScriptBatch sets the script of model's batch jobs created from now on,
// and replaces its Control steps not yet answered. Jobs already created
// keep theirs. It panics if the server has no such model, and on a Control
// step that is not OK, an error fault or DropBeforeHeaders.
func (s *Server) ScriptBatch(model string, b BatchScript) {
	for _, st := range b.Control {
		if st.Fault != OK && st.Fault != DropBeforeHeaders && !isErrorFault(st.Fault) {
			panic("geminitest: ScriptBatch Control step " + st.Fault.String() + ": use OK, an error fault or DropBeforeHeaders")
		}
	}
	s.mu.Lock()
	_, ok := s.models[model]
	s.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("geminitest: ScriptBatch for unknown model %q", model))
	}
	b.Control = slices.Clone(b.Control)
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	if s.batch.scripts == nil {
		s.batch.scripts = make(map[string]BatchScript)
	}
	s.batch.scripts[model] = b
}

// BatchJobs returns the names of the batch jobs the server holds
// (batches/...), deleted ones left out, in the order they were created.
func (s *Server) BatchJobs() []string {
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	var names []string
	for _, j := range s.batch.jobs {
		if !j.deleted {
			names = append(names, j.name)
		}
	}
	return names
}

// batchSite is the Batch API's state of a Server. Its zero value holds no
// job and no script.
type batchSite struct {
	mu      sync.Mutex // guards scripts, jobs
	scripts map[string]BatchScript
	jobs    []*batchJob // in creation order; a deleted job stays, marked
}

// reset forgets every job and script.
func (b *batchSite) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scripts, b.jobs = nil, nil
}

// batchJob is one job. Its fields are guarded by batchSite.mu, its results
// are set once at create and never modified.
type batchJob struct {
	name, model, display string
	script               BatchScript
	created              time.Time
	cancelled            time.Time // zero: not cancelled
	deleted              bool
	results              []json.RawMessage // one inlined response per request, in order
}

// state returns the job's state at now, when it ended (zero while it runs)
// and how many requests are done.
func (j *batchJob) state(now time.Time) (state string, end time.Time, done int) {
	queue, run := j.script.Queue, j.script.Run
	if queue <= 0 {
		queue = time.Minute
	}
	if run <= 0 {
		run = 10 * time.Minute
	}
	n := len(j.results)
	started, finished := j.created.Add(queue), j.created.Add(queue+run)
	progress := func(at time.Time) int {
		if !at.After(started) {
			return 0
		}
		return int(int64(n) * int64(at.Sub(started)) / int64(run))
	}
	failAt := int(float64(n) * j.script.FailAfter)
	ended := func(at time.Time) bool {
		return !at.Before(finished) || (j.script.End == BatchFailed && progress(at) >= failAt)
	}
	if !j.cancelled.IsZero() && !ended(j.cancelled) {
		return "BATCH_STATE_CANCELLED", j.cancelled, 0
	}
	switch {
	case now.Before(started):
		return "BATCH_STATE_PENDING", time.Time{}, 0
	case !ended(now):
		return "BATCH_STATE_RUNNING", time.Time{}, progress(now)
	case j.script.End == BatchFailed:
		at := started.Add(time.Duration(int64(run) * int64(failAt) / int64(max(n, 1))))
		return "BATCH_STATE_FAILED", at, failAt
	case j.script.End == BatchExpired:
		return "BATCH_STATE_EXPIRED", finished, 0
	}
	return "BATCH_STATE_SUCCEEDED", finished, n
}

// Wire shapes of the Batch API (google.longrunning.Operation holding a
// GenerateContentBatch), as the Gemini API sends them.
type (
	batchOperation struct {
		Name     string          `json:"name"`
		Metadata batchMetadata   `json:"metadata"`
		Done     bool            `json:"done,omitempty"`
		Error    *apiError       `json:"error,omitempty"`
		Response json.RawMessage `json:"response,omitempty"`
	}
	batchMetadata struct {
		Type        string       `json:"@type"`
		Model       string       `json:"model"`
		DisplayName string       `json:"displayName"`
		CreateTime  string       `json:"createTime"`
		UpdateTime  string       `json:"updateTime"`
		EndTime     string       `json:"endTime,omitempty"`
		BatchStats  batchStats   `json:"batchStats"`
		State       string       `json:"state"`
		Name        string       `json:"name"`
		Output      *batchOutput `json:"output,omitempty"`
	}
	batchStats struct {
		RequestCount           string `json:"requestCount"`
		SuccessfulRequestCount string `json:"successfulRequestCount,omitempty"`
		FailedRequestCount     string `json:"failedRequestCount,omitempty"`
		PendingRequestCount    string `json:"pendingRequestCount,omitempty"`
	}
	batchOutput struct {
		Type             string `json:"@type,omitempty"`
		InlinedResponses struct {
			InlinedResponses []json.RawMessage `json:"inlinedResponses"`
		} `json:"inlinedResponses"`
	}
	inlinedResult struct {
		Response *response      `json:"response,omitempty"`
		Error    *batchError    `json:"error,omitempty"`
		Metadata map[string]any `json:"metadata,omitempty"`
	}
	batchError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	batchCreate struct {
		Batch struct {
			DisplayName string `json:"displayName"`
			InputConfig struct {
				FileName string `json:"fileName"`
				Requests struct {
					Requests []struct {
						Request  generateRequest `json:"request"`
						Metadata map[string]any  `json:"metadata"`
					} `json:"requests"`
				} `json:"requests"`
			} `json:"inputConfig"`
		} `json:"batch"`
	}
)

const (
	typeBatch       = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatch"
	typeBatchOutput = "type.googleapis.com/google.ai.generativelanguage.v1main.GenerateContentBatchOutput"
)

// wire returns j as an Operation at now.
func (j *batchJob) wire(now time.Time) batchOperation {
	state, end, done := j.state(now)
	n := len(j.results)
	op := batchOperation{Name: j.name, Metadata: batchMetadata{
		Type: typeBatch, Model: "models/" + j.model, DisplayName: j.display, Name: j.name, State: state,
		CreateTime: stamp3339(j.created), UpdateTime: stamp3339(now),
		BatchStats: batchStats{RequestCount: strconv.Itoa(n)},
	}}
	if !end.IsZero() {
		op.Metadata.UpdateTime, op.Metadata.EndTime = stamp3339(end), stamp3339(end)
		op.Done = true
	}
	var ok, failed int
	for _, r := range j.results[:done] {
		if strings.HasPrefix(string(r), `{"error"`) {
			failed++
		} else {
			ok++
		}
	}
	if pending := n - done; pending > 0 && op.Done {
		failed += pending
	} else if pending > 0 {
		op.Metadata.BatchStats.PendingRequestCount = strconv.Itoa(pending)
	}
	if ok > 0 {
		op.Metadata.BatchStats.SuccessfulRequestCount = strconv.Itoa(ok)
	}
	if failed > 0 && state != "BATCH_STATE_CANCELLED" && state != "BATCH_STATE_EXPIRED" {
		op.Metadata.BatchStats.FailedRequestCount = strconv.Itoa(failed)
	}
	switch state {
	case "BATCH_STATE_SUCCEEDED", "BATCH_STATE_FAILED":
		out := &batchOutput{Type: typeBatchOutput}
		out.InlinedResponses.InlinedResponses = j.results[:done]
		op.Metadata.Output = out
		if state == "BATCH_STATE_FAILED" {
			e := internal()
			op.Error = &e
		} else {
			b, _ := json.Marshal(out) // marshals plain data
			op.Response = b
		}
	case "BATCH_STATE_EXPIRED":
		e := apiError{Code: 504, Status: "DEADLINE_EXCEEDED", Message: "The batch expired before it was processed."}
		op.Error = &e
	case "BATCH_STATE_CANCELLED":
		e := apiError{Code: 499, Status: "CANCELLED", Message: "The batch was cancelled."}
		op.Error = &e
	}
	return op
}

func stamp3339(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// serveBatch serves the Batch API's routes of the Gemini API, and reports
// whether r was one: POST /v1beta/models/{model}:batchGenerateContent, GET
// /v1beta/batches (paged), GET and DELETE /v1beta/batches/{id}, POST
// /v1beta/batches/{id}:cancel.
func (s *Server) serveBatch(w http.ResponseWriter, r *http.Request) bool {
	if s.vertex != nil {
		return false
	}
	path := r.URL.Path
	if model, ok := strings.CutSuffix(strings.TrimPrefix(path, "/v1beta/models/"), ":"+string(VerbBatchCreate)); ok && model != path && r.Method == http.MethodPost {
		s.createBatch(w, r, model)
		return true
	}
	if path == "/v1beta/batches" && r.Method == http.MethodGet {
		s.record(route{verb: VerbBatchList}, Request{Verb: VerbBatchList, Header: r.Header.Clone(), At: time.Now()}, false)
		if !authorized(r) {
			writeError(w, apiKeyInvalid())
			return true
		}
		s.listBatches(w, r)
		return true
	}
	rest, ok := strings.CutPrefix(path, "/v1beta/batches/")
	if !ok || rest == "" || strings.Contains(rest, "/") {
		return false
	}
	id, cancel := strings.CutSuffix(rest, ":cancel")
	var verb Verb
	switch {
	case cancel && r.Method == http.MethodPost:
		verb = VerbBatchCancel
	case !cancel && r.Method == http.MethodGet:
		verb = VerbBatchGet
	case !cancel && r.Method == http.MethodDelete:
		verb = VerbBatchDelete
	default:
		return false
	}
	s.batchOp(w, r, verb, "batches/"+id)
	return true
}

// control takes model's next Control step and answers it when it is not
// OK; it reports whether it answered.
func (s *Server) control(w http.ResponseWriter, r *http.Request, model string) bool {
	s.batch.mu.Lock()
	b := s.batch.scripts[model]
	var step Step
	if len(b.Control) > 0 {
		step, b.Control = b.Control[0], b.Control[1:]
		s.batch.scripts[model] = b
	}
	s.batch.mu.Unlock()
	if sleep(r.Context(), step.Latency) != nil {
		return true // the client is gone
	}
	switch {
	case step.Fault == DropBeforeHeaders:
		panic(http.ErrAbortHandler)
	case isErrorFault(step.Fault):
		s.mu.Lock()
		m := s.models[model].m
		s.mu.Unlock()
		writeFault(w, step, m)
		return true
	}
	return false
}

// createBatch answers batchGenerateContent: the job is created with every
// request's result decided now, and answered as its Operation, pending.
func (s *Server) createBatch(w http.ResponseWriter, r *http.Request, model string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	now := time.Now()
	s.record(route{model: model, verb: VerbBatchCreate}, Request{Verb: VerbBatchCreate, Body: body, Header: r.Header.Clone(), At: now}, false)
	var req batchCreate
	switch {
	case !authorized(r):
		writeError(w, apiKeyInvalid())
		return
	case !s.listed(model):
		writeError(w, notFound(model))
		return
	case s.control(w, r, model):
		return
	case json.Unmarshal(body, &req) != nil:
		writeError(w, invalidArgument(invalidArgumentMessage))
		return
	case req.Batch.InputConfig.FileName != "":
		writeError(w, invalidArgument("geminitest serves batches of inlined requests only."))
		return
	case len(req.Batch.InputConfig.Requests.Requests) == 0:
		writeError(w, invalidArgument("* BatchGenerateContentRequest.batch.input_config: input_config is required.\n"))
		return
	}
	s.mu.Lock()
	m := s.models[model].m
	s.mu.Unlock()

	s.batch.mu.Lock()
	script := s.batch.scripts[model]
	limit, running := script.Limit, 0
	if limit <= 0 {
		limit = DefaultBatchLimit
	}
	for _, j := range s.batch.jobs {
		if st, end, _ := j.state(now); end.IsZero() && st != "BATCH_STATE_CANCELLED" && !j.deleted {
			running++
		}
	}
	s.batch.mu.Unlock()
	if running >= limit {
		writeError(w, apiError{Code: 429, Status: "RESOURCE_EXHAUSTED",
			Message: fmt.Sprintf("You have reached the limit of %d concurrent batches. Please wait for a batch to finish.", limit)})
		return
	}

	reqs := req.Batch.InputConfig.Requests.Requests
	j := &batchJob{model: model, display: req.Batch.DisplayName, script: script, created: now, results: make([]json.RawMessage, len(reqs))}
	j.script.Control = nil
	for i, rq := range reqs {
		step := Step{}
		if script.Each != nil {
			step = script.Each(i)
		}
		res := inlinedResult{Metadata: rq.Metadata}
		if isErrorFault(step.Fault) {
			rec := httptest.NewRecorder()
			writeFault(rec, step, m)
			var env struct {
				Error batchError `json:"error"`
			}
			_ = json.Unmarshal(rec.Body.Bytes(), &env) // a non-JSON body keeps its status code alone
			if env.Error.Code == 0 {
				env.Error = batchError{Code: rec.Code, Message: http.StatusText(rec.Code)}
			}
			res.Error = &env.Error
		} else {
			a := answer{model: m, step: step, promptTokens: estimateTokens(rq.Request.Contents),
				responseID: "fake-" + strconv.FormatUint(s.responses.Add(1), 36)}
			var resp response
			switch {
			case isQuietFault(step.Fault):
				resp = a.quiet()
			default:
				a.step.Parts, a.step.Continuation = nil, false
				a.plan(rq.Request.Contents, nil)
				resp = a.chunk(a.text, utf8.RuneCountInString(a.text), true)
			}
			res.Response = &resp
		}
		b, err := json.Marshal(res)
		if err != nil {
			panic("geminitest: marshal batch result: " + err.Error())
		}
		j.results[i] = b
	}
	s.batch.mu.Lock()
	j.name = "batches/fake" + strconv.Itoa(len(s.batch.jobs)+1)
	s.batch.jobs = append(s.batch.jobs, j)
	op := j.wire(now)
	s.batch.mu.Unlock()
	writeJSON(w, http.StatusOK, op)
}

// batchOp answers get, cancel and delete of the job name.
func (s *Server) batchOp(w http.ResponseWriter, r *http.Request, verb Verb, name string) {
	now := time.Now()
	s.batch.mu.Lock()
	var j *batchJob
	for _, x := range s.batch.jobs {
		if x.name == name && !x.deleted {
			j = x
		}
	}
	model := ""
	if j != nil {
		model = j.model
	}
	s.batch.mu.Unlock()
	s.record(route{model: model, verb: verb}, Request{Verb: verb, Header: r.Header.Clone(), At: now}, false)
	switch {
	case !authorized(r):
		writeError(w, apiKeyInvalid())
		return
	case j == nil:
		writeError(w, apiError{Code: 404, Status: "NOT_FOUND", Message: "Requested entity was not found."})
		return
	case s.control(w, r, model):
		return
	}
	now = time.Now() // after the Control step's latency
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	switch verb {
	case VerbBatchCancel:
		if _, end, _ := j.state(now); end.IsZero() {
			j.cancelled = now
		}
		writeJSON(w, http.StatusOK, struct{}{})
	case VerbBatchDelete:
		j.deleted = true
		writeJSON(w, http.StatusOK, struct{}{})
	default:
		writeJSON(w, http.StatusOK, j.wire(now))
	}
}

// listBatches answers batches.list: the jobs not deleted, newest first,
// paged by pageSize (default 50, at most 1000) and pageToken.
func (s *Server) listBatches(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	size, start := defaultPageSize, 0
	if n, err := strconv.Atoi(q.Get("pageSize")); err == nil && n > 0 {
		size = min(n, maxPageSize)
	}
	if v := q.Get("pageToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, invalidArgument("Invalid page token."))
			return
		}
		start = n
	}
	now := time.Now()
	s.batch.mu.Lock()
	var all []batchOperation
	for _, j := range slices.Backward(s.batch.jobs) {
		if !j.deleted {
			all = append(all, j.wire(now))
		}
	}
	s.batch.mu.Unlock()
	page := map[string]any{}
	if start < len(all) {
		end := min(start+size, len(all))
		page["operations"] = all[start:end]
		if end < len(all) {
			page["nextPageToken"] = strconv.Itoa(end)
		}
	}
	writeJSON(w, http.StatusOK, page)
}
