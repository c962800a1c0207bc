// Package fakeopenai is a fake OpenAI-compatible chat completions server
// (POST /v1/chat/completions, unary and server-sent events) for the tests
// of the openaicompat adapter and of cascades with a local tier. It serves
// over in-memory connections (net.Pipe) through net/http's own client and
// server, so that tests run under testing/synctest in fake time.
package fakeopenai

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// URL is the base URL the Server answers at through HTTPClient.
const URL = "http://fake-openai.test"

// Step is how the Server answers one request. The zero value answers
// "local answer" with finish_reason "stop" at once.
type Step struct {
	Status     int           // HTTP status; 0: 200
	Body       string        // the body of a non-200 answer
	RetryAfter string        // the Retry-After header of a non-200 answer
	Delay      time.Duration // before answering (the request's end cuts it short)
	Text       string        // the answer; "": "local answer"
	Finish     string        // finish_reason; "": "stop"; "-": none (a stream cut before its end)
	Chunks     int           // a stream's text events; 0: 2
	StreamErr  string        // a stream's error event body, sent after its first chunk
}

// Server is the fake. Safe for concurrent use.
type Server struct {
	mu       sync.Mutex // guards script, hits, requests
	script   []Step     // one per request in order, the last repeated
	hits     int
	requests []map[string]any

	ln  *pipeListener
	srv *http.Server
	tr  *http.Transport
}

// New starts a Server that answers with steps (see Step).
func New(steps ...Step) *Server {
	s := &Server{script: steps, ln: &pipeListener{conns: make(chan net.Conn), done: make(chan struct{})}}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	s.tr = &http.Transport{DialContext: s.ln.dial, DisableKeepAlives: true}
	go s.srv.Serve(s.ln) //nolint:errcheck // ends with Close
	return s
}

// HTTPClient returns a client whose requests reach the Server in memory.
func (s *Server) HTTPClient() *http.Client { return &http.Client{Transport: s.tr} }

// Hits returns how many chat requests the Server received.
func (s *Server) Hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits
}

// Requests returns the bodies of the chat requests received, decoded.
func (s *Server) Requests() []map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]any(nil), s.requests...)
}

// Close stops the Server and leaves no goroutine behind.
func (s *Server) Close() {
	s.tr.CloseIdleConnections()
	_ = s.srv.Close()
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	var req map[string]any
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	st := Step{}
	if len(s.script) > 0 {
		st = s.script[min(s.hits, len(s.script)-1)]
	}
	s.hits++
	s.requests = append(s.requests, req)
	s.mu.Unlock()
	if st.Delay > 0 {
		select {
		case <-time.After(st.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if st.Status != 0 && st.Status != http.StatusOK {
		if st.RetryAfter != "" {
			w.Header().Set("Retry-After", st.RetryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(st.Status)
		fmt.Fprint(w, st.Body)
		return
	}
	text, finish := st.Text, st.Finish
	if text == "" {
		text = "local answer"
	}
	if finish == "" {
		finish = "stop"
	}
	model, _ := req["model"].(string)
	usage := map[string]int{"prompt_tokens": 7, "completion_tokens": len(strings.Fields(text)), "total_tokens": 7 + len(strings.Fields(text))}
	if stream, _ := req["stream"].(bool); !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{ //nolint:errcheck // the client may be gone
			"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
			"choices": []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant", "content": text}, "finish_reason": finish}},
			"usage":   usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	event := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk := func(delta map[string]any, finish any) {
		event(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
	}
	chunk(map[string]any{"role": "assistant", "content": ""}, nil)
	n := max(st.Chunks, 2)
	step := (len(text) + n - 1) / n
	for i := 0; i < len(text); i += step {
		chunk(map[string]any{"content": text[i:min(i+step, len(text))]}, nil)
		if st.StreamErr != "" {
			fmt.Fprintf(w, "data: %s\n\n", st.StreamErr)
			return
		}
	}
	if finish == "-" {
		return // cut: no finish_reason, no [DONE]
	}
	chunk(map[string]any{}, finish)
	event(map[string]any{"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model, "choices": []any{}, "usage": usage})
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// pipeListener is a net.Listener of in-memory connections.
type pipeListener struct {
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pipeListener) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "fake-openai" }
