// Command replay plays a recording of an incident (geminiguard.WithRecorder)
// back in fake time (geminitest.Replay) against the default configuration
// and a grid of the settings that matter — breaker FailureThreshold and
// OpenFor, backoff BaseDelay and MaxDelay, attempt timeout, routing (hedged
// attempts, the cascade's order) — and prints, per configuration, best
// first: the share of calls a model answered, p50 and p99 latency, upstream
// requests per call, the primary's share of calls and the cost per
// thousand calls, as the yardstick (examples/internal/scenario) reports
// them.
//
//	go run ./replay                      # the shipped recording of storm503, with storm503's calls
//	go run ./replay -trace incident.jsonl -every 250ms
//	go run ./replay -trace incident.jsonl -scenario storm503
//	go run ./replay -make storm503 > storm503.jsonl
//
// The calls replayed are a scenario's (-scenario; storm503's for the shipped
// recording), or one every -every over the recording's span. -make records
// the yardstick's geminiguard arm (the default configuration) against a
// scenario and writes the recording to stdout: storm503.jsonl is made so
// (go generate).
package main

//go:generate sh -c "go run . -make storm503 > storm503.jsonl"

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/examples/internal/scenario"
	"github.com/geminiguard/geminiguard/geminitest"
)

// storm503 is the yardstick's geminiguard arm recorded against the
// storm503 scenario (go generate).
//
//go:embed storm503.jsonl
var storm503 []byte

func main() {
	trace := flag.String("trace", "", "the recording to replay (JSON Lines of geminiguard.WithRecorder); empty: the shipped recording of storm503")
	calls := flag.String("scenario", "", "replay this scenario's calls (e.g. storm503); empty: storm503's for the shipped recording, else one call every -every")
	every := flag.Duration("every", 500*time.Millisecond, "without -scenario, the replayed calls: one every this long over the recording's span")
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
		} else if *calls == "" {
			*calls = "storm503"
		}
		base, err := traceScenario(data, *every)
		if *calls != "" {
			if base = scenario.Lookup(*calls); base == nil {
				err = fmt.Errorf("no scenario %q", *calls)
			}
		}
		if err != nil {
			return fail(err)
		}
		rows, err := sweep(bubble, data, base)
		if err != nil {
			return fail(err)
		}
		printRows(os.Stdout, rows)
		return 0
	})
}

// record runs sc's calls through the yardstick's geminiguard arm over sc's
// fake, recording its upstream requests to w.
func record(ctx context.Context, w io.Writer, sc *scenario.Scenario) error {
	bw := bufio.NewWriter(w)
	sc.Arms = []scenario.Arm{scenario.GeminiguardArm("geminiguard", geminiguard.WithRecorder(bw))}
	if err := scenario.Run(ctx, sc).Arms[0].StartErr; err != nil {
		return err
	}
	return bw.Flush()
}

// setting is one configuration of the grid: the yardstick's geminiguard arm
// with opts, or with its cascade reversed.
type setting struct {
	name     string
	opts     []geminiguard.Option
	reversed bool
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
	return append(out,
		setting{name: "attempt 2s", opts: []geminiguard.Option{geminiguard.WithTimeouts(2*time.Second, 180*time.Second)}},
		setting{name: "routing: hedging off", opts: []geminiguard.Option{geminiguard.WithHedging(geminiguard.HedgePolicy{})}},
		setting{name: "routing: cascade reversed", reversed: true},
	)
}

// row is what one configuration did.
type row struct {
	name             string
	calls, ok        int
	p50, p99         time.Duration
	perCall, primary float64 // primary: the share of calls the recording's primary answered
	cost             geminiguard.Micros
}

