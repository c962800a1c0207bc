package scenario

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"testing/synctest"

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
