package geminiguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
)

// Batches is the Batch API lane of a Client, for GenerateContent requests
// that can wait: they go as Batch API jobs (inlined requests), which cost
// half the standard price, run on a quota of their own and answer within
// 24 hours (most much sooner) or expire after 48.
//
// Each request to the API (a job's create, get, cancel or delete) goes
// through the call's bulkhead, a breaker of the model's own for the lane,
// and classifier-driven retries, with backoff and the server's stated
// delays, within the call timeout of WithTimeouts; not through the
// limiter, and neither refused nor cooled down by the model's quota
// cool-downs: the Batch API's quota is its own.
// A job's results are typed as GenerateContent types its answers: a
// response, or a quiet failure as a *ResponseError, or a per-request API
// error as a *ModelError that unwraps to a genai.APIError. A job that
// fails or expires, and the requests that fail for a reason of scope model
// (Classify's ScopeModel: overload, quota, a job's failure), are sent
// again, those requests only, as a job of the next model of the cascade:
// every request is answered once. Responses are priced at half the rates
// of the price table and added to the model's Stats (Tokens, Cost) and to
// WithBudget's spend; Stats.Batch counts the lane's jobs and requests. Wait
// runs in an OpenTelemetry span "generate_content {model}" (the GenAI
// conventions have no batch operation name) with the attribute
// geminiguard.lane=batch.
//
// With WithSharedState on a fleet.JobStore (redisstore's Store,
// fleet.NewMemoryState), the store knows the project's open batches: each
// batch's handle is put there when it is created and whenever it changes,
// and dropped when every request has its result or the batch is deleted,
// so that Open finds them in another process without a saved handle. A
// handle holds the batch's requests, prompts included: the store then
// keeps prompt text, readable by whoever can read the project's keys
// (redisstore: give each project a Redis user whose ACL allows only its
// keys). A store that fails or is slow fails no batch call: the handle is
// then the caller's to save, and the store is tried again at the next
// change.
//
// The lane speaks the Gemini API's batches (inlined requests); a model
// called through Vertex AI, whose batch jobs read Cloud Storage or
// BigQuery, fails Create with the SDK's error. Batches is safe for
// concurrent use; a *BatchJob is not: use one from one goroutine at a time. The zero value is not usable: get it from
// Client.Batches.
type Batches struct {
	c *Client
}

// Batches returns the Client's Batch API lane.
func (c *Client) Batches() *Batches { return &Batches{c: c} }

// BatchStats count the Batch API lane's work (Client.Batches) since New.
type BatchStats struct {
	Jobs        int64 // jobs created, resubmissions included
	Requests    int64 // requests submitted (first submissions only)
	Answered    int64 // requests answered with a response
	Failed      int64 // requests failed for good (no model left, or a failure of scope request)
	Resubmitted int64 // requests sent again to the next model
}

// batchCounters are the Client's BatchStats, in atomic counters.
type batchCounters struct {
	jobs, requests, answered, failed, resubmitted atomic.Int64
}

func (b *batchCounters) stats() BatchStats {
	return BatchStats{Jobs: b.jobs.Load(), Requests: b.requests.Load(), Answered: b.answered.Load(),
		Failed: b.failed.Load(), Resubmitted: b.resubmitted.Load()}
}

// BatchResult is the outcome of one request of a batch.
type BatchResult struct {
	// Response is the answer; nil when Err is set. A quiet failure keeps its
	// response in the *ResponseError.
	Response *genai.GenerateContentResponse
	// Err is why the request has no answer: a *ResponseError (ErrBlocked,
	// ErrEmptyResponse), a *ModelError with the per-request API error (it
	// unwraps to a genai.APIError), or a *ModelError with a *BatchJobError
	// for a job that failed, expired or was cancelled before it answered.
	Err   error
	Model string // the model of the job that answered, or failed it last
	Job   string // that job's name (batches/...)
}

// BatchJobError is why a request of a job that ended without its result has
// none: the job's state (FAILED, EXPIRED, CANCELLED). Returned as a pointer,
// inside a *ModelError whose verdict has scope model (FAILED, EXPIRED: the
// next model may answer) or request (CANCELLED).
type BatchJobError struct {
	Job   string
	Model string
	State genai.JobState
}

