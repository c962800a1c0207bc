package scenario

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/geminiguard/geminiguard/geminitest"
)

// The brownout family of issue 19: brownouts drawn at random from ranges
// instead of one script each, so that a defence is judged on brownouts it
// was not tuned on. Each cell is a Scenario played against geminiguard at
// its defaults, the failsafe-go stack with failsafe-go's quantile
// HedgePolicy, and the oracle.

// Cell is one brownout of the family: its parameters, all drawn from Seed
// by DrawCell, so that the seed alone replays it. It is a plain value.
type Cell struct {
	Seed uint64
	// Thinking cells have nothing wrong: every request of both models is
	// slow (long thinking, Secondary's median on both); the brownout fields
	// are zero.
	Thinking bool
	// Fail is the share of the primary's requests that fail with 503
	// during the brownout. With Burst > 0 the failures come in bad spells
	// in which the primary fails every request, Burst requests long on
	// average (at the workload's mean rate of calls); otherwise each
	// request fails independently.
	Fail  float64
	Burst float64
	// SecondaryFail is the share of the secondary's requests that fail
	// with 503, independently, for the whole run.
	SecondaryFail float64
	// Secondary is the secondary's median latency; Ratio the primary's
	// over it.
	Secondary time.Duration
	Ratio     float64
	// Stall is the share of the primary's requests during the brownout
	// that stall StallFor before they answer, drawn per request.
	Stall    float64
	StallFor time.Duration
	// Callers users send the calls back to back, each Think after its
	// previous call returned; 0: Poisson arrivals at Rate calls a second.
	Callers int
	Think   time.Duration
	Rate    float64
	// Run is the run's length as drawn; Calls the calls sent over it (see
	// familyCalls for how a long run is thinned).
	Run   time.Duration
	Calls int
	// Onset is the brownout's start since the run's; 0: it is there from
	// the Client's start.
	Onset time.Duration
	// Hang cells (HangFamily) only: from Onset+HangAfter, for HangFor, a
	// share Hang of the primary's requests hang (familyHangLatency, past
	// any attempt timeout); before it, from Onset, the primary fails fast
	// as Fail and Burst say (a model that sheds load, then hangs). Their
	// stall fields are zero.
	HangAfter, HangFor time.Duration
	Hang               float64
	// Spread, above 0, is the log-normal sigma of both models' answer
	// times, as the lengths of the answers spread them (WideFamily): a
	// call's answer is as long, in the same ratio to its model's median,
	// whichever model writes it, up to wideCeiling. 0: the usual spread of
	// one prompt size (latencySigma, drawn per model).
	Spread float64
	// Replicas, when more than one, plays geminiguard as that many
	// Clients sharing one fleet state (a memory store behind a simulated
	// round trip), call i through replica i mod Replicas: a fleet behind a
	// load balancer. Not drawn: the player sets it (outage's -replicas).
	Replicas int
}

// The family's ranges (issue 19) and bounds.
const (
	familyFailMin, familyFailMax     = 0.05, 0.60
	familyBurstMin, familyBurstMax   = 1.0, 20.0
	familySecondaryFailMax           = 0.10
	familyRatioMin, familyRatioMax   = 0.3, 3.0
	familyStallMax                   = 0.30
	familyStallMin, familyStallLong  = 5 * time.Second, 60 * time.Second
	familyCallersMax                 = 64
	familyRunMin, familyRunMax       = 20 * time.Second, 20 * time.Minute
	familySecondaryMin, familySecMax = 500 * time.Millisecond, 2 * time.Second
	// Thinking cells' median latency: under the 60s attempt timeout of
	// geminiguard's defaults even at the spread's ceiling (1.87×).
	familyThinkMin, familyThinkMax = 10 * time.Second, 30 * time.Second
	// familyMaxCalls bounds a cell's calls, so that a family of 200 cells
	// plays in minutes: a longer or busier cell keeps its run length and
	// its concurrency, and its users pause between calls (Think) or its
	// arrivals thin out. familyMinCalls is the fewest calls a cell sends: a
	// short run of one slow user lasts longer than drawn.
	familyMaxCalls = 400
	familyMinCalls = 10
	// FamilyHedgeQuantile is the quantile after which the failsafe arm's
	// HedgePolicy hedges in the family: The Tail at Scale's p95.
	FamilyHedgeQuantile = 0.95
)

