package geminiguard

import (
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/genai"
)

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
