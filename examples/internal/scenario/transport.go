package scenario

import (
	"bytes"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/geminiguard/geminiguard/geminitest"
)

// Upstream is one generate or stream request an arm sent to its fake.
type Upstream struct {
	At     time.Duration   // when it was sent, since the run's start
	Took   time.Duration   // until the response headers (or the error)
	Model  string          // without "models/"
	Verb   geminitest.Verb // VerbGenerate or VerbStream
	Call   int             // the call whose prompt it carried, -1 when none
	Status int             // HTTP status, 0 when no response came (dropped, cancelled)
}

// recorder is an http.RoundTripper that logs every generate and stream
// request on its way to next. It is safe for concurrent use; its zero
// value is not usable (see newRecorder).
type recorder struct {
	next  http.RoundTripper
	start time.Time

	mu    sync.Mutex // guards open and log
	ended sync.Cond  // on mu: signalled when open falls to 0
	open  int        // requests in flight
	log   []Upstream
}

// newRecorder returns a recorder of the requests to next in a run that
// started at start.
func newRecorder(next http.RoundTripper, start time.Time) *recorder {
	r := &recorder{next: next, start: start}
	r.ended.L = &r.mu
	return r
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	model, verb, ok := route(req.URL.Path)
	if !ok {
		return r.next.RoundTrip(req)
	}
	u := Upstream{At: time.Since(r.start), Model: model, Verb: verb, Call: -1}
	if req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		u.Call = callOf(string(body))
		req = req.Clone(req.Context()) // a RoundTripper must not modify its request
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.mu.Lock()
	r.open++
	r.mu.Unlock()
	resp, err := r.next.RoundTrip(req)
	u.Took = time.Since(r.start) - u.At
	if err == nil {
		u.Status = resp.StatusCode
	}
	r.mu.Lock()
	r.log = append(r.log, u)
	if r.open--; r.open == 0 {
		r.ended.Broadcast()
	}
	r.mu.Unlock()
	return resp, err
}

// entries returns the log in the order the requests were sent, once every
// request in flight has ended: a call may return before a request it
// abandoned (a hedge cancelled, a stall left behind) has.
func (r *recorder) entries() []Upstream {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.open > 0 {
		r.ended.Wait()
	}
	out := slices.Clone(r.log)
	slices.SortStableFunc(out, func(a, b Upstream) int { return int(a.At - b.At) })
	return out
}

// route reads a generate or stream request's model and verb from its path
// (/v1beta/models/{model}:{verb}).
func route(path string) (model string, verb geminitest.Verb, ok bool) {
	_, rest, found := strings.Cut(path, "/models/")
	if !found {
		return "", "", false
	}
	model, v, found := strings.Cut(rest, ":")
	switch verb = geminitest.Verb(v); {
	case !found:
		return "", "", false
	case verb == geminitest.VerbGenerate, verb == geminitest.VerbStream:
		return model, verb, true
	}
	return "", "", false
}
