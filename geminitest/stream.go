package geminitest

import (
	"context"
	"encoding/json"
	"net/http"
	"unicode/utf8"

	"google.golang.org/genai"
)

// stream writes the answer as server-sent events, as the real API does with
// alt=sse: Content-Type text/event-stream, one "data: <JSON>\r\n\r\n" event
// per chunk, flushed one by one, no comments and no [DONE]. Stream faults
// cut, stall or break the sequence (see the Stream* faults).
func (a *answer) stream(ctx context.Context, w http.ResponseWriter) {
	if sleep(ctx, a.latency()) != nil {
		return
	}
	events := a.events()
	s := &sse{w: w, rc: http.NewResponseController(w)}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if s.flush() != nil {
		return
	}
	switch a.step.Fault {
	case StreamStallFirst:
		if sleep(ctx, a.step.stall()) == nil {
			a.send(ctx, s, events)
		}
	case StreamStallBetween:
		n := a.step.cutAfter(len(events))
		if a.send(ctx, s, events[:n]) == nil && sleep(ctx, a.step.stall()) == nil {
			a.send(ctx, s, events[n:])
		}
	case StreamCutBetween:
		if a.send(ctx, s, events[:a.step.cutAfter(len(events))]) == nil {
			panic(http.ErrAbortHandler)
		}
	case StreamCutInside:
		n := a.step.cutAfter(len(events) - 1)
		if a.send(ctx, s, events[:n]) == nil && s.write([]byte("data: "), events[n][:len(events[n])/2]) == nil {
			panic(http.ErrAbortHandler)
		}
	case StreamErrorInside:
		if a.send(ctx, s, events[:a.step.cutAfter(len(events))]) == nil {
			_ = s.event(overloaded().body())
		}
	default:
		a.send(ctx, s, events)
	}
}

// events returns the JSON of each event of the answer: the text split into
// Chunks pieces with running usage, or the single body of a quiet fault.
func (a *answer) events() [][]byte {
	var rs []response
	switch {
	case isQuietFault(a.step.Fault):
		rs = []response{a.quiet()}
	case len(a.step.Parts) > 0:
		parts, sent := signParts(a.step.Parts, a.signature), 0
		for i, p := range parts {
			sent += textLen(parts[i : i+1])
			last := i == len(parts)-1
			rs = append(rs, a.parts([]*genai.Part{p}, sent, last && a.step.Fault != StreamNoFinish))
		}
	default:
		if a.step.Thought != "" {
			rs = append(rs, a.thought())
		}
		pieces := split(a.text, a.model.Chunks)
		sent := 0
		for i, p := range pieces {
			sent += utf8.RuneCountInString(p)
			last := i == len(pieces)-1
			rs = append(rs, a.chunk(p, sent, last && a.step.Fault != StreamNoFinish))
		}
	}
	out := make([][]byte, len(rs))
	for i, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			panic("geminitest: marshal event: " + err.Error())
		}
		out[i] = b
	}
	return out
}

// send writes events, waiting ChunkInterval before each one but the very
// first of the answer. It returns the first write or wait error.
func (a *answer) send(ctx context.Context, s *sse, events [][]byte) error {
	for _, ev := range events {
		if s.sent > 0 {
			if err := sleep(ctx, a.model.ChunkInterval); err != nil {
				return err
			}
		}
		if err := s.event(ev); err != nil {
			return err
		}
	}
	return nil
}

// sse writes server-sent events.
type sse struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	sent int // events written so far
}

func (s *sse) flush() error { return s.rc.Flush() }

// write writes the parts and flushes.
func (s *sse) write(parts ...[]byte) error {
	for _, p := range parts {
		if _, err := s.w.Write(p); err != nil {
			return err
		}
	}
	return s.flush()
}

// event writes one complete event carrying payload.
func (s *sse) event(payload []byte) error {
	if err := s.write([]byte("data: "), payload, []byte("\r\n\r\n")); err != nil {
		return err
	}
	s.sent++
	return nil
}

// split cuts s into n pieces of nearly equal rune counts (fewer when s has
// fewer runes; one empty piece when s is empty).
func split(s string, n int) []string {
	runes := []rune(s)
	n = max(1, min(n, len(runes)))
	pieces := make([]string, n)
	for i := range n {
		pieces[i] = string(runes[i*len(runes)/n : (i+1)*len(runes)/n])
	}
	return pieces
}
