// Command replay plays a recording of an incident (geminiguard.WithRecorder)
// back in fake time (geminitest.Replay) against the default configuration
// and a grid of the settings that matter — breaker FailureThreshold and
// OpenFor, backoff BaseDelay and MaxDelay, attempt timeout — and prints, per
// configuration, best first: the calls answered by a model, p50 and p99
// latency, upstream requests per call, and the primary's share of answers.
//
//	go run ./replay                      # the shipped recording of storm503
//	go run ./replay -trace incident.jsonl -every 250ms
//	go run ./replay -make storm503 > storm503.jsonl
//
// The workload replayed is one call every -every over the recording's span.
// -make records the default configuration against a scenario of
// examples/internal/scenario and writes the recording to stdout.
package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/examples/internal/scenario"
	"github.com/geminiguard/geminiguard/geminitest"
)

//go:embed storm503.jsonl
var storm503 []byte

func main() {
	trace := flag.String("trace", "", "the recording to replay (JSON Lines of geminiguard.WithRecorder); empty: the shipped recording of storm503")
	every := flag.Duration("every", 500*time.Millisecond, "the replayed workload: one call every this long over the recording's span")
	scenarioName := flag.String("make", "", "record the default configuration against this scenario (e.g. storm503) and write the recording to stdout")
	flag.Parse()
	log.SetOutput(io.Discard) // the SDK logs cut streams
	withBubble(func(bubble func(func(context.Context))) int {
		if *scenarioName != "" {
			sc := scenario.Lookup(*scenarioName)
			if sc == nil {
				return fail(fmt.Errorf("no scenario %q", *scenarioName))
			}
			var err error
			bubble(func(ctx context.Context) { err = record(ctx, os.Stdout, sc) })
			if err != nil {
				return fail(err)
			}
			return 0
		}
		data := storm503
		if *trace != "" {
			var err error
			if data, err = os.ReadFile(*trace); err != nil {
				return fail(err)
			}
		}
		rows, err := sweep(bubble, data, *every)
		if err != nil {
			return fail(err)
		}
		printRows(os.Stdout, rows)
		return 0
	})
}

// record runs sc's workload through a Client of the default configuration
// over sc's fake, recording it to w.
func record(ctx context.Context, w io.Writer, sc *scenario.Scenario) error {
	start := time.Now()
	srv := geminitest.New(sc.FakeModels(start)...)
	bw := bufio.NewWriter(w)
	names := make([]string, len(sc.Models))
	for i, m := range sc.Models {
		names[i] = m.Name
	}
	c, err := newClient(ctx, srv, names, geminiguard.WithRecorder(bw))
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	for i, at := range sc.Workload.Arrivals {
		wg.Go(func() {
			time.Sleep(at - time.Since(start))
			_, _ = c.GenerateContent(ctx, "", genai.Text(scenario.Prompt(i)), nil)
		})
	}
	wg.Wait()
	return bw.Flush()
}

func newClient(ctx context.Context, srv *geminitest.Server, cascade []string, opts ...geminiguard.Option) (*geminiguard.Client, error) {
	return geminiguard.New(ctx, append([]geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade(cascade...),
	}, opts...)...)
}

// setting is one configuration of the grid.
type setting struct {
	name string
	opts []geminiguard.Option
}

// grid returns the default configuration and its variations.
func grid() []setting {
	out := []setting{{name: "default"}}
	for _, th := range []int{3, 8} {
		for _, open := range []time.Duration{10 * time.Second, 60 * time.Second} {
			for _, bo := range [][2]time.Duration{{500 * time.Millisecond, 30 * time.Second}, {2 * time.Second, 120 * time.Second}} {
				for _, at := range []time.Duration{10 * time.Second} {
					out = append(out, setting{
						name: fmt.Sprintf("breaker %d/%v backoff %v-%v attempt %v", th, open, bo[0], bo[1], at),
						opts: []geminiguard.Option{
							geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: th, OpenFor: open}),
							geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: bo[0], MaxDelay: bo[1]}),
							geminiguard.WithTimeouts(at, 180*time.Second),
						},
					})
				}
			}
		}
	}
	return out
}

// row is what one configuration did.
type row struct {
	name             string
	calls, ok        int
	p50, p99         time.Duration
	perCall, primary float64
}

