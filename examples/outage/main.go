// Command outage plays an outage against the embedded fake Gemini, in fake
// time, for five ways of calling Gemini on the same script — the raw SDK,
// the SDK with its own retry, a failsafe-go stack, geminiguard, and an
// oracle that knows the script — prints them side by side and draws the
// outage's timeline as an SVG chart. Minutes of outage take a second or so.
//
//	go run ./examples/outage                        # storm503, chart in outage.svg
//	go run ./examples/outage -scenario burst429     # another scenario
//	go run ./examples/outage -all                   # every scenario and the retry storm
//	go run ./examples/outage -all -markdown -svg '' # BENCHMARKS.md's tables
//	GEMINI_API_KEY=... go run ./examples/outage     # then a live smoke test against the real API
//	go run ./examples/outage -family 200 -seed 1    # the brownout family: 200 cells drawn from seed 1
//	go run ./examples/outage -cell 1000017          # replay one cell of it, arm by arm
//	go run ./examples/outage -family 200 -hangs     # the hang family: the primary hangs, after fast failures or not
//	go run ./examples/outage -family 200 -wide      # the wide family: answer times spread as answer lengths spread them
//	go run ./examples/outage -family 200 -replicas 4  # geminiguard as a fleet of 4 replicas sharing one state
//
// Scenarios: burst429, dailyExhausted, storm503, fullOutage, retired404,
// streamCut, slowBrownout, longThinking, batchFlood, and the fleet scenarios
// fleet429 and fleetOutage (20 replicas of one project; examples/internal/scenario
// documents each, and every arm's settings).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/examples/internal/scenario"
)

// stormClients and stormTrials are the retry storm's size, as in the AWS
// study at its largest point.
const (
	stormClients = 100
	stormTrials  = 100
	stormSeed    = 2015
)

func main() {
	name := flag.String("scenario", "storm503", "the scenario to play: burst429, dailyExhausted, storm503, fullOutage, retired404, streamCut, slowBrownout, longThinking, batchFlood, fleet429 or fleetOutage")
	all := flag.Bool("all", false, "play every scenario, then the retry storm of the AWS backoff study")
	svg := flag.String("svg", "outage.svg", "write the timeline chart of the (first) scenario to this file; empty: no chart")
	markdown := flag.Bool("markdown", false, "print Markdown tables")
	live := flag.Bool("live", os.Getenv("GEMINI_API_KEY") != "", "then send a few calls to the real Gemini API through geminiguard (needs GEMINI_API_KEY; on by default when it is set)")
	cascade := flag.String("cascade", "gemini-2.5-flash-lite", "with -live: the cascade, comma-separated, primary first")
	family := flag.Int("family", 0, "play the brownout family of issue 19 with this many cells (200 is the issue's size) instead of a scenario")
	seed := flag.Uint64("seed", 1, "with -family: the family's seed")
	worst := flag.Int("worst", 3, "with -family: how many worst cells to name for each figure")
	cells := flag.String("cells", "", "with -family: also write geminiguard's figures in every cell to this file, a line per cell (seed, share ÷ oracle's, p99 ÷ oracle's, requests per call, success), to compare two builds cell by cell")
	hangs := flag.Bool("hangs", false, "with -family: play the hang family instead (the primary sheds load, or not, then hangs on a share of its requests)")
	wide := flag.Bool("wide", false, "with -family: play the wide family instead (the brownout family's cells with answer times spread as answer lengths spread them)")
	cell := flag.Uint64("cell", 0, "replay the family's cell of this seed (as the family's report names it) and print its arms' table")
	replicas := flag.Int("replicas", 1, "with -family or -cell: play geminiguard as this many replicas sharing one fleet state, the calls spread over them in turn")
	flag.Parse()
	if *family > 0 || *cell > 0 {
		if *hangs && *wide {
			fmt.Fprintln(os.Stderr, "outage: -hangs and -wide each name a family: give one")
			os.Exit(2)
		}
		if *replicas < 1 {
			fmt.Fprintf(os.Stderr, "outage: -replicas %d: give 1 (one process) or more\n", *replicas)
			os.Exit(2)
		}
		log.SetOutput(io.Discard)
		withBubbles(func(bubble func(func(context.Context))) int {
			if *cell > 0 {
				return replay(bubble, *cell, *replicas, *markdown)
			}
			return playFamily(bubble, *family, *seed, *hangs, *wide, *replicas, *worst, *markdown, *cells)
		})
	}

	scenarios := scenario.All()
	if !*all {
		sc := scenario.Lookup(*name)
		if sc == nil {
			fmt.Fprintf(os.Stderr, "outage: no scenario %q; try one of burst429, dailyExhausted, storm503, fullOutage, retired404, streamCut, slowBrownout, longThinking, batchFlood, fleet429, fleetOutage\n", *name)
			os.Exit(2)
		}
		scenarios = []*scenario.Scenario{sc}
	}
	// The genai SDK logs cut streams with the standard logger; the tables
	// report them.
	log.SetOutput(io.Discard)

	withBubbles(func(bubble func(func(context.Context))) int {
		for i, sc := range scenarios {
			var res *scenario.Result
			bubble(func(ctx context.Context) { res = scenario.Run(ctx, sc) })
			if err := report(os.Stdout, res, *markdown); err != nil {
				return fail(err)
			}
			if i == 0 && *svg != "" {
				if err := writeChart(*svg, res); err != nil {
					return fail(err)
				}
				fmt.Printf("chart: %s\n\n", *svg)
			}
		}
		if *all {
			fmt.Printf("retry storm (AWS \"Exponential Backoff and Jitter\"): %d clients, %d trials\n\n", stormClients, stormTrials)
			if err := scenario.WriteStormTable(os.Stdout, scenario.RetryStorm(stormClients, stormTrials, stormSeed), *markdown); err != nil {
				return fail(err)
			}
		}
		if *live {
			if err := smoke(context.Background(), strings.Split(*cascade, ",")); err != nil {
				return fail(err)
			}
		}
		return 0
	})
}

