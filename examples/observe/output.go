package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// spanLines is the stdout trace exporter's writer in lines mode: the
// exporter encodes each span as one JSON object in one Write, and spanLines
// prints it as one line — start, duration, name, outcome, answering model
// and the attempts (model:class, with the breaker's state after it).
type spanLines struct {
	mu  sync.Mutex
	out io.Writer
}

// jsonSpan is the part of the exporter's JSON (tracetest.SpanStub) printed.
type jsonSpan struct {
	Name       string
	StartTime  time.Time
	EndTime    time.Time
	Attributes []jsonAttr
	Events     []struct {
		Name       string
		Attributes []jsonAttr
	}
	Status struct{ Code, Description string }
}

type jsonAttr struct {
	Key   string
	Value struct{ Value any }
}

// attr returns the value of attrs' key, "" when absent.
func attr(attrs []jsonAttr, key string) string {
	for _, a := range attrs {
		if a.Key == key {
			return fmt.Sprint(a.Value.Value)
		}
	}
	return ""
}

// Write prints the span p encodes as one line.
func (w *spanLines) Write(p []byte) (int, error) {
	var s jsonSpan
	if err := json.Unmarshal(p, &s); err != nil {
		return 0, err
	}
	outcome := "ok    " + attr(s.Attributes, "gen_ai.response.model")
	if s.Status.Code == "Error" {
		outcome = "ERROR " + s.Status.Description
	}
	var tried []string
	for _, e := range s.Events {
		if e.Name == "geminiguard.attempt" {
			tried = append(tried, fmt.Sprintf("%s:%s(%s)", attr(e.Attributes, "gen_ai.request.model"),
				attr(e.Attributes, "geminiguard.class"), attr(e.Attributes, "geminiguard.breaker.state")))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := fmt.Fprintf(w.out, "%s %6v  %s  %-32s  attempts: %s\n", s.StartTime.Format("15:04:05.000"),
		s.EndTime.Sub(s.StartTime).Round(time.Millisecond), s.Name, outcome, strings.Join(tried, " "))
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// writeSample writes the series of a /metrics body that geminiguard
// produced, without the help and type lines and the histograms' buckets.
func writeSample(out io.Writer, body []byte) error {
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, _, _ := strings.Cut(line, "{")
		if !strings.HasPrefix(name, "gen_ai_") && !strings.HasPrefix(name, "geminiguard_") || strings.HasSuffix(name, "_bucket") {
			continue
		}
		if _, err := fmt.Fprintln(out, line); err != nil {
			return err
		}
	}
	return sc.Err()
}