// The family's kinds of cells, by the share of cells they take: 503
// brownouts, latency brownouts (stalls, no errors), both at once, and
// long thinking (nothing wrong).
const (
	familyThinkingShare = 0.10
	familyErrorsShare   = 0.35
	familyStallsShare   = 0.25
	// the rest: both errors and stalls
)

// The hang cells' ranges (HangFamily): how long a hang lasts, and the
// fast-failure lead-in before it.
const (
	familyHangMin, familyHangMax   = 10 * time.Second, 5 * time.Minute
	familyHangShareMin             = 0.3
	familyLeadInMin, familyLeadMax = 2 * time.Second, time.Minute
	familyLeadFailMin              = 0.3
	// familyHangLatency is how long a hanging request takes to answer:
	// past geminiguard's and failsafe-go's attempt timeouts.
	familyHangLatency = 10 * time.Minute
	// hangCellOffset sets hang cells' seeds apart from the family's
	// (HangCellSeed): DrawCell tells them by it.
	hangCellOffset = 500_000
)

// The wide family's range (WideFamily): the sigma of answer times spread by
// the answers' lengths, and the longest an answer takes, under the 60s
// attempt timeout of geminiguard's defaults.
const (
	wideSpreadMin, wideSpreadMax = 0.4, 1.0
	wideCeiling                  = 50 * time.Second
	// wideCellOffset sets wide cells' seeds apart (WideCellSeed).
	wideCellOffset = 700_000
)

// CellSeed returns the seed of cell i (from 0) of the family of seed:
// seed·1,000,000 + i + 1, so that it reads as both.
func CellSeed(seed uint64, i int) uint64 {
	return seed*1_000_000 + uint64(i) + 1
}

// Family returns the n cells of the family of seed, drawn by DrawCell from
// CellSeed(seed, i).
func Family(seed uint64, n int) []Cell {
	return drawCells(n, func(i int) uint64 { return CellSeed(seed, i) })
}

// drawCells returns n cells, cell i drawn by DrawCell from seedOf(i).
func drawCells(n int, seedOf func(i int) uint64) []Cell {
	out := make([]Cell, n)
	for i := range out {
		out[i] = DrawCell(seedOf(i))
	}
	return out
}

// HangCellSeed returns the seed of hang cell i (from 0) of the hang family
// of seed: seed·1,000,000 + 500,000 + i + 1.
func HangCellSeed(seed uint64, i int) uint64 {
	return seed*1_000_000 + hangCellOffset + uint64(i) + 1
}

// HangFamily returns the n hang cells of seed, drawn by DrawCell from
// HangCellSeed(seed, i): brownouts in which the primary hangs, a share of
// its requests never answering, for 10 s to 5 min, from the Client's start
// or later, half of them after a lead-in of fast failures (2 s to a
// minute, 30–100% of the requests failing, independently or in bad
// spells). The brownout family draws stalls up to 60 s on at most 30% of
// the requests, never a model that sheds load and then hangs: a rule that
// lets calls to a model a probe or a silence vouches for is judged on
// these too.
func HangFamily(seed uint64, n int) []Cell {
	return drawCells(n, func(i int) uint64 { return HangCellSeed(seed, i) })
}

// WideCellSeed returns the seed of wide cell i (from 0) of the wide family
// of seed: seed·1,000,000 + 700,000 + i + 1.
func WideCellSeed(seed uint64, i int) uint64 {
	return seed*1_000_000 + wideCellOffset + uint64(i) + 1
}

// WideFamily returns the n wide cells of seed, drawn by DrawCell from
// WideCellSeed(seed, i): the brownout family's kinds of cells and ranges,
// with answer times spread as the lengths of real answers spread them
// (log-normal, sigma 0.4–1.0: the slowest answer in a hundred 2.5–10 times
// the median; LLM latency's tail is the length of its output), the same
// length for a call on either model. The brownout family's answers stay
// within 1.87 times their median, under the learned cut's floor of twice
// it: a cut judged on that family alone never meets a long answer.
func WideFamily(seed uint64, n int) []Cell {
	return drawCells(n, func(i int) uint64 { return WideCellSeed(seed, i) })
}

// cellDraws draws a cell's parameters from its seed's stream: uniform
// within a range, or log-uniform for scales (bursts, latencies, callers,
// runs).
type cellDraws struct{ r *rand.Rand }

func (d cellDraws) uniform(lo, hi float64) float64 { return lo + d.r.Float64()*(hi-lo) }

func (d cellDraws) logUniform(lo, hi float64) float64 {
	return lo * math.Exp(d.r.Float64()*math.Log(hi/lo))
}

