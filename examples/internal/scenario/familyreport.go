package scenario

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
)

// FamilyReport is a family played: its seed and every cell's result, in
// the family's order.
type FamilyReport struct {
	Seed  uint64
	Cells []CellResult
	// Hangs: the cells are HangFamily's, not Family's; Wide: WideFamily's.
	Hangs, Wide bool
}

// familyFigure is one of the per-cell figures of an arm the family reports.
type familyFigure struct {
	name   string
	format string
	// of is the figure of arm s in a cell whose oracle did o.
	of func(s, o Summary) float64
	// lowWorse: the lowest value is the worst (else the highest).
	lowWorse bool
}

// familyFigures are the family's figures (issue 19): primary share and p99
// relative to the oracle's, requests per call, success.
var familyFigures = []familyFigure{
	{name: "primary share ÷ oracle's", format: "%.2f", of: shareRatio, lowWorse: true},
	{name: "p99 ÷ oracle's", format: "%.2f", of: p99Ratio},
	{name: "requests per call", format: "%.2f", of: func(s, _ Summary) float64 { return s.PerCall }},
	{name: "success", format: "%.2f%%", of: func(s, _ Summary) float64 { return 100 * s.Success }, lowWorse: true},
}

// shareRatio is s's primary share over o's: 1 when both are 0, +Inf when
// only o's is.
func shareRatio(s, o Summary) float64 {
	switch {
	case o.Primary > 0:
		return s.PrimaryShare / o.PrimaryShare
	case s.Primary > 0:
		return math.Inf(1)
	}
	return 1
}

// p99Ratio is s's p99 over o's: +Inf when s's p99 falls on failed calls
// and o's does not, 1 when both do, 0 when only o's does.
func p99Ratio(s, o Summary) float64 {
	switch {
	case s.P99 == Never && o.P99 == Never:
		return 1
	case s.P99 == Never:
		return math.Inf(1)
	case o.P99 == Never:
		return 0
	case o.P99 == 0:
		return 1
	}
	return float64(s.P99) / float64(o.P99)
}

// familyTarget is one target of issue 19's Targets section, met when at
// least need of the cells it applies to meet it.
type familyTarget struct {
	name string
	need float64
	// applies selects the cells the target is about; nil: every cell.
	applies func(CellResult) bool
	// meets reports whether arm s meets it in cell r.
	meets func(s Summary, r CellResult) bool
	// guardOnly: about geminiguard against the failsafe arm.
	guardOnly bool
}

var familyTargets = []familyTarget{
	{name: "primary share ≥ 0.9× oracle's", need: 0.9, meets: func(s Summary, r CellResult) bool { return shareRatio(s, r.Oracle) >= 0.9 }},
	{name: "primary share ≥ 0.75× oracle's", need: 1, meets: func(s Summary, r CellResult) bool { return shareRatio(s, r.Oracle) >= 0.75 }},
	{name: "p99 ≤ 2× oracle's", need: 0.9, meets: func(s Summary, r CellResult) bool { return p99Ratio(s, r.Oracle) <= 2 }},
	{name: "p99 ≤ 3× oracle's", need: 1, meets: func(s Summary, r CellResult) bool { return p99Ratio(s, r.Oracle) <= 3 }},
	{name: "≤ 1.3 requests per call", need: 1, meets: func(s Summary, _ CellResult) bool { return s.PerCall <= 1.3 }},
	{name: "≤ 1.05 requests per call, long thinking", need: 1, applies: func(r CellResult) bool { return r.Cell.Thinking },
		meets: func(s Summary, _ CellResult) bool { return s.PerCall <= 1.05 }},
	{name: "success ≥ 99.9% where the oracle has 100%", need: 1, applies: func(r CellResult) bool { return r.Oracle.Success == 1 },
		meets: func(s Summary, _ CellResult) bool { return s.Success >= 0.999 }},
	{name: "not behind failsafe+hedge on primary share and p99", need: 0.9, guardOnly: true, meets: func(s Summary, r CellResult) bool {
		return s.PrimaryShare >= r.Failsafe.PrimaryShare && s.P99 <= r.Failsafe.P99
	}},
}

