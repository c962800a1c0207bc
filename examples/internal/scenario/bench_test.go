package scenario

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/examples/internal/failsafestack"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/paired"
)

// The overhead benchmarks: the raw SDK, the failsafe arm and geminiguard
// on a healthy upstream that answers at once, in real time.
//
//	go test ./examples/internal/scenario -run '^$' -bench . -benchmem -count 10 | tee bench.txt
//	benchstat bench.txt

// overhead is the healthy two-model scenario of the benchmarks: every call
// answered at once with the model's default text.
func overhead() *Scenario {
	return &Scenario{
		Name:   "overhead",
		Models: []Model{{Name: flash}, {Name: lite}},
		Script: func(Request) geminitest.Step { return geminitest.Step{} },
	}
}

// overheadArms are the arms the overhead benchmarks compare, raw first,
// failsafe second, geminiguard third (BenchmarkPaired relies on it).
var overheadArms = []Arm{RawArm(), FailsafeArm(), GeminiguardArm("geminiguard")}

// wire is a way to reach the fake.
type wire struct {
	name string
	// env returns the Env of a run of sc against srv, and a func that
	// releases what it started.
	env func(sc *Scenario, srv *geminitest.Server) (Env, func())
}

var (
	// loopback: an httptest.Server over real TCP on 127.0.0.1, HTTP/1.1.
	loopback = wire{"loopback", func(sc *Scenario, srv *geminitest.Server) (Env, func()) {
		ts := httptest.NewServer(srv)
		return Env{Scenario: sc, HTTPClient: ts.Client(), BaseURL: ts.URL, Start: time.Now()}, ts.Close
	}}
	// memory: the fake's in-memory transport.
	memory = wire{"memory", func(sc *Scenario, srv *geminitest.Server) (Env, func()) {
		return Env{Scenario: sc, HTTPClient: srv.HTTPClient(), BaseURL: geminitest.BaseURL, Start: time.Now()}, func() {}
	}}
	// canned: a transport that answers every request with a body the fake
	// gave once, so that nearly all the time left is the client's.
	canned = wire{"canned", func(sc *Scenario, srv *geminitest.Server) (Env, func()) {
		t := &cannedTransport{
			list:     record(srv, http.MethodGet, "/v1beta/models", ""),
			generate: record(srv, http.MethodPost, "/v1beta/models/"+flash+":generateContent", `{"contents":[{"parts":[{"text":"hi"}],"role":"user"}]}`),
		}
		return Env{Scenario: sc, HTTPClient: &http.Client{Transport: t}, BaseURL: geminitest.BaseURL, Start: time.Now()}, func() {}
	}}
)

// record returns the body srv answers to one request.
func record(srv *geminitest.Server, method, path, body string) []byte {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("X-Goog-Api-Key", geminitest.Key)
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	return w.Body.Bytes()
}

// cannedTransport answers GETs with list and everything else with generate.
type cannedTransport struct {
	list, generate []byte
}