// DrawCell returns the cell of seed: each parameter drawn from its range
// (uniform, or log-uniform for scales: bursts, latencies, callers, runs).
// A seed of HangCellSeed's draws a hang cell (drawHang).
func DrawCell(seed uint64) Cell {
	r := rng(seed, "cell")
	d := cellDraws{r}
	logUniform, uniform := d.logUniform, d.uniform
	c := Cell{Seed: seed, Ratio: 1}
	if i := seed % 1_000_000; i > hangCellOffset && i <= wideCellOffset {
		c.drawHang(d)
		return c
	}
	c.Run = time.Duration(logUniform(float64(familyRunMin), float64(familyRunMax))).Round(time.Second)
	kind := r.Float64()
	switch {
	case kind < familyThinkingShare:
		c.Thinking = true
		c.Secondary = time.Duration(uniform(float64(familyThinkMin), float64(familyThinkMax))).Round(time.Second)
	default:
		c.Secondary = time.Duration(logUniform(float64(familySecondaryMin), float64(familySecMax))).Round(10 * time.Millisecond)
		c.Ratio = math.Round(100*logUniform(familyRatioMin, familyRatioMax)) / 100
		c.SecondaryFail = uniform(0, familySecondaryFailMax)
		stalls := kind >= familyThinkingShare+familyErrorsShare
		errs := kind < familyThinkingShare+familyErrorsShare || kind >= familyThinkingShare+familyErrorsShare+familyStallsShare
		if errs {
			c.Fail = uniform(familyFailMin, familyFailMax)
			if r.Float64() < 0.5 {
				c.Burst = math.Round(10*logUniform(familyBurstMin, familyBurstMax)) / 10
			}
		}
		if stalls {
			c.Stall = uniform(0, familyStallMax)
			c.StallFor = time.Duration(uniform(float64(familyStallMin), float64(familyStallLong))).Round(time.Second)
		}
		if r.Float64() >= 0.5 {
			c.Onset = time.Duration(uniform(0.1, 0.6) * float64(c.Run)).Round(time.Second)
		}
	}
	// Concurrency: users back to back, or Poisson arrivals that keep as
	// many calls in flight on average.
	load := logUniform(1, familyCallersMax+1)
	closed := r.Float64() < 0.5
	c.familyCalls(int(load), load, closed)
	if seed%1_000_000 > wideCellOffset {
		c.Spread = uniform(wideSpreadMin, wideSpreadMax)
	}
	return c
}

// familyCalls sets the workload of c: callers users back to back (closed)
// or Poisson arrivals with load calls in flight on average, over c.Run,
// within familyMinCalls and familyMaxCalls (see them).
func (c *Cell) familyCalls(callers int, load float64, closed bool) {
	latency := c.primaryLatency().Seconds()
	run := c.Run.Seconds()
	if closed {
		c.Callers = max(1, min(callers, familyCallersMax))
		natural := int(float64(c.Callers) * run / latency)
		c.Calls = max(familyMinCalls, min(natural, familyMaxCalls))
		if natural > familyMaxCalls {
			c.Think = time.Duration((float64(c.Callers)*run/float64(c.Calls) - latency) * float64(time.Second)).Round(10 * time.Millisecond)
		}
		return
	}
	c.Calls = max(familyMinCalls, min(int(load/latency*run), familyMaxCalls))
	c.Rate = float64(c.Calls) / run
}

// drawHang draws the parameters of hang cell c (HangFamily) from d: the
// family's latencies, secondary and workload, a hang and, for half of the
// cells, a lead-in of fast failures before it.
func (c *Cell) drawHang(d cellDraws) {
	c.Run = time.Duration(d.logUniform(float64(familyRunMin), float64(familyRunMax))).Round(time.Second)
	c.Secondary = time.Duration(d.logUniform(float64(familySecondaryMin), float64(familySecMax))).Round(10 * time.Millisecond)
	c.Ratio = math.Round(100*d.logUniform(familyRatioMin, familyRatioMax)) / 100
	c.SecondaryFail = d.uniform(0, familySecondaryFailMax)
	if d.r.Float64() >= 0.5 {
		c.Onset = time.Duration(d.uniform(0.1, 0.6) * float64(c.Run)).Round(time.Second)
	}
	if d.r.Float64() < 0.5 {
		c.HangAfter = time.Duration(d.uniform(float64(familyLeadInMin), float64(familyLeadMax))).Round(time.Second)
		c.Fail = d.uniform(familyLeadFailMin, 1)
		if d.r.Float64() < 0.5 {
			c.Burst = math.Round(10*d.logUniform(familyBurstMin, familyBurstMax)) / 10
		}
	}
	c.HangFor = time.Duration(d.logUniform(float64(familyHangMin), float64(familyHangMax))).Round(time.Second)
	c.Hang = d.uniform(familyHangShareMin, 1)
	load := d.logUniform(1, familyCallersMax+1)
	c.familyCalls(int(load), load, d.r.Float64() < 0.5)
}