func (e *BatchJobError) Error() string {
	return fmt.Sprintf("geminiguard: batch job %s of model %s ended %s without this request's result", e.Job, e.Model, e.State)
}

// BatchJob is a handle on a batch submitted by Batches.Create: the Batch API
// jobs that carry its requests (a first one, then one per resubmission),
// which request each job holds, and the results read so far. Handle saves
// it; Batches.Resume picks it up in another Client or process. A BatchJob
// is not safe for concurrent use.
type BatchJob struct {
	h       batchHandle
	owner   []int  // per request: the index in h.Parts of the job that holds it, ownerPending while waiting for a resubmission
	settled []bool // per job of h.Parts: its results are read
	results []BatchResult
	spent   spend // tokens and cost of the results read by this BatchJob
}

// ownerPending marks a request waiting in batchHandle.Pending.
const ownerPending = -1

// batchHandle is what Handle saves of a BatchJob.
type batchHandle struct {
	Version  int                         `json:"version"`
	Display  string                      `json:"displayName,omitempty"`
	First    string                      `json:"first"` // the first model: its cascade is the jobs' order
	Requests []*genai.InlinedRequest     `json:"requests"`
	Parts    []batchPart                 `json:"jobs"`
	Pending  map[string][]int            `json:"pending,omitempty"` // requests to send again, by model, not yet sent
	Config   *genai.CreateBatchJobConfig `json:"-"`
}

// batchPart is one Batch API job of a BatchJob.
type batchPart struct {
	Name    string `json:"name"`
	Model   string `json:"model"`
	Indexes []int  `json:"requests"` // the index in the batch of each of its requests, in its order
}

// batchHandleVersion is the version of Handle's encoding.
const batchHandleVersion = 1

// Name returns the name of the first Batch API job (batches/...).
func (j *BatchJob) Name() string { return j.h.Parts[0].Name }

// Jobs returns the names of the Batch API jobs, in the order they were
// created.
func (j *BatchJob) Jobs() []string {
	names := make([]string, len(j.h.Parts))
	for i, p := range j.h.Parts {
		names[i] = p.Name
	}
	return names
}

// Done reports whether every request has its result.
func (j *BatchJob) Done() bool {
	for _, r := range j.results {
		if r.Response == nil && r.Err == nil {
			return false
		}
	}
	return true
}

// Results returns a copy of the results, one per request in the order of
// Create's requests; a request not yet answered has the zero BatchResult.
func (j *BatchJob) Results() []BatchResult { return slices.Clone(j.results) }

// Handle encodes j (its requests, its jobs and which request each holds,
// the requests waiting to be sent again, the display name) as JSON, for
// Batches.Resume. Results are not in it: Resume reads them again from the
// jobs; nor is the rest of Create's config, which resubmissions after a
// Resume go without. Save it after Create and after each Poll, before the
// process may stop: a job created after the last save is not known to a
// Client that resumes from it.
func (j *BatchJob) Handle() ([]byte, error) { return json.Marshal(j.h) }

// Create submits requests as a Batch API job of model ("" for the cascade's
// primary), with config's display name (a default one when none). Each
// request's Contents and Config are sent as GenerateContent sends them;
// its Model is ignored (the job's model answers). The caller's requests
// and config are never mutated. Creating a job is not idempotent: a retried
// create whose first try did reach the API makes a second job, whose
// results are never read.
//
// Errors: ErrBudgetExhausted when WithBudget's spend is reached; those of
// CountTokens for a create whose retries all failed (an open breaker of the
// model's batch endpoint among them); a refusal, as for a
// malformed request, when requests is empty or a request's contents are.
func (b *Batches) Create(ctx context.Context, model string, requests []*genai.InlinedRequest, config *genai.CreateBatchJobConfig) (*BatchJob, error) {
	c := b.c
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	if len(requests) == 0 {
		return nil, &requestError{where: "Batches.Create's requests", what: "are empty", fix: "give at least one request"}
	}
	for i, r := range requests {
		if r == nil {
			return nil, &requestError{where: fmt.Sprintf("Batches.Create's request %d", i), what: "is nil", fix: "give its contents"}
		}
		if err := checkGenerate(r.Contents, r.Config); err != nil {
			return nil, err
		}
	}
	if model == "" {
		model = c.cascade[0]
	}
	j := &BatchJob{h: batchHandle{Version: batchHandleVersion, First: strings.TrimPrefix(model, "models/"), Requests: slices.Clone(requests), Config: config}}
	if config != nil {
		j.h.Display = config.DisplayName
	}
	if j.h.Display == "" {
		j.h.Display = fmt.Sprintf("geminiguard-%d", time.Now().UnixNano())
	}
	j.results = make([]BatchResult, len(requests))
	j.owner = make([]int, len(requests))
	all := make([]int, len(requests))
	for i := range all {
		all[i] = i
	}
	if err := b.submit(ctx, j, j.h.First, all); err != nil {
		return nil, err
	}
	c.batch.requests.Add(int64(len(requests)))
	b.track(ctx, j)
	return j, nil
}

