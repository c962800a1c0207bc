package scenario

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// familyTestSize is the small family the test plays.
const familyTestSize = 8

// TestFamily plays a small brownout family: the generator repeats itself
// per seed, every cell's figures are well formed, the oracle's primary
// share is at least geminiguard's in every cell (it must be an upper bound
// to be an oracle), a cell replays from its seed alone, and the report
// names the worst cells by their seed.
func TestFamily(t *testing.T) {
	const seed = 7
	cells := Family(seed, familyTestSize)
	require.Equal(t, cells, Family(seed, familyTestSize), "the same seed draws the same cells")
	require.NotEqual(t, cells, Family(seed+1, familyTestSize), "another seed draws other cells")
	for _, c := range cells {
		require.Equal(t, c, DrawCell(c.Seed), "a cell is drawn from its seed alone")
		assert.GreaterOrEqual(t, c.Calls, familyMinCalls, c.String())
		assert.LessOrEqual(t, c.Calls, familyMaxCalls, c.String())
	}

	fr := &FamilyReport{Seed: seed}
	for _, c := range cells {
		synctest.Test(t, func(t *testing.T) { fr.Cells = append(fr.Cells, PlayCell(t.Context(), c)) })
	}
	for _, r := range fr.Cells {
		name := r.Cell.String()
		for _, s := range []Summary{r.Guard, r.Failsafe, r.Oracle} {
			require.NoError(t, s.StartErr, "%s: %s", s.Arm, name)
			require.Equal(t, r.Cell.Calls, s.Calls, "%s: %s", s.Arm, name)
			assert.Equal(t, s.Answered, s.Primary+s.Fallbacks, "%s: %s", s.Arm, name)
		}
		for _, f := range familyFigures {
			for _, a := range familyArms {
				v := f.of(a.of(r), r.Oracle)
				assert.False(t, math.IsNaN(v) || v < 0, "%s of %s is %v: %s", f.name, a.name, v, name)
			}
		}
		if r.Guard.PrimaryShare > r.Oracle.PrimaryShare {
			// The oracle's share is the most a client gets that sends each
			// call one request: past it, only with more requests than calls.
			assert.Greater(t, r.Guard.PerCall, 1.0, "geminiguard passes the oracle's primary share with one request a call: %s", name)
		}
		assert.Equal(t, 1.0, r.Oracle.PerCall, "the oracle sends one request per call: %s", name)
	}

	var again CellResult
	synctest.Test(t, func(t *testing.T) { again = PlayCell(t.Context(), cells[0]) })
	assert.Equal(t, fr.Cells[0].Guard, again.Guard, "geminiguard's figures replay")
	assert.Equal(t, fr.Cells[0].Oracle, again.Oracle, "the oracle's figures replay")

	var b strings.Builder
	require.NoError(t, fr.Write(&b, false, 2))
	out := b.String()
	t.Log("\n" + out)
	for _, f := range familyFigures {
		assert.Contains(t, out, f.name)
	}
	for _, target := range familyTargets {
		assert.Contains(t, out, target.name)
	}
	assert.Contains(t, out, "cell 7000001")

	b.Reset()
	require.NoError(t, fr.WriteCells(&b))
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, len(fr.Cells), "a line per cell")
	first := fr.Cells[0]
	assert.Equal(t, fmt.Sprintf("%d\t%.2f\t%.2f\t%.2f\t%.2f%%", first.Cell.Seed, shareRatio(first.Guard, first.Oracle),
		p99Ratio(first.Guard, first.Oracle), first.Guard.PerCall, 100*first.Guard.Success), lines[0], "the seed, then geminiguard's figures")
}

// TestHangFamily: hang cells are drawn from their seeds alone, apart from
// the family's; the primary fails fast in a cell's lead-in and hangs a
// share of its requests after it, for HangFor, past any attempt timeout;
// the oracle sends none of its calls into a hang.
func TestHangFamily(t *testing.T) {
	const seed = 7
	cells := drawnFromSeeds(t, seed, HangFamily, HangCellSeed)
	var leadIn *Cell
	for i, c := range cells {
		assert.Positive(t, c.Hang, c.String())
		assert.Contains(t, c.String(), "hang ")
		if c.HangAfter > 0 && leadIn == nil {
			leadIn = &cells[i]
		}
	}
	assert.NotContains(t, Family(seed, familyTestSize), cells[0], "the family draws no hang cell")
	require.NotNil(t, leadIn, "a cell of %d with a lead-in of fast failures", familyTestSize)

	c := *leadIn
	sc := c.Scenario()
	script := sc.Script
	steps := func(from, to time.Duration) (failed, hung, answered int) {
		for i := range 400 {
			at := from + time.Duration(i)*(to-from)/400
			switch st := script(Request{Model: sc.Models[0].Name, Call: i, At: at}); {
			case st.Fault != geminitest.OK:
				failed++
			case st.Latency == familyHangLatency:
				hung++
			default:
				answered++
			}
		}
		return failed, hung, answered
	}
	failed, hung, _ := steps(c.Onset, c.Onset+c.HangAfter)
	assert.Positive(t, failed, "fast failures in the lead-in: %s", c)
	assert.Zero(t, hung, "no hang in the lead-in: %s", c)
	failed, hung, answered := steps(c.Onset+c.HangAfter, c.Onset+c.HangAfter+c.HangFor)
	assert.Zero(t, failed, "no failure in the hang: %s", c)
	assert.InDelta(t, c.Hang, float64(hung)/400, 0.1, "a share Hang hangs: %s", c)
	assert.Equal(t, 400, hung+answered)
	_, hung, _ = steps(c.Onset+c.HangAfter+c.HangFor, c.Onset+c.HangAfter+c.HangFor+time.Minute)
	assert.Zero(t, hung, "the hang ends: %s", c)

	var r CellResult
	synctest.Test(t, func(t *testing.T) { r = PlayCell(t.Context(), cells[0]) })
	assert.Equal(t, cells[0].Calls, r.Oracle.Calls)
	assert.Less(t, r.Oracle.P99, time.Minute, "the oracle waits for no hang: %s", cells[0])
}