// primaryLatency is the primary's median latency.
func (c Cell) primaryLatency() time.Duration {
	return time.Duration(float64(c.Secondary) * c.Ratio).Round(10 * time.Millisecond)
}

// String names c by its seed and its parameters.
func (c Cell) String() string {
	return fmt.Sprintf("cell %d: %s", c.Seed, c.params())
}

// params describes c's parameters in one line.
func (c Cell) params() string {
	var b strings.Builder
	switch {
	case c.Thinking:
		fmt.Fprintf(&b, "long thinking %v on both", c.Secondary)
	default:
		var parts []string
		if c.Fail > 0 {
			spell := "independent"
			if c.Burst > 0 {
				spell = fmt.Sprintf("bursts of %.1f", c.Burst)
			}
			parts = append(parts, fmt.Sprintf("503 %.0f%% %s", 100*c.Fail, spell))
		}
		if c.Stall > 0 {
			parts = append(parts, fmt.Sprintf("stall %.0f%%×%v", 100*c.Stall, c.StallFor))
		}
		if c.Hang > 0 {
			lead := ""
			if c.HangAfter > 0 {
				lead = fmt.Sprintf(" after %v of 503s", c.HangAfter)
			}
			parts = append(parts, fmt.Sprintf("hang %.0f%% for %v%s", 100*c.Hang, c.HangFor, lead))
		}
		onset := "from start"
		if c.Onset > 0 {
			onset = "from " + c.Onset.String()
		}
		fmt.Fprintf(&b, "primary %s %s (%v, %.2f×); secondary 503 %.1f%% %v", strings.Join(parts, ", "), onset,
			c.primaryLatency(), c.Ratio, 100*c.SecondaryFail, c.Secondary)
	}
	if c.Spread > 0 {
		fmt.Fprintf(&b, "; answers spread σ %.2f", c.Spread)
	}
	if c.Callers > 0 {
		fmt.Fprintf(&b, "; %d callers", c.Callers)
		if c.Think > 0 {
			fmt.Fprintf(&b, " think %v", c.Think)
		}
	} else {
		fmt.Fprintf(&b, "; Poisson %.2f/s", c.Rate)
	}
	fmt.Fprintf(&b, "; run %v, %d calls", c.Run, c.Calls)
	if c.Replicas > 1 {
		fmt.Fprintf(&b, "; geminiguard as %d replicas", c.Replicas)
	}
	return b.String()
}

// FamilyArms are the arms a cell is played against: geminiguard at its
// defaults (as a fleet of replicas sharing one state, when replicas > 1:
// Cell.Replicas), the failsafe-go stack with its HedgePolicy, the oracle.
func FamilyArms(replicas int) []Arm {
	guard := GeminiguardArm("geminiguard")
	if replicas > 1 {
		guard = fleetArm("geminiguard", replicas, sharedFleet)
	}
	return []Arm{guard, FailsafeArm(), OracleArm()}
}

// Scenario returns c as a scenario of FamilyArms: the primary Flash and the
// secondary gemini-2.5-flash at c's latencies, c's workload and script.
func (c Cell) Scenario() *Scenario {
	sc := &Scenario{
		Name:    fmt.Sprintf("cell %d", c.Seed),
		Summary: c.params(),
		Anchor:  "issue 19: a user's brownout is a draw from a distribution, not one script",
		Models: []Model{
			{Name: flash, Latency: c.primaryLatency()},
			{Name: flash25, Latency: c.Secondary},
		},
		Arms:          FamilyArms(c.Replicas),
		HedgeQuantile: FamilyHedgeQuantile,
	}
	if c.Callers > 0 {
		sc.Workload = Workload{Calls: c.Calls, Callers: c.Callers, Think: c.Think}
	} else {
		sc.Workload = Workload{Arrivals: poisson(c.Seed, c.Calls, c.Rate)}
	}
	if !c.Thinking {
		sc.Window = [2]time.Duration{c.Onset, c.Run}
	}
	sc.Script = c.script(sc)
	if c.Spread > 0 { // a long answer is no stall: only the script knows which are
		spells := c.spells()
		sc.Stall = func(r Request) bool { return r.Model == flash && c.stalls(spells, r) }
	}
	return sc
}