// Open returns the project's open batches that the fleet's store knows
// (WithSharedState on a fleet.JobStore), each resumed as Resume resumes
// its handle: the batches any Client of the project created and did not
// see done or delete, within 48 hours of their latest job (a Batch API
// job's expiry), at most fleet.MaxJobs, the oldest first. A handle the
// store holds that this version cannot read is left out. Waiting on one
// that another Client waits on too answers its requests in both.
//
// Errors: a refusal when the Client has no shared state or its state keeps
// no jobs; an error when the store did not answer (the Client carries on
// alone: see WithSharedState).
func (b *Batches) Open(ctx context.Context) ([]*BatchJob, error) {
	c := b.c
	if err := c.usable(ctx); err != nil {
		return nil, err
	}
	s := c.jobStore()
	if s == nil {
		return nil, &requestError{where: "Batches.Open", what: "needs a shared state that keeps jobs", fix: "use WithSharedState with a fleet.JobStore (redisstore.New, fleet.NewMemoryState)"}
	}
	var stored []fleet.StoredJob
	var serr error
	if !c.fleet.call(ctx, c, func(ctx context.Context) error {
		stored, serr = s.Jobs(ctx, c.fleet.project)
		return serr
	}) {
		if serr == nil {
			return nil, errors.New("geminiguard: Batches.Open: the shared state is unreachable; the Client carries on alone for now")
		}
		return nil, fmt.Errorf("geminiguard: Batches.Open: the shared state did not answer: %w", serr)
	}
	open := make([]*BatchJob, 0, len(stored))
	for _, sj := range stored {
		if j, err := b.Resume(ctx, sj.Handle); err == nil {
			open = append(open, j)
		}
	}
	return open, nil
}

// jobStore returns the fleet's JobStore, nil when the Client has no shared
// state or its state keeps no jobs.
func (c *Client) jobStore() fleet.JobStore {
	if c.fleet == nil {
		return nil
	}
	s, _ := c.fleet.store.(fleet.JobStore)
	return s
}

// track tells the fleet's JobStore, if any, where j stands: its handle
// while a request waits for its result, nothing once every one has it. A
// failure leaves the handle to the caller.
func (b *Batches) track(ctx context.Context, j *BatchJob) {
	c := b.c
	s := c.jobStore()
	if s == nil {
		return
	}
	if j.Done() {
		b.untrack(ctx, j)
		return
	}
	h, err := j.Handle()
	if err != nil {
		return
	}
	c.fleet.call(ctx, c, func(ctx context.Context) error {
		return s.PutJob(ctx, c.fleet.project, j.Name(), h, fleet.JobTTL)
	})
}

// untrack drops j from the fleet's JobStore, if any.
func (b *Batches) untrack(ctx context.Context, j *BatchJob) {
	c := b.c
	if s := c.jobStore(); s != nil {
		c.fleet.call(ctx, c, func(ctx context.Context) error {
			return s.DropJob(ctx, c.fleet.project, j.Name())
		})
	}
}