// familyArms are the arms the report compares with the oracle, with their
// names in it.
var familyArms = []struct {
	name string
	of   func(CellResult) Summary
}{
	{"geminiguard", func(r CellResult) Summary { return r.Guard }},
	{"failsafe+hedge", func(r CellResult) Summary { return r.Failsafe }},
}

// WriteCells writes geminiguard's figures in every cell, one line per
// cell in the family's order: the cell's seed, then each of the family's
// figures (primary share and p99 ÷ the oracle's, requests per call,
// success in %), tab-separated. Two builds' files compare cell by cell
// (join, diff), where the report's distributions hide which cells moved.
func (fr *FamilyReport) WriteCells(w io.Writer) error {
	for _, r := range fr.Cells {
		line := fmt.Sprint(r.Cell.Seed)
		for _, f := range familyFigures {
			line += "\t" + fmt.Sprintf(f.format, f.of(r.Guard, r.Oracle))
		}
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// values returns figure f of arm over the cells, in the cells' order.
func (fr *FamilyReport) values(f familyFigure, arm func(CellResult) Summary) []float64 {
	out := make([]float64, len(fr.Cells))
	for i, r := range fr.Cells {
		out[i] = f.of(arm(r), r.Oracle)
	}
	return out
}

// quantile returns the nearest-rank q-th quantile of the sorted vs.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	return sorted[max(0, int(math.Ceil(q*float64(len(sorted))))-1)]
}

// distribution returns the p10, p50, p90 and worst of vs under f.
func (f familyFigure) distribution(vs []float64) [4]float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	worst := math.NaN()
	if len(s) > 0 {
		worst = s[len(s)-1]
		if f.lowWorse {
			worst = s[0]
		}
	}
	return [4]float64{quantile(s, 0.1), quantile(s, 0.5), quantile(s, 0.9), worst}
}

// meeting returns the cells target t applies to and the share of them arm
// meets it in (NaN when it applies to none).
func (fr *FamilyReport) meeting(t familyTarget, arm func(CellResult) Summary) (cells int, share float64) {
	met := 0
	for _, r := range fr.Cells {
		if t.applies != nil && !t.applies(r) {
			continue
		}
		cells++
		if t.meets(arm(r), r) {
			met++
		}
	}
	if cells == 0 {
		return 0, math.NaN()
	}
	return cells, float64(met) / float64(cells)
}