// withBubbles runs prog, giving it a function that runs f in a fresh
// testing/synctest bubble (f's context is the bubble's), then exits with
// prog's code. synctest.Test needs a *testing.T, which only the testing
// package makes: testing.Main runs prog as the single test of this program,
// and each bubble opens on its T.
func withBubbles(prog func(bubble func(f func(context.Context))) int) {
	matchAll := func(string, string) (bool, error) { return true, nil }
	testing.Main(matchAll, []testing.InternalTest{{Name: "outage", F: func(t *testing.T) {
		code := prog(func(f func(context.Context)) {
			synctest.Test(t, func(t *testing.T) { f(t.Context()) })
		})
		os.Exit(code) // before testing.Main prints its own verdict
	}}}, nil, nil)
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "outage:", err)
	return 1
}

// report prints res: the scenario, its anchor and the arms' table.
func report(w io.Writer, res *scenario.Result, markdown bool) error {
	sc := res.Scenario
	fmt.Fprintf(w, "%s: %s\nanchor: %s\n\n", sc.Name, sc.Summary, sc.Anchor)
	if err := res.WriteTable(w, markdown); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w)
	return err
}

// playFamily plays n cells of the brownout family of seed (the hang family
// with hangs, the wide family with wide), each in its own bubble, geminiguard as replicas Clients
// sharing one state, and prints the family's report with the worst cells,
// and how long it took; with cells set, it writes every cell's figures
// there too.
func playFamily(bubble func(func(context.Context)), n int, seed uint64, hangs, wide bool, replicas, worst int, markdown bool, cells string) int {
	began := time.Now()
	fr := &scenario.FamilyReport{Seed: seed, Hangs: hangs, Wide: wide}
	draw := scenario.Family
	switch {
	case hangs:
		draw = scenario.HangFamily
	case wide:
		draw = scenario.WideFamily
	}
	for i, c := range draw(seed, n) {
		c.Replicas = replicas
		bubble(func(ctx context.Context) { fr.Cells = append(fr.Cells, scenario.PlayCell(ctx, c)) })
		if (i+1)%20 == 0 {
			fmt.Fprintf(os.Stderr, "outage: %d of %d cells played\n", i+1, n)
		}
	}
	if err := fr.Write(os.Stdout, markdown, worst); err != nil {
		return fail(err)
	}
	if cells != "" {
		if err := writeCells(fr, cells); err != nil {
			return fail(err)
		}
	}
	fmt.Printf("played in %v of wall time\n", time.Since(began).Round(100*time.Millisecond))
	return 0
}

// writeCells writes fr's cells to the file at path (FamilyReport.WriteCells).
func writeCells(fr *scenario.FamilyReport, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := fr.WriteCells(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replay plays the family's cell of seed, geminiguard as replicas Clients
// sharing one state, and prints its arms' table.
func replay(bubble func(func(context.Context)), seed uint64, replicas int, markdown bool) int {
	c := scenario.DrawCell(seed)
	c.Replicas = replicas
	var res *scenario.Result
	bubble(func(ctx context.Context) { res = scenario.Run(ctx, c.Scenario()) })
	if err := report(os.Stdout, res, markdown); err != nil {
		return fail(err)
	}
	return 0
}

// smoke sends three short prompts to the real Gemini API through
// geminiguard, and prints which model answered each, after how long and how
// many attempts.
func smoke(ctx context.Context, cascade []string) error {
	key := os.Getenv("GEMINI_API_KEY")
	if key == "" {
		return errors.New("-live needs GEMINI_API_KEY")
	}
	c, err := geminiguard.New(ctx, geminiguard.WithAPIKey(key), geminiguard.WithCascade(cascade...),
		geminiguard.WithTimeouts(20*time.Second, time.Minute))
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("live: cascade %s\n", strings.Join(cascade, " → "))
	for i := range 3 {
		var rec geminiguard.CallRecord
		resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(fmt.Sprintf("Reply with the number %d and nothing else.", i+1)), nil)
		if err != nil {
			fmt.Printf("  call %d: %v after %v (%d attempts): %v\n", i+1, geminiguard.Classify(err).Class, rec.Latency.Round(time.Millisecond), len(rec.Attempts), err)
			continue
		}
		fmt.Printf("  call %d: %q from %s in %v (%d attempts)\n", i+1, strings.TrimSpace(resp.Text()), rec.Model, rec.Latency.Round(time.Millisecond), len(rec.Attempts))
	}
	return nil
}