// drawnFromSeeds returns familyTestSize cells of family's seed, having
// checked that the seed draws them again the same, and that each is drawn
// from its own seed, seedOf's, alone.
func drawnFromSeeds(t *testing.T, seed uint64, family func(uint64, int) []Cell, seedOf func(uint64, int) uint64) []Cell {
	t.Helper()
	cells := family(seed, familyTestSize)
	require.Equal(t, cells, family(seed, familyTestSize), "the same seed draws the same cells")
	for i, c := range cells {
		require.Equal(t, c, DrawCell(c.Seed), "a cell is drawn from its seed alone")
		assert.Equal(t, seedOf(seed, i), c.Seed)
	}
	return cells
}

// TestWideFamily: the wide family draws the brownout family's kinds of
// cells with answer times spread wide, a call's answer as long on either
// model, past the narrow family's 1.87 times the median and within
// wideCeiling, and the oracle tells its stalls from its long answers by
// the script.
func TestWideFamily(t *testing.T) {
	const seed = 7
	cells := drawnFromSeeds(t, seed, WideFamily, WideCellSeed)
	var stalling *Cell
	for i, c := range cells {
		assert.GreaterOrEqual(t, c.Spread, wideSpreadMin, c.String())
		assert.Less(t, c.Spread, wideSpreadMax, c.String())
		assert.Contains(t, c.String(), "answers spread σ")
		assert.Zero(t, c.Hang, "no hang cell: %s", c)
		if c.Stall > 0 && c.Onset == 0 && stalling == nil {
			stalling = &cells[i]
		}
	}
	assert.NotContains(t, Family(seed, familyTestSize), cells[0], "the brownout family draws no wide cell")
	require.NotNil(t, stalling, "a cell of %d stalling from the start", familyTestSize)

	c := *stalling
	sc := c.Scenario()
	longest, longAnswers, stalls := 0.0, 0, 0
	for call := range 400 {
		r := Request{Model: sc.Models[0].Name, Call: call, At: time.Second}
		primary := sc.Script(r)
		if primary.Fault != geminitest.OK {
			continue
		}
		secondary := sc.Script(Request{Model: sc.Models[1].Name, Call: call, At: time.Second})
		if sc.Stall(r) {
			stalls++
			assert.Equal(t, c.StallFor, primary.Latency)
			continue
		}
		ratio := float64(primary.Latency) / float64(sc.Models[0].Latency)
		longest = max(longest, ratio)
		if ratio > stallFactor {
			longAnswers++
		}
		assert.LessOrEqual(t, primary.Latency, wideCeiling)
		if secondary.Fault == geminitest.OK && primary.Latency < wideCeiling && secondary.Latency < wideCeiling {
			assert.InDelta(t, ratio, float64(secondary.Latency)/float64(sc.Models[1].Latency), 0.01, "a call's answer is as long on either model")
		}
	}
	assert.Positive(t, stalls, "the script's stalls are stalls: %s", c)
	assert.Positive(t, longAnswers, "answers past twice the median, no stall: %s", c)
	assert.Greater(t, longest, 1.87, "past the brownout family's spread: %s", c)
}

// TestCellPlayedByAFleet: a cell with Replicas > 1 plays geminiguard as
// that many Clients sharing one fleet state, the calls spread over them:
// the arm's calls go through the shared state (its round trips), and the
// cell's other arms and workload are the cell's.
func TestCellPlayedByAFleet(t *testing.T) {
	c := Family(1, 1)[0]
	c.Replicas = 3
	assert.Contains(t, c.String(), "geminiguard as 3 replicas")
	var res *Result
	synctest.Test(t, func(t *testing.T) { res = Run(t.Context(), c.Scenario()) })
	require.Len(t, res.Arms, 3)
	guard := res.Arms[0]
	assert.Equal(t, "geminiguard", guard.Arm)
	assert.Len(t, guard.Calls, c.Calls)
	assert.Greater(t, guard.Figures[FigRoundTrips], float64(guard.Figures[FigWarmUps]), "the replicas' calls went through the shared state")
	assert.Equal(t, float64(3), guard.Figures[FigWarmUps], "one warm-up a replica")

	c.Replicas = 1
	synctest.Test(t, func(t *testing.T) { res = Run(t.Context(), c.Scenario()) })
	assert.NotContains(t, res.Arms[0].Figures, FigRoundTrips, "one process: no shared state")
}