// Write writes the family's report: the distribution over the cells of
// each figure for geminiguard and failsafe+hedge, the share of cells
// meeting each target of issue 19, how often geminiguard is ahead of
// failsafe+hedge, and the worst cells of geminiguard for each figure
// (worst of each), named so that they replay. markdown selects Markdown
// tables.
func (fr *FamilyReport) Write(w io.Writer, markdown bool, worst int) error {
	thinking := 0
	for _, r := range fr.Cells {
		if r.Cell.Thinking {
			thinking++
		}
	}
	family := "brownout family"
	switch {
	case fr.Hangs:
		family = "hang family"
	case fr.Wide:
		family = "wide family"
	}
	guard := "geminiguard at its defaults"
	if len(fr.Cells) > 0 && fr.Cells[0].Cell.Replicas > 1 {
		guard += fmt.Sprintf(" as %d replicas sharing one state", fr.Cells[0].Cell.Replicas)
	}
	fmt.Fprintf(w, "%s, seed %d: %d cells (%d long thinking); %s, failsafe-go with its HedgePolicy (p%.0f, budget), oracle\n\n",
		family, fr.Seed, len(fr.Cells), thinking, guard, 100*FamilyHedgeQuantile)
	rows := [][]string{{"figure", "arm", "p10", "p50", "p90", "worst"}}
	for _, f := range familyFigures {
		for _, a := range familyArms {
			d := f.distribution(fr.values(f, a.of))
			rows = append(rows, []string{f.name, a.name, value(f.format, d[0]), value(f.format, d[1]), value(f.format, d[2]), value(f.format, d[3])})
		}
	}
	if err := writeRows(w, rows, markdown); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = [][]string{{"target (issue 19)", "need", "cells", "geminiguard", "failsafe+hedge"}}
	for _, t := range familyTargets {
		cells, g := fr.meeting(t, familyArms[0].of)
		row := []string{t.name, pct(t.need), fmt.Sprint(cells), verdict(g, t.need), "–"}
		if !t.guardOnly {
			_, f := fr.meeting(t, familyArms[1].of)
			row[4] = verdict(f, t.need)
		}
		rows = append(rows, row)
	}
	if err := writeRows(w, rows, markdown); err != nil {
		return err
	}
	fmt.Fprintln(w)
	ahead := func(better func(g, f Summary) bool) float64 {
		n := 0
		for _, r := range fr.Cells {
			if better(r.Guard, r.Failsafe) {
				n++
			}
		}
		return float64(n) / float64(max(1, len(fr.Cells)))
	}
	fmt.Fprintf(w, "geminiguard against failsafe+hedge: ahead on primary share in %s of the cells (not behind in %s), ahead on p99 in %s (not behind in %s), ahead on both in %s (not behind on both in %s)\n\n",
		pct(ahead(func(g, f Summary) bool { return g.PrimaryShare > f.PrimaryShare })),
		pct(ahead(func(g, f Summary) bool { return g.PrimaryShare >= f.PrimaryShare })),
		pct(ahead(func(g, f Summary) bool { return g.P99 < f.P99 })),
		pct(ahead(func(g, f Summary) bool { return g.P99 <= f.P99 })),
		pct(ahead(func(g, f Summary) bool { return g.PrimaryShare > f.PrimaryShare && g.P99 < f.P99 })),
		pct(ahead(func(g, f Summary) bool { return g.PrimaryShare >= f.PrimaryShare && g.P99 <= f.P99 })))
	// The oracle's primary share bounds the clients that send each call
	// one request at its start (see OracleArm); a client that retries the
	// primary or waits out its stall can pass it.
	for _, a := range familyArms {
		above, top := 0, -1
		for i, r := range fr.Cells {
			if v := shareRatio(a.of(r), r.Oracle); v > 1 {
				above++
				if top < 0 || v > shareRatio(a.of(fr.Cells[top]), fr.Cells[top].Oracle) {
					top = i
				}
			}
		}
		fmt.Fprintf(w, "cells where %s's primary share exceeds the oracle's: %d", a.name, above)
		if top >= 0 {
			r := fr.Cells[top]
			fmt.Fprintf(w, ", most in %s (%.2f×)", r.Cell, shareRatio(a.of(r), r.Oracle))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, f := range familyFigures {
		fmt.Fprintf(w, "worst cells of geminiguard on %s:\n", f.name)
		for _, i := range fr.worst(f, worst) {
			r := fr.Cells[i]
			fmt.Fprintf(w, "  %s (failsafe+hedge %s; oracle: primary share %s, p99 %s)\n    %s\n",
				value(f.format, f.of(r.Guard, r.Oracle)), value(f.format, f.of(r.Failsafe, r.Oracle)),
				pct(r.Oracle.PrimaryShare), secs(r.Oracle.P99), r.Cell)
		}
	}
	_, err := fmt.Fprintf(w, "\nreplay a cell: go run ./examples/outage -cell SEED\n")
	return err
}

// worst returns the indexes of the n cells where geminiguard's f is worst,
// worst first (ties in the family's order).
func (fr *FamilyReport) worst(f familyFigure, n int) []int {
	vs := fr.values(f, familyArms[0].of)
	idx := make([]int, len(vs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		if f.lowWorse {
			return cmp.Compare(vs[a], vs[b])
		}
		return cmp.Compare(vs[b], vs[a])
	})
	return idx[:min(n, len(idx))]
}

// verdict formats the share of cells meeting a target and whether it is
// at least need.
func verdict(share, need float64) string {
	switch {
	case math.IsNaN(share):
		return "–"
	case share >= need:
		return pct(share) + " met"
	}
	return pct(share) + " MISSED"
}
