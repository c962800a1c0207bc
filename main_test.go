package geminiguard_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

func TestMain(m *testing.M) {
	// The SDK reads these; a developer's real key must never reach the fake.
	for _, v := range []string{"GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_CLOUD_REGION"} {
		os.Unsetenv(v)
	}
	log.SetOutput(io.Discard) // the SDK logs every stream cut with log.Printf
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

const (
	pro   = "gemini-3.1-pro"
	flash = "gemini-3.5-flash"
	lite  = "gemini-2.5-flash-lite"
)

// logBuffer collects the Client's log lines for assertions.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// stateChanges records the breaker state changes a Client reports.
type stateChanges struct {
	mu   sync.Mutex
	list []geminiguard.StateChangeEvent
}

// hooks returns the Hooks that record into s.
func (s *stateChanges) hooks() geminiguard.Hooks {
	return geminiguard.Hooks{OnStateChange: func(_ context.Context, e geminiguard.StateChangeEvent) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.list = append(s.list, e)
	}}
}

// get returns the changes so far, as "model:state".
func (s *stateChanges) get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.list))
	for i, e := range s.list {
		out[i] = e.Model + ":" + e.To.String()
	}
	return out
}

// trips returns how many times model's breaker opened from closed.
func (s *stateChanges) trips(model string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, e := range s.list {
		if e.Model == model && e.From == geminiguard.StateClosed && e.To == geminiguard.StateOpen {
			n++
		}
	}
	return n
}

// newClient builds a Client on the fake's in-memory transport (usable inside
// synctest bubbles), logging at Debug into logs when given.
func newClient(t *testing.T, srv *geminitest.Server, logs *logBuffer, opts ...geminiguard.Option) *geminiguard.Client {
	t.Helper()
	base := []geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key),
		geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(srv.HTTPClient()),
	}
	if logs != nil {
		base = append(base, geminiguard.WithLogger(slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	c, err := geminiguard.New(t.Context(), append(base, opts...)...)
	require.NoError(t, err)
	return c
}

// newOffline calls New with a key and no startup check, so nothing is sent:
// what a test of New's refusals needs. The caller closes a Client it got.
func newOffline(t *testing.T, opts ...geminiguard.Option) (*geminiguard.Client, error) {
	t.Helper()
	return geminiguard.New(t.Context(), append([]geminiguard.Option{geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithStartupCheck(false)}, opts...)...)
}

// ask sends one prompt and returns the answer, the call record and the error.
func ask(ctx context.Context, c *geminiguard.Client, model string) (*genai.GenerateContentResponse, geminiguard.CallRecord, error) {
	var rec geminiguard.CallRecord
	resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), model, genai.Text("Say hi"), nil)
	return resp, rec, err
}

// timedCall is one call of callsAtOnce: its record, error and how long it
// took.
type timedCall struct {
	rec  geminiguard.CallRecord
	err  error
	took time.Duration
}

// callsAtOnce starts n calls on c at the same instant, each on a goroutine
// of its own, and returns once their requests are out (synctest.Wait: a
// request sent after it returns is sent after theirs); wait waits for the
// calls and returns them, in no order. It must be called inside a
// testing/synctest bubble.
func callsAtOnce(t *testing.T, c *geminiguard.Client, n int) (wait func() []timedCall) {
	t.Helper()
	calls := make([]timedCall, n)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			start := time.Now()
			_, calls[i].rec, calls[i].err = ask(t.Context(), c, "")
			calls[i].took = time.Since(start)
		})
	}
	synctest.Wait()
	return func() []timedCall {
		wg.Wait()
		return calls
	}
}

// requireNoKey fails when the fake API key appears in s.
func requireNoKey(t *testing.T, s string) {
	t.Helper()
	require.False(t, strings.Contains(s, geminitest.Key), "the API key leaked into: %s", s)
}
