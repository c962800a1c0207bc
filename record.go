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
//	{"at_ms":1200.25,"model":"gemini-2.5-flash","endpoint":"generate","status":503,"class":"overloaded","latency_ms":840}
//	{"at_ms":2210,"model":"gemini-2.5-flash","endpoint":"generate","status":200,"class":"stream_cut","latency_ms":310.5,"chunks":3}
//
// at_ms is the request's start in milliseconds (to the microsecond) after
// the first request recorded, status the HTTP status the API answered (200
// for an answer, for a quiet failure such as "blocked" or "empty", and for
// a stream that opened, 0 when no response came: a network error, an
// attempt timeout), class the classifier's Class (Class.String), latency_ms
// the request's time until its answer or failure (a stream's: until its
// first chunk). A stream that opened is recorded when it ends, with chunks,
// the number of chunks it delivered, and the class of what ended it:
// "none" for a whole answer, "stream_cut" for a cut (a transport error, a
// clean end without finishReason), the error's class for an error inside
// the 200. A line never holds a prompt, an answer, a header or a key.
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
	start time.Time // the first request's start (begin); zero until then
}

// traceLine is one line of a recording (see WithRecorder).
type traceLine struct {
	AtMS      float64 `json:"at_ms"`
	Model     string  `json:"model"`
	Endpoint  string  `json:"endpoint"`
	Status    int     `json:"status"`
	Class     string  `json:"class"`
	LatencyMS float64 `json:"latency_ms"`
	Chunks    int     `json:"chunks,omitempty"`
}

// millis returns d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 {
	return float64(d.Round(time.Microsecond)) / float64(time.Millisecond)
}

// openedStream is a stream's answering request, which the recorder writes
// when the stream ends (recorder.streamEnd).
type openedStream struct {
	model      string
	began      time.Time
	firstChunk time.Duration
}

// begin notes that an upstream request is about to be sent at t: the
// recording's times count from the first.
func (r *recorder) begin(t time.Time) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.start.IsZero() {
		r.start = t
	}
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
	r.write(traceLine{Model: model, Endpoint: e.String(), Status: status, Class: v.Class.String(), LatencyMS: millis(elapsed)}, end.Add(-elapsed))
}

// streamEnd records the stream opened by o, which delivered chunks chunks
// and ended as v says (v's Class ClassNone: a whole answer).
func (r *recorder) streamEnd(o openedStream, chunks int, v Verdict) {
	if r == nil || v.Class == ClassCanceled {
		return
	}
	r.write(traceLine{Model: o.model, Endpoint: endpointGenerate.String(), Status: 200, Class: v.Class.String(), LatencyMS: millis(o.firstChunk), Chunks: chunks}, o.began)
}

// write writes l, a request that began at began.
func (r *recorder) write(l traceLine, began time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.AtMS = millis(began.Sub(r.start))
	b, err := json.Marshal(l)
	if err != nil {
		return
	}
	_, _ = r.w.Write(append(b, '\n'))
}