// Resume picks up the batch whose Handle is handle, in this Client (which
// need not be the one that created it, nor in the same process): its jobs
// are read again by the next Poll or Wait, and the requests that wait for a
// resubmission are sent then. Results already read by another Client are
// read (and priced) again here.
//
// Errors: a refusal, as for a malformed request, when handle is not a
// Handle this version of the package can read.
func (b *Batches) Resume(ctx context.Context, handle []byte) (*BatchJob, error) {
	if err := b.c.usable(ctx); err != nil {
		return nil, err
	}
	var h batchHandle
	if err := json.Unmarshal(handle, &h); err != nil || h.Version != batchHandleVersion || len(h.Parts) == 0 || len(h.Requests) == 0 {
		return nil, &requestError{where: "Batches.Resume's handle", what: "is not a batch handle of this version", fix: "pass what BatchJob.Handle returned"}
	}
	j := &BatchJob{h: h, results: make([]BatchResult, len(h.Requests)), owner: make([]int, len(h.Requests)), settled: make([]bool, len(h.Parts))}
	for p, part := range h.Parts {
		for _, i := range part.Indexes {
			if i < 0 || i >= len(j.owner) {
				return nil, &requestError{where: "Batches.Resume's handle", what: fmt.Sprintf("names request %d of %d", i, len(j.owner)), fix: "pass what BatchJob.Handle returned"}
			}
			j.owner[i] = p
		}
	}
	for _, idx := range h.Pending {
		for _, i := range idx {
			if i >= 0 && i < len(j.owner) {
				j.owner[i] = ownerPending
			}
		}
	}
	return j, nil
}

// The polls of Wait: the first after batchPollFirst, then at doubling
// intervals up to batchPollMax (a batch takes minutes to hours).
const (
	batchPollFirst = 10 * time.Second
	batchPollMax   = 2 * time.Minute
)