// cascadeOf returns the recording's models in the order they first appear
// (the primary first) and its span.
func cascadeOf(data []byte) ([]string, time.Duration, error) {
	var names []string
	var span time.Duration
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var l struct {
			AtMS  int64  `json:"at_ms"`
			Model string `json:"model"`
		}
		if len(sc.Bytes()) == 0 || json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if !slices.Contains(names, l.Model) {
			names = append(names, l.Model)
		}
		span = max(span, time.Duration(l.AtMS)*time.Millisecond)
	}
	if len(names) == 0 {
		return nil, 0, fmt.Errorf("the recording has no requests")
	}
	return names, span, sc.Err()
}

// sweep replays data against every setting of the grid, each in its own
// bubble, and returns the rows best first: most calls answered, then the
// lowest p99, then the fewest requests per call.
func sweep(bubble func(func(context.Context)), data []byte, every time.Duration) ([]row, error) {
	cascade, span, err := cascadeOf(data)
	if err != nil {
		return nil, err
	}
	calls := max(1, int(span/every))
	var rows []row
	for _, s := range grid() {
		var r row
		var rerr error
		bubble(func(ctx context.Context) { r, rerr = replay(ctx, data, cascade, calls, every, s) })
		if rerr != nil {
			return nil, rerr
		}
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		switch {
		case a.ok != b.ok:
			return b.ok - a.ok
		case a.p99 != b.p99:
			return int(a.p99 - b.p99)
		}
		return int(1000 * (a.perCall - b.perCall))
	})
	return rows, nil
}

// replay plays data for s: calls calls, one every every.
func replay(ctx context.Context, data []byte, cascade []string, calls int, every time.Duration, s setting) (row, error) {
	models, err := geminitest.Replay(bytes.NewReader(data))
	if err != nil {
		return row{}, err
	}
	srv := geminitest.New(models...)
	c, err := newClient(ctx, srv, cascade, append(s.opts, geminiguard.WithStartupCheck(false))...)
	if err != nil {
		return row{}, err
	}
	defer c.Close()
	r := row{name: s.name, calls: calls}
	latencies := make([]time.Duration, calls)
	answered := make([]string, calls)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			time.Sleep(time.Duration(i)*every - time.Since(start))
			began := time.Now()
			var rec geminiguard.CallRecord
			resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(scenario.Prompt(i)), nil)
			latencies[i] = time.Since(began)
			if err == nil && !geminiguard.IsFallback(resp) {
				answered[i] = rec.Model
			}
		})
	}
	wg.Wait()
	total := 0
	for _, m := range cascade {
		total += srv.Total(m)
	}
	primary := 0
	for _, m := range answered {
		if m != "" {
			r.ok++
		}
		if m == cascade[0] {
			primary++
		}
	}
	slices.Sort(latencies)
	r.p50, r.p99 = latencies[calls/2], latencies[min(calls-1, calls*99/100)]
	r.perCall = float64(total) / float64(calls)
	if r.ok > 0 {
		r.primary = float64(primary) / float64(r.ok)
	}
	return r, nil
}

func printRows(w io.Writer, rows []row) {
	fmt.Fprintf(w, "%-55s %9s %8s %8s %9s %8s\n", "configuration", "success", "p50", "p99", "req/call", "primary")
	for _, r := range rows {
		fmt.Fprintf(w, "%-55s %8.2f%% %8v %8v %9.2f %7.1f%%\n", r.name, 100*float64(r.ok)/float64(r.calls), r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.perCall, 100*r.primary)
	}
}

// withBubble runs prog, giving it a function that runs f in a fresh
// testing/synctest bubble, then exits with prog's code: synctest.Test needs
// a *testing.T, which testing.Main makes (as examples/outage does).
func withBubble(prog func(bubble func(f func(context.Context))) int) {
	matchAll := func(string, string) (bool, error) { return true, nil }
	testing.Main(matchAll, []testing.InternalTest{{Name: "replay", F: func(t *testing.T) {
		code := prog(func(f func(context.Context)) {
			synctest.Test(t, func(t *testing.T) { f(t.Context()) })
		})
		os.Exit(code)
	}}}, nil, nil)
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "replay:", err)
	return 1
}