// traceScenario returns a scenario for data, a recording: its models in the
// order they first appear (the primary first), and one call every every
// over its span.
func traceScenario(data []byte, every time.Duration) (*scenario.Scenario, error) {
	sc := &scenario.Scenario{Name: "trace"}
	var span time.Duration
	lines := bufio.NewScanner(bytes.NewReader(data))
	for lines.Scan() {
		var l struct {
			AtMS  float64 `json:"at_ms"`
			Model string  `json:"model"`
		}
		if len(lines.Bytes()) == 0 || json.Unmarshal(lines.Bytes(), &l) != nil {
			continue
		}
		if !slices.ContainsFunc(sc.Models, func(m scenario.Model) bool { return m.Name == l.Model }) {
			sc.Models = append(sc.Models, scenario.Model{Name: l.Model})
		}
		span = max(span, time.Duration(l.AtMS*float64(time.Millisecond)))
	}
	if err := lines.Err(); err != nil {
		return nil, err
	}
	if len(sc.Models) == 0 {
		return nil, fmt.Errorf("the recording has no requests")
	}
	for i := range max(1, int(span/every)) {
		sc.Workload.Arrivals = append(sc.Workload.Arrivals, time.Duration(i)*every)
	}
	return sc, nil
}

// sweep replays data with base's calls against every setting of the grid,
// each in its own bubble, and returns the rows best first: most calls
// answered, then the lowest p99, then the fewest requests per call, then
// the lowest cost.
func sweep(bubble func(func(context.Context)), data []byte, base *scenario.Scenario) ([]row, error) {
	var rows []row
	for _, s := range grid() {
		sc, err := replayScenario(base, data)
		if err != nil {
			return nil, err
		}
		primary := sc.Models[0].Name
		if s.reversed {
			sc.Models = slices.Clone(sc.Models)
			slices.Reverse(sc.Models)
		}
		sc.Arms = []scenario.Arm{scenario.GeminiguardArm(s.name, s.opts...)}
		var run *scenario.ArmRun
		bubble(func(ctx context.Context) { run = scenario.Run(ctx, sc).Arms[0] })
		if run.StartErr != nil {
			return nil, fmt.Errorf("%s: %w", s.name, run.StartErr)
		}
		sum := scenario.Summarize(sc, run)
		r := row{name: s.name, calls: sum.Calls, ok: sum.Answered, p50: sum.P50, p99: sum.P99, perCall: sum.PerCall, cost: geminiguard.Micros(run.Figures[scenario.FigCost])}
		for _, c := range run.Calls {
			if c.OK && c.Model == primary {
				r.primary++
			}
		}
		r.primary /= float64(max(r.calls, 1))
		rows = append(rows, r)
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(b.ok, a.ok), cmp.Compare(a.p99, b.p99), cmp.Compare(a.perCall, b.perCall), cmp.Compare(a.cost, b.cost))
	})
	return rows, nil
}

// replayScenario returns a copy of sc whose script plays data back
// (geminitest.Replay) instead of sc's own: every model answers as the
// recording says, with the text sc's calls expect.
func replayScenario(sc *scenario.Scenario, data []byte) (*scenario.Scenario, error) {
	models, err := geminitest.Replay(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	decide := map[string]func(geminitest.Request, int) geminitest.Step{}
	for _, m := range models {
		decide[m.Name] = m.Decide
	}
	out := *sc
	out.Script = func(r scenario.Request) geminitest.Step {
		d, ok := decide[r.Model]
		if !ok {
			return geminitest.Step{Fault: geminitest.NotFound}
		}
		step := d(geminitest.Request{}, 0)
		step.Text = scenario.Answer(r.Call)
		return step
	}
	return &out, nil
}

func printRows(w io.Writer, rows []row) {
	fmt.Fprintf(w, "%-55s %9s %8s %8s %9s %8s %12s\n", "configuration", "success", "p50", "p99", "req/call", "primary", "$/1k calls")
	for _, r := range rows {
		fmt.Fprintf(w, "%-55s %8.2f%% %8v %8v %9.2f %7.1f%% %12.4f\n", r.name, 100*float64(r.ok)/float64(r.calls), latency(r.p50), latency(r.p99), r.perCall, 100*r.primary,
			float64(r.cost)/geminiguard.Dollar*1000/float64(max(r.calls, 1)))
	}
}

// latency prints d to the millisecond, "never" for scenario.Never.
func latency(d time.Duration) string {
	if d == scenario.Never {
		return "never"
	}
	return d.Round(time.Millisecond).String()
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
