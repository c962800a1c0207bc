package geminiguard

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/genai"
)

// WithRecorder writes one line of JSON to w for every upstream request the
// Client sends and that ends (answered, or failed as the classifier read
// it), so that an incident can be played back later in fake time
// (geminitest.Replay) against another configuration. Each line is
//
//	{"at_ms":1200,"model":"gemini-2.5-flash","endpoint":"generate","status":503,"class":"overloaded","latency_ms":840}
//
// at_ms is the request's start in milliseconds after the first request
// recorded, status the HTTP status the API answered (200 for an answer and
// for a quiet failure such as "blocked" or "empty", 0 when no response came:
// a network error, an attempt timeout), class the classifier's Class
// (Class.String), latency_ms the request's time until its answer or
// failure. A line never holds a prompt, an answer, a header or a key.
// Requests never sent (skipped, refused locally) are not recorded; hedged
// requests that lost are not either.
//
// Lines are written whole, one Write each, under a lock, from the call's
// goroutine: w should be quick (a buffered file). A failed Write is
// dropped. Default: no recording.
func WithRecorder(w io.Writer) Option {
	return optionFunc(func(cfg *config) {
		if w == nil {
			cfg.recorder = nil
			return
		}
		cfg.recorder = &recorder{w: w}
	})
}

// recorder is WithRecorder's writer. Safe for concurrent use; a nil
// recorder records nothing.
type recorder struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time // the first request's start; zero until then
}

// traceLine is one line of a recording (see WithRecorder).
type traceLine struct {
	AtMS      int64  `json:"at_ms"`
	Model     string `json:"model"`
	Endpoint  string `json:"endpoint"`
	Status    int    `json:"status"`
	Class     string `json:"class"`
	LatencyMS int64  `json:"latency_ms"`
}

// request records an upstream request to model of endpoint e that ended at
// end after elapsed, with err (nil: answered) read as v.
func (r *recorder) request(e endpoint, model string, v Verdict, err error, end time.Time, elapsed time.Duration) {
	if r == nil || v.Class == ClassCanceled {
		return
	}
	status := 0
	var apiErr genai.APIError
	var quiet *ResponseError
	switch {
	case err == nil, errors.As(err, &quiet):
		status = 200
	case errors.As(err, &apiErr):
		status = apiErr.Code
	}
	began := end.Add(-elapsed)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start.IsZero() {
		r.start = began
	}
	b, jerr := json.Marshal(traceLine{AtMS: began.Sub(r.start).Milliseconds(), Model: model, Endpoint: e.String(), Status: status, Class: v.Class.String(), LatencyMS: elapsed.Milliseconds()})
	if jerr != nil {
		return
	}
	_, _ = r.w.Write(append(b, '\n'))
}