func (c *cannedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body := c.generate
	if req.Method == http.MethodGet {
		body = c.list
	}
	return &http.Response{
		StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:        http.Header{"Content-Type": {"application/json; charset=UTF-8"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// build builds arm over w against a fresh fake of sc (nil: overhead()).
func build(tb testing.TB, arm Arm, w wire, sc *Scenario) (Caller, *geminitest.Server) {
	tb.Helper()
	if sc == nil {
		sc = overhead()
	}
	srv := geminitest.New(sc.fakeModels(time.Now(), new(atomic.Int64))...)
	env, stop := w.env(sc, srv)
	tb.Cleanup(stop)
	c, err := arm.New(context.Background(), env)
	require.NoError(tb, err)
	return c, srv
}

// direct returns a func that makes one call through c as its user would,
// with the prompt built once: what it measures is the client, not this
// package's harness.
func direct(tb testing.TB, c Caller) func() error {
	return directIn(tb, c, background)
}

// callerContext makes the context of one call as its caller would.
type callerContext func() (context.Context, context.CancelFunc)

// background: every call on context.Background(), no deadline.
func background() (context.Context, context.CancelFunc) { return context.Background(), func() {} }

// defaultAttemptTimeout is geminiguard's default attempt timeout (WithTimeouts).
const defaultAttemptTimeout = 60 * time.Second

// requestDeadline: every call on a context of its own with a 30s deadline,
// as a request handler's: it comes before the attempt timeout
// (the default attempt timeout, 60s), so geminiguard's attempt makes no deadline
// context of its own, and the SDK tells the server about it in every arm.
func requestDeadline() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 30*time.Second)
}

// directIn is direct with each call on a context from callerCtx.
func directIn(tb testing.TB, c Caller, callerCtx callerContext) func() error {
	tb.Helper()
	contents := genai.Text(Prompt(1))
	answer := func(resp *genai.GenerateContentResponse, err error) error {
		if err == nil && resp.Text() == "" {
			return errors.New("empty answer")
		}
		return err
	}
	in := func(call func(ctx context.Context) error) func() error {
		return func() error {
			ctx, cancel := callerCtx()
			defer cancel()
			return call(ctx)
		}
	}
	switch c := c.(type) {
	case *sdkCaller:
		return in(func(ctx context.Context) error { return answer(c.models.GenerateContent(ctx, c.model, contents, nil)) })
	case *guardCaller:
		return in(func(ctx context.Context) error { return answer(c.c.GenerateContent(ctx, "", contents, nil)) })
	case *failsafeCaller:
		try := func(ctx context.Context, model string) (Outcome, error) {
			return Outcome{}, answer(c.api.GenerateContent(ctx, model, contents, nil))
		}
		return in(func(ctx context.Context) error { return c.run(ctx, try).Err })
	}
	tb.Fatalf("no direct call for %T", c)
	return nil
}

// healthyCall returns a direct call of arm over w on a healthy upstream.
func healthyCall(tb testing.TB, arm Arm, w wire) func() error {
	return healthyCallIn(tb, arm, w, background)
}

// healthyCallIn is healthyCall with each call on a context from callerCtx.
func healthyCallIn(tb testing.TB, arm Arm, w wire, callerCtx callerContext) func() error {
	c, _ := build(tb, arm, w, nil)
	return directIn(tb, c, callerCtx)
}

// asSentCall returns a raw SDK call over w on a healthy upstream, each on a
// context from callerCtx, given what geminiguard sends on each attempt: a
// context with the attempt's deadline (the default, 60s) unless the
// caller's comes first, and a config with the automatic continuation off.
// Set against a raw call, it is what those inputs cost (making the context,
// and the SDK's reaction to both); set against a geminiguard call, what is
// left is the chain's own.
func asSentCall(tb testing.TB, w wire, callerCtx callerContext) func() error {
	c, _ := build(tb, RawArm(), w, nil)
	raw := c.(*sdkCaller)
	contents := genai.Text(Prompt(1))
	config := &genai.GenerateContentConfig{AutomaticContinuation: genai.Ptr(false)}
	return func() error {
		ctx, cancel := callerCtx()
		defer cancel()
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > defaultAttemptTimeout {
			actx, cancel := context.WithTimeout(ctx, defaultAttemptTimeout)
			defer cancel()
			ctx = actx
		}
		resp, err := raw.models.GenerateContent(ctx, raw.model, contents, config)
		if err == nil && resp.Text() == "" {
			return errors.New("empty answer")
		}
		return err
	}
}

// BenchmarkCall is one call on a healthy upstream, one caller at a time.
func BenchmarkCall(b *testing.B) {
	for _, w := range []wire{loopback, memory, canned} {
		for _, arm := range overheadArms {
			b.Run(w.name+"/"+arm.Name, func(b *testing.B) {
				call := healthyCall(b, arm, w)
				b.ReportAllocs()
				for b.Loop() {
					if err := call(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkPaired makes the three arms' calls and a raw call "as sent"
// (asSentCall) in turn on one wire, so that the machine's drift and noise
// fall on all alike, and reports each one's time per call (raw-µs,
// failsafe-µs, geminiguard-µs, as-sent-µs), geminiguard's over raw's
// (gg/raw), and what the chain and the failsafe-go stack add to a raw SDK
// call (chain-ns, stack-ns). chain-ns splits into inputs-ns (as sent less
// raw: the attempt's deadline context and the continuation-off config, and
// the SDK's reaction to them) and own-ns (geminiguard less as sent: the
// chain itself). ns/op is the four calls together. Each wire runs twice:
// with every call on context.Background(), and (.../request-deadline) on a
// context of its own with a 30s deadline, as a request handler's calls are.
func BenchmarkPaired(b *testing.B) {
	for _, w := range []wire{loopback, memory, canned} {
		for _, mode := range []struct {
			suffix    string
			callerCtx callerContext
		}{{"", background}, {"/request-deadline", requestDeadline}} {
			b.Run(w.name+mode.suffix, func(b *testing.B) {
				calls := make([]func() error, len(overheadArms), len(overheadArms)+1)
				for i, arm := range overheadArms {
					calls[i] = healthyCallIn(b, arm, w, mode.callerCtx)
				}
				calls = append(calls, asSentCall(b, w, mode.callerCtx))
				per := paired.Run(b, calls)
				for i, arm := range overheadArms {
					b.ReportMetric(per[i]/1e3, arm.Name+"-µs")
				}
				raw, fs, gg, sent := per[0], per[1], per[2], per[3]
				b.ReportMetric(sent/1e3, "as-sent-µs")
				b.ReportMetric(gg/raw, "gg/raw")
				b.ReportMetric(gg-raw, "chain-ns")
				b.ReportMetric(fs-raw, "stack-ns")
				b.ReportMetric(sent-raw, "inputs-ns")
				b.ReportMetric(gg-sent, "own-ns")
			})
		}
	}
}

// BenchmarkCallParallel is the same call from 64 goroutines per CPU on one
// shared client: the limiter, breakers and budgets must not serialise them.
func BenchmarkCallParallel(b *testing.B) {
	for _, w := range []wire{memory, canned} {
		for _, arm := range overheadArms {
			b.Run(w.name+"/"+arm.Name, func(b *testing.B) {
				call := healthyCall(b, arm, w)
				b.ReportAllocs()
				b.SetParallelism(64)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := call(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// refusing returns a call of arm made when every model's breaker is open:
// every model answers 503 at once until they open, and nothing reopens them
// within the benchmark. It fails tb if a refused call still sends a request.
func refusing(tb testing.TB, arm Arm) func() error {
	tb.Helper()
	sc := overhead()
	sc.Script = func(Request) geminitest.Step { return geminitest.Step{Fault: geminitest.Overloaded} }
	c, srv := build(tb, arm, memory, sc)
	call := direct(tb, c)
	for range 2 * failsafestack.Threshold * failsafestack.Attempts {
		_ = call()
	}
	before := srv.Total(flash) + srv.Total(lite)
	require.Error(tb, call())
	require.Equal(tb, before, srv.Total(flash)+srv.Total(lite), "every breaker is open: no request leaves")
	return call
}

// openGeminiguard is a geminiguard arm that opens its breakers at the
// first failures and keeps them open for an hour.
var openGeminiguard = GeminiguardArm("geminiguard",
	geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
	geminiguard.WithBreaker(geminiguard.BreakerSettings{OpenFor: time.Hour}))

// BenchmarkRefused is a call refused by open breakers on every model.
func BenchmarkRefused(b *testing.B) {
	for _, arm := range []Arm{FailsafeArm(), openGeminiguard} {
		b.Run(arm.Name, func(b *testing.B) {
			call := refusing(b, arm)
			b.ReportAllocs()
			for b.Loop() {
				if call() == nil {
					b.Fatal("answered with every breaker open")
				}
			}
		})
	}
}

// The chain's allocations on the success path: a geminiguard call over the
// canned transport less a raw SDK call over it, split into what the inputs
// geminiguard sends cost (a raw call as sent, less a raw call) and the
// chain's own (a geminiguard call less a raw call as sent).
//
// It is skipped under the race detector, which makes sync.Pool drop items
// at random (the SDK's and net/http's pools), so that the counts of one
// call vary by a few allocations from round to round; .ci/run runs it
// without -race, where they are exact.
func TestChainAllocations(t *testing.T) {
	if raceDetector {
		t.Skip("allocation counts vary under -race (sync.Pool drops items at random); run without -race")
	}
	allocs := func(call func() error) float64 {
		require.NoError(t, call())
		return testing.AllocsPerRun(200, func() { require.NoError(t, call()) })
	}
	raw, sent := allocs(healthyCall(t, RawArm(), canned)), allocs(asSentCall(t, canned, background))
	guard, fs := allocs(healthyCall(t, GeminiguardArm("geminiguard"), canned)), allocs(healthyCall(t, FailsafeArm(), canned))
	t.Logf("allocations per call: raw SDK %.0f, as sent %.0f, geminiguard %.0f (chain %+.0f: inputs %+.0f, own %+.0f), failsafe %.0f (stack %+.0f)",
		raw, sent, guard, guard-raw, sent-raw, guard-sent, fs, fs-raw)
	check(t, "overhead: the chain allocates ≤ 4 times per call", guard-raw <= 4, "%+.0f allocations", guard-raw)
	check(t, "overhead: the chain's own code allocates ≤ 4 times per call", guard-sent <= 4, "%+.0f allocations beyond the inputs it sends", guard-sent)
}

// A call refused by every open breaker sends nothing and says why.
func TestRefusedSendsNothing(t *testing.T) {
	err := refusing(t, openGeminiguard)()
	assert.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
	assert.ErrorIs(t, err, geminiguard.ErrCircuitOpen)
}
