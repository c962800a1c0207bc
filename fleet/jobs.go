package fleet

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// The bounds of a JobStore.
const (
	// MaxJobs is how many open batches a JobStore keeps per project at
	// most: putting one more drops the one that expires first.
	MaxJobs = 100
	// JobTTL is how long the Client asks a JobStore to keep a batch's
	// handle after its last put: a Batch API job expires 48 hours after it
	// was created, and the last put follows the batch's latest job.
	JobTTL = 48 * time.Hour
)

// JobStore is a SharedState that also keeps the handles of a project's
// open batches (geminiguard.Batches), so that another Client of the
// project, in another process, finds and resumes them without having saved
// a handle (geminiguard.Batches.Open). geminiguard.WithSharedState uses it
// when the store has it: the Client puts a batch's handle when it creates
// the batch and whenever the batch changes (a job sent again to the next
// model, requests cancelled), and drops it when every request has its
// result or the batch is deleted. redisstore's Store and NewMemoryState's
// store are JobStores. It is an optional interface, as AnswerStore is, so
// that a SharedState need not keep jobs.
//
// A handle is the Client's JSON (geminiguard.BatchJob.Handle): it holds the
// batch's requests, prompts included, so a JobStore holds prompt text
// where an AnswerStore or VectorStore holds hashes; give each project a
// store, or a Redis user, that only it can read. name is the batch's first
// Batch API job (batches/...). The Client changes neither the slice it
// gives PutJob nor those Jobs returns, so a store may keep and return them.
// Errors never fail a batch call: the Client then leaves the handle to its
// caller (see geminiguard.WithSharedState for the deadline and breaker
// around every call to the store).
type JobStore interface {
	// PutJob keeps handle under project and name for ttl, replacing what
	// was there and its expiry; at most MaxJobs per project, the one that
	// expires first dropped for a new one.
	PutJob(ctx context.Context, project, name string, handle []byte, ttl time.Duration) error
	// Jobs returns project's jobs that have not expired, the one that
	// expires first first, each with its Expires.
	Jobs(ctx context.Context, project string) ([]StoredJob, error)
	// DropJob forgets project's job name; none is no error.
	DropJob(ctx context.Context, project, name string) error
}

// StoredJob is one open batch as a JobStore keeps it.
type StoredJob struct {
	Name    string    // the batch's first Batch API job (batches/...)
	Handle  []byte    // the batch's handle (geminiguard.BatchJob.Handle)
	Expires time.Time // when the store drops it (its own clock)
}

var _ JobStore = (*memoryState)(nil)

// PutJob implements JobStore; it fails only when ctx ended.
func (s *memoryState) PutJob(ctx context.Context, project, name string, handle []byte, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs == nil {
		s.jobs = make(map[string]map[string]StoredJob)
	}
	jobs := s.jobs[project]
	if jobs == nil {
		jobs = make(map[string]StoredJob)
		s.jobs[project] = jobs
	}
	for n, j := range jobs {
		if !now.Before(j.Expires) {
			delete(jobs, n)
		}
	}
	jobs[name] = StoredJob{Name: name, Handle: handle, Expires: now.Add(ttl)}
	for len(jobs) > MaxJobs {
		first := ""
		for n, j := range jobs {
			if first == "" || j.Expires.Before(jobs[first].Expires) {
				first = n
			}
		}
		delete(jobs, first)
	}
	return nil
}

// Jobs implements JobStore; it fails only when ctx ended.
func (s *memoryState) Jobs(ctx context.Context, project string) ([]StoredJob, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	var out []StoredJob
	for _, j := range s.jobs[project] {
		if now.Before(j.Expires) {
			out = append(out, j)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b StoredJob) int { return cmp.Or(a.Expires.Compare(b.Expires), cmp.Compare(a.Name, b.Name)) })
	return out, nil
}

// DropJob implements JobStore; it fails only when ctx ended.
func (s *memoryState) DropJob(ctx context.Context, project, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.jobs[project], name)
	if len(s.jobs[project]) == 0 {
		delete(s.jobs, project)
	}
	return nil
}
