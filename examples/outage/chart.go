package main

import (
	"image/color"
	"math"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/geminiguard/geminiguard/examples/internal/scenario"
)

// chartBuckets is about how many points each line of the chart has.
const chartBuckets = 30

// windowGrey fills the outage window behind the lines.
var windowGrey = color.Gray{Y: 230}

// writeChart draws res's timeline to path as an SVG: above, the share of
// the calls started in each time bucket that got a good answer; below,
// their mean time to that answer; one line per arm, the outage window
// shaded.
func writeChart(path string, res *scenario.Result) error {
	width := bucketWidth(res)
	success := plot.New()
	success.Title.Text = res.Scenario.Name + ": share of the calls started at t that got a good answer"
	success.Y.Min, success.Y.Max = 0, 1.05
	success.Legend.Left = true
	latency := plot.New()
	latency.Title.Text = "their mean time to a good answer (s)"
	latency.X.Label.Text = "t (fake seconds since the run's start)"
	latency.Legend.Top = true
	latency.Y.Min, latency.Y.Max = 0, 0

	okLines := make([][]plotter.XYs, len(res.Arms))  // per arm, the contiguous runs of points
	latLines := make([][]plotter.XYs, len(res.Arms)) // idem
	for i, arm := range res.Arms {
		var okRun, latRun plotter.XYs
		for _, p := range scenario.Timeline(arm, width) {
			x := (p.At + width/2).Seconds()
			okLines[i], okRun = extend(okLines[i], okRun, x, p.Success, !math.IsNaN(p.Success))
			latLines[i], latRun = extend(latLines[i], latRun, x, p.Latency.Seconds(), p.Latency > 0)
			latency.Y.Max = max(latency.Y.Max, 1.05*p.Latency.Seconds())
		}
		okLines[i], _ = extend(okLines[i], okRun, 0, 0, false)
		latLines[i], _ = extend(latLines[i], latRun, 0, 0, false)
	}
	for _, pl := range []struct {
		p     *plot.Plot
		lines [][]plotter.XYs
	}{{success, okLines}, {latency, latLines}} {
		if err := shade(pl.p, res.Scenario.Window); err != nil {
			return err
		}
		for i, arm := range res.Arms {
			if err := addSeries(pl.p, i, arm.Arm, pl.lines[i]); err != nil {
				return err
			}
		}
	}

	c := vgsvg.New(10*vg.Inch, 8*vg.Inch)
	pad := 3 * vg.Millimeter
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: 2 * pad, PadTop: pad, PadBottom: pad, PadLeft: pad, PadRight: pad}
	canvases := plot.Align([][]*plot.Plot{{success}, {latency}}, tiles, draw.New(c))
	success.Draw(canvases[0][0])
	latency.Draw(canvases[1][0])

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// extend adds the point (x, y) to the current run of points when ok, else
// ends the run (adding it to runs when it has points).
func extend(runs []plotter.XYs, run plotter.XYs, x, y float64, ok bool) ([]plotter.XYs, plotter.XYs) {
	if ok {
		return runs, append(run, plotter.XY{X: x, Y: y})
	}
	if len(run) > 0 {
		runs = append(runs, run)
	}
	return runs, nil
}

// addSeries draws the runs of arm number i as lines (a gap between runs:
// no answer in those buckets), in the arm's colour and dashes, with one
// legend entry.
func addSeries(p *plot.Plot, i int, name string, runs []plotter.XYs) error {
	for j, run := range runs {
		l, err := plotter.NewLine(run)
		if err != nil {
			return err
		}
		l.Color, l.Dashes, l.Width = plotutil.Color(i), plotutil.Dashes(i), 1.5*vg.Points(1)
		p.Add(l)
		if j == 0 {
			p.Legend.Add(name, l)
		}
	}
	return nil
}

// bucketWidth returns a whole number of seconds that cuts the run into about
// chartBuckets buckets.
func bucketWidth(res *scenario.Result) time.Duration {
	var last time.Duration
	for _, arm := range res.Arms {
		for _, c := range arm.Calls {
			last = max(last, c.Start)
		}
	}
	return max(time.Second, (last / chartBuckets).Round(time.Second))
}

// shade fills the window [from, to) of p's time axis, from p.Y.Min to
// p.Y.Max; added before the lines, it stays behind them.
func shade(p *plot.Plot, window [2]time.Duration) error {
	if window[1] <= window[0] {
		return nil
	}
	x0, x1 := window[0].Seconds(), window[1].Seconds()
	box, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: p.Y.Min}, {X: x1, Y: p.Y.Min}, {X: x1, Y: p.Y.Max}, {X: x0, Y: p.Y.Max}})
	if err != nil {
		return err
	}
	box.Color = windowGrey
	box.LineStyle.Width = 0
	p.Add(box)
	return nil
}