// Wait polls j until every request has its result, and returns the
// results, one per request in the order of Create's requests. It polls
// after 10s, then at doubling intervals up to 2 minutes. Only ctx bounds
// the wait; when it ends, j can still be polled, saved and resumed.
//
// Errors: those of Poll; the context's error when ctx ended.
func (b *Batches) Wait(ctx context.Context, j *BatchJob) (results []BatchResult, err error) {
	if err := b.c.usable(ctx); err != nil {
		return nil, err
	}
	ctx, span := b.c.tel.start(ctx, opGenerate, j.h.First) // nil when tracing is off
	if span != nil {
		span.SetAttributes(attribute.String("geminiguard.lane", "batch"), attribute.Int("geminiguard.batch.requests", len(j.results)))
		defer func() {
			span.SetAttributes(attribute.Int64("gen_ai.usage.input_tokens", j.spent.tokens.Input),
				attribute.Int64("gen_ai.usage.output_tokens", j.spent.tokens.Output+j.spent.tokens.Thinking))
			if err != nil {
				span.SetAttributes(attribute.String("error.type", errorType(err)))
				span.SetStatus(codes.Error, errorType(err))
			}
			span.End()
		}()
	}
	for delay := batchPollFirst; ; delay = min(2*delay, batchPollMax) {
		done, err := b.Poll(ctx, j)
		if err != nil {
			return nil, err
		}
		if done {
			return j.Results(), nil
		}
		if err := sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

// Poll reads every job of j not yet ended once; for each that ended it
// reads its results, and sends again, as a job of the next model of the
// cascade, the requests that failed for a reason of scope model. It
// reports whether every request has its result.
//
// Errors: ErrBudgetExhausted when a resubmission meets WithBudget's spend
// (the requests wait for the next Poll); those of CountTokens for a get or
// create whose retries all failed.
func (b *Batches) Poll(ctx context.Context, j *BatchJob) (done bool, err error) {
	if err := b.c.usable(ctx); err != nil {
		return false, err
	}
	jobs, read := len(j.h.Parts), 0
	defer func() {
		if read > 0 || len(j.h.Parts) != jobs { // j changed: results, resubmissions
			b.track(ctx, j)
		}
	}()
	if err := b.flush(ctx, j); err != nil {
		return false, err
	}
	cfg := &genai.GetBatchJobConfig{HTTPOptions: withoutSDKRetry(nil, b.c.sdkRetries)}
	for p, part := range j.h.Parts { // the resubmissions flush makes are read by the next Poll
		if j.settled[p] {
			continue
		}
		job, err := batchCall(ctx, b.c, "Batches.Get", part.Model, func(ctx context.Context, bt *genai.Batches) (*genai.BatchJob, error) {
			return bt.Get(ctx, part.Name, cfg)
		})
		if err != nil {
			return false, err
		}
		if !jobEnded(job.State) {
			continue
		}
		j.settled[p] = true
		read++
		b.settle(j, p, job)
	}
	if err := b.flush(ctx, j); err != nil {
		return false, err
	}
	return j.Done(), nil
}

// Cancel cancels every job of j not yet ended. The requests they hold end
// with a *BatchJobError of state CANCELLED (none is sent again), unless the
// job ended first; Poll or Wait read them.
//
// Errors: those of CountTokens for a cancel whose retries all failed.
func (b *Batches) Cancel(ctx context.Context, j *BatchJob) error {
	if err := b.c.usable(ctx); err != nil {
		return err
	}
	cfg := &genai.CancelBatchJobConfig{HTTPOptions: withoutSDKRetry(nil, b.c.sdkRetries)}
	for p, part := range j.h.Parts {
		if j.settled[p] {
			continue
		}
		if _, err := batchCall(ctx, b.c, "Batches.Cancel", part.Model, func(ctx context.Context, bt *genai.Batches) (struct{}, error) {
			return struct{}{}, bt.Cancel(ctx, part.Name, cfg)
		}); err != nil {
			return err
		}
	}
	clear(j.h.Pending)
	for i, o := range j.owner {
		if o == ownerPending {
			b.c.batch.failed.Add(1)
			j.results[i].Err = &ModelError{Model: j.results[i].Model, Verdict: Verdict{Class: ClassCanceled, Scope: ScopeRequest},
				Err: &BatchJobError{Job: j.results[i].Job, Model: j.results[i].Model, State: genai.JobStateCancelled}}
		}
	}
	b.track(ctx, j)
	return nil
}

// Delete deletes every job of j from the API (their results with them).
//
// Errors: those of CountTokens for a delete whose retries all failed.
func (b *Batches) Delete(ctx context.Context, j *BatchJob) error {
	if err := b.c.usable(ctx); err != nil {
		return err
	}
	cfg := &genai.DeleteBatchJobConfig{HTTPOptions: withoutSDKRetry(nil, b.c.sdkRetries)}
	for _, part := range j.h.Parts {
		if _, err := batchCall(ctx, b.c, "Batches.Delete", part.Model, func(ctx context.Context, bt *genai.Batches) (*genai.DeleteResourceJob, error) {
			return bt.Delete(ctx, part.Name, cfg)
		}); err != nil {
			return err
		}
	}
	b.untrack(ctx, j)
	return nil
}

// submit creates a job of model for the requests at indexes of j.
func (b *Batches) submit(ctx context.Context, j *BatchJob, model string, indexes []int) error {
	c := b.c
	if c.spending != nil {
		if e, _ := c.spending.check(time.Now()); e != nil {
			return e
		}
	}
	src := &genai.BatchJobSource{InlinedRequests: make([]*genai.InlinedRequest, len(indexes))}
	for k, i := range indexes {
		r := *j.h.Requests[i]
		r.Model = ""
		src.InlinedRequests[k] = &r
	}
	var cfg genai.CreateBatchJobConfig
	if j.h.Config != nil {
		cfg = *j.h.Config
	}
	cfg.DisplayName = j.h.Display
	cfg.HTTPOptions = withoutSDKRetry(cfg.HTTPOptions, c.sdkRetries)
	job, err := batchCall(ctx, c, "Batches.Create", model, func(ctx context.Context, bt *genai.Batches) (*genai.BatchJob, error) {
		return bt.Create(ctx, c.model(model).wire, src, &cfg)
	})
	if err != nil {
		return err
	}
	c.batch.jobs.Add(1)
	j.h.Parts = append(j.h.Parts, batchPart{Name: job.Name, Model: model, Indexes: indexes})
	j.settled = append(j.settled, false)
	for _, i := range indexes {
		j.owner[i] = len(j.h.Parts) - 1
	}
	return nil
}

// flush sends the requests waiting in j's Pending, a job per model.
func (b *Batches) flush(ctx context.Context, j *BatchJob) error {
	for _, model := range slices.Sorted(maps.Keys(j.h.Pending)) {
		if err := b.submit(ctx, j, model, j.h.Pending[model]); err != nil {
			return err
		}
		b.c.batch.resubmitted.Add(int64(len(j.h.Pending[model])))
		delete(j.h.Pending, model)
	}
	return nil
}

// settle reads the results of j's job p, which ended as job says: each
// request it still holds gets its result, or waits in Pending for the next
// model when it failed for a reason of scope model and the cascade has one.
func (b *Batches) settle(j *BatchJob, p int, job *genai.BatchJob) {
	c := b.c
	part := j.h.Parts[p]
	m := c.model(part.Model)
	var responses []*genai.InlinedResponse
	if job.Dest != nil {
		responses = job.Dest.InlinedResponses
	}
	at := job.EndTime
	if at.IsZero() {
		at = time.Now()
	}
	next := b.next(j.h.First, part.Model)
	for k, i := range part.Indexes {
		if j.owner[i] != p {
			continue // sent again to another model already
		}
		res := BatchResult{Model: part.Model, Job: part.Name}
		switch {
		case k < len(responses) && responses[k] != nil && responses[k].Error != nil:
			res.Err = jobError(part.Model, responses[k].Error)
		case k < len(responses) && responses[k] != nil:
			r := responses[k].Response
			if r != nil {
				j.spent.add(bill(m, r.UsageMetadata, at, batchPricing))
			}
			if res.Err = responseError(part.Model, r); res.Err == nil {
				res.Response = r
			}
		default:
			res.Err = jobEndError(part, job.State)
		}
		if res.Err != nil && next != "" && Classify(res.Err).Scope == ScopeModel {
			if j.h.Pending == nil {
				j.h.Pending = make(map[string][]int)
			}
			j.h.Pending[next] = append(j.h.Pending[next], i)
			j.owner[i] = ownerPending
			j.results[i] = BatchResult{Model: part.Model, Job: part.Name} // where it was last: for Cancel's error
			continue
		}
		if res.Err != nil {
			c.batch.failed.Add(1)
		} else {
			c.batch.answered.Add(1)
		}
		j.results[i] = res
	}
}

// next returns the model after model in the order of first's cascade; ""
// when none.
func (b *Batches) next(first, model string) string {
	order := b.c.order(first)
	for k, m := range order {
		if m.name == model && k+1 < len(order) {
			return order[k+1].name
		}
	}
	return ""
}

// batchPricing is how a batch job's responses are priced: the Batch API
// charges half the standard rates (ai.google.dev/gemini-api/docs/batch-mode:
// "50% of the standard cost"), as the Flex tier does, so cost prices them
// through Flex's ½.
const batchPricing = genai.ServiceTierFlex

// jobError is a per-request error of a job, typed as GenerateContent types
// an API error: a *ModelError with Classify's verdict of the genai.APIError
// it unwraps to. The per-request error has no status; the HTTP one of its
// code is put in.
func jobError(model string, e *genai.JobError) error {
	api := genai.APIError{Message: e.Message}
	if e.Code != nil {
		api.Code = int(*e.Code)
	}
	api.Status = canonicalStatus(api.Code)
	return &ModelError{Model: model, Verdict: Classify(api), Err: api}
}

// canonicalStatus is the canonical status the Gemini API sends with an HTTP code.
func canonicalStatus(code int) string {
	switch code {
	case 400:
		return "INVALID_ARGUMENT"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 500:
		return "INTERNAL"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	return ""
}

// jobEndError is why a request of part, which ended in state without its
// result, has none: scope model for a failed or expired job (another
// model's job may answer), request for a cancelled one.
func jobEndError(part batchPart, state genai.JobState) error {
	v := Verdict{Class: ClassServerError, Scope: ScopeModel}
	switch state {
	case genai.JobStateExpired:
		v.Class = ClassTimeout
	case genai.JobStateCancelled:
		v = Verdict{Class: ClassCanceled, Scope: ScopeRequest}
	}
	return &ModelError{Model: part.Model, Verdict: v, Err: &BatchJobError{Job: part.Name, Model: part.Model, State: state}}
}

// jobEnded reports whether a job in state s has ended: its results are
// final.
func jobEnded(s genai.JobState) bool {
	switch s {
	case genai.JobStateSucceeded, genai.JobStateFailed, genai.JobStateCancelled, genai.JobStateExpired, genai.JobStatePartiallySucceeded:
		return true
	}
	return false
}

// batchCall sends one Batch API request (named method in errors) of
// model's jobs through the call's bulkhead, the breaker of the model's
// batch endpoint and classifier-driven retries: not through the limiter,
// no cool-downs, no cascade, no Fallback.
func batchCall[R any](ctx context.Context, c *Client, method, model string, send func(ctx context.Context, bt *genai.Batches) (R, error)) (R, error) {
	return mediaCallOn(ctx, c, endpointBatch, opNone, method, model, 0, false, func(ctx context.Context, m *modelState) (R, error) {
		return send(ctx, c.batchesFor(m))
	})
}

// batchesFor returns the SDK Batches m's jobs go through: its backend's, or
// the Client's own.
func (c *Client) batchesFor(m *modelState) *genai.Batches {
	if m.via != nil {
		return m.via.sdk.Batches
	}
	return c.sdk().Batches
}

// ErrDeferred: a call marked Deferrable found no model to answer it now
// and was sent to the Batch API lane instead. The error is a
// *DeferredError carrying the job.
var ErrDeferred = errors.New("geminiguard: deferred to the batch lane")

// DeferredError is what a Deferrable GenerateContent call returns when every
// model failed for a reason a batch job may outlive (a daily quota, a zero
// quota, open breakers and cool-downs, overload, server errors, timeouts,
// per-minute limits) and no Fallback answered: the request was submitted as
// a batch job of the call's first model, whose result Batches.Wait (or
// Poll) gives, and whose Handle can be saved. It matches ErrDeferred, and
// through Unwrap the call's own error (errors.Is(err, ErrQuotaExhausted)
// still tells a quota was involved). Returned as a pointer.
type DeferredError struct {
	Job *BatchJob
	Err error // the call's error: a *CascadeError
}

func (e *DeferredError) Error() string {
	return fmt.Sprintf("geminiguard: deferred to batch job %s: %s", e.Job.Name(), strings.TrimPrefix(e.Err.Error(), "geminiguard: "))
}

// Is reports ErrDeferred.
func (e *DeferredError) Is(target error) bool { return target == ErrDeferred }

// Unwrap returns the call's error.
func (e *DeferredError) Unwrap() error { return e.Err }

type deferrableKey struct{}

// Deferrable marks the GenerateContent calls made with the returned context
// as deferrable: one that every model fails for a reason a batch job may
// outlive is submitted to the Batch API lane instead and returns a
// *DeferredError carrying the job (see there). A Fallback that answers
// still answers first. A call whose batch submission fails returns its own
// error, as an unmarked call does. Calls are not deferrable by default.
func Deferrable(ctx context.Context) context.Context {
	return context.WithValue(ctx, deferrableKey{}, true)
}

// deferrableClasses are the failures a batch job may outlive: its quota is
// separate and its deadline a day away. A project's spend cap, keys and
// budgets, and caller mistakes, bind a batch as well.
var deferrableClasses = map[Class]bool{
	ClassDailyQuota: true, ClassNoQuota: true, ClassCircuitOpen: true, ClassOverloaded: true,
	ClassServerError: true, ClassTimeout: true, ClassNetwork: true, ClassRateLimit: true, ClassLocalRateLimit: true,
}

// deferCall returns err, or a *DeferredError when err is
// a *CascadeError whose every failure is of deferrableClasses, and the
// request could be submitted as a batch job of model (the call's first).
func (c *Client) deferCall(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig, err error) error {
	var ce *CascadeError
	if !errors.As(err, &ce) {
		return err
	}
	for _, a := range ce.Unwrap() {
		if !deferrableClasses[Classify(a).Class] {
			return err
		}
	}
	job, berr := c.Batches().Create(ctx, model, []*genai.InlinedRequest{{Contents: contents, Config: config}}, nil)
	if berr != nil {
		return err
	}
	return &DeferredError{Job: job, Err: err}
}