// stalls reports whether the primary's request r stalls StallFor (the
// brownout is on, r does not fail, and its stall draw says so).
func (c Cell) stalls(spells []time.Duration, r Request) bool {
	return !c.Thinking && c.Hang == 0 && r.At >= c.Onset && !c.fails(spells, r) &&
		draw(c.Seed, "stall", r.Model, r.Call, r.At) < c.Stall
}

// wideLatency returns the answer time of call on a model of median
// latency in a wide cell (Spread): the median scaled by the call's length,
// the same draw on every model, within wideCeiling.
func (c Cell) wideLatency(median time.Duration, call int) time.Duration {
	z := rng(c.Seed, "length", call).NormFloat64()
	z = max(-2.5, min(2.5, z))
	return min(wideCeiling, time.Duration(float64(median)*math.Exp(c.Spread*z)))
}

// script returns c's script for sc (c.Scenario()).
func (c Cell) script(sc *Scenario) Script {
	spells := c.spells()
	primary := sc.Models[0].Name
	return func(r Request) geminitest.Step {
		step := answer(c.Seed, sc.mustModel(r.Model), r)
		if c.Spread > 0 {
			step.Latency = c.wideLatency(sc.mustModel(r.Model).Latency, r.Call)
		}
		switch {
		case c.Thinking:
			return step
		case r.Model != primary:
			if draw(c.Seed, "503", r.Model, r.Call, r.At) < c.SecondaryFail {
				return overloaded()
			}
			return step
		case r.At < c.Onset:
			return step
		case c.Hang > 0:
			switch at := r.At - c.Onset; {
			case at < c.HangAfter && c.fails(spells, r):
				return overloaded()
			case at >= c.HangAfter && at < c.HangAfter+c.HangFor && draw(c.Seed, "hang", r.Model, r.Call, r.At) < c.Hang:
				step.Latency = familyHangLatency
			}
			return step
		case c.fails(spells, r):
			return overloaded()
		case c.stalls(spells, r):
			step.Latency = c.StallFor
		}
		return step
	}
}

// fails reports whether the primary's request r fails: in a bad spell when
// the failures come in bursts, else by a draw of its own.
func (c Cell) fails(spells []time.Duration, r Request) bool {
	if c.Burst == 0 {
		return draw(c.Seed, "503", r.Model, r.Call, r.At) < c.Fail
	}
	// spells alternate bad, good, bad, ... from the first boundary on:
	// before the i-th boundary with i odd, a bad spell runs.
	i, found := slices.BinarySearch(spells, r.At)
	if found { // a boundary belongs to the spell it starts
		i++
	}
	return i < len(spells) && i%2 == 1
}

// spells returns the boundaries of c's bad spells when its failures come
// in bursts, nil otherwise: [start₀, end₀, start₁, end₁, ...], from the
// brownout's onset to well past any run's end. A bad spell lasts Burst
// times the workload's mean gap between calls on average, a good one as
// long as makes bad spells take Fail of the time; both exponential.
func (c Cell) spells() []time.Duration {
	if c.Burst == 0 {
		return nil
	}
	r := rng(c.Seed, "spells")
	gap := float64(c.Run) / float64(c.Calls)
	bad := c.Burst * gap
	good := bad * (1 - c.Fail) / c.Fail
	end := 3*c.Run + 10*time.Minute
	at := c.Onset
	var out []time.Duration
	if r.Float64() >= c.Fail { // the brownout may begin in a good spell
		at += time.Duration(r.ExpFloat64() * good)
	}
	for at < end {
		out = append(out, at)
		at += time.Duration(r.ExpFloat64() * bad)
		out = append(out, at)
		at += time.Duration(r.ExpFloat64() * good)
	}
	return out
}

// CellResult is one cell played: each arm's summary.
type CellResult struct {
	Cell                    Cell
	Guard, Failsafe, Oracle Summary
}

// PlayCell plays c against FamilyArms. Like Run, it must be called inside a
// testing/synctest bubble.
func PlayCell(ctx context.Context, c Cell) CellResult {
	res := Run(ctx, c.Scenario())
	out := CellResult{Cell: c}
	for _, s := range res.Summaries() {
		switch s.Arm {
		case "geminiguard":
			out.Guard = s
		case "failsafe":
			out.Failsafe = s
		case "oracle":
			out.Oracle = s
		}
	}
	return out
}
