// Package paired times competing calls in one benchmark loop: each turn
// makes every call once, the one going first changing every turn, so that
// the drift and noise of a shared machine fall on all of them alike. The
// overhead benchmarks of geminiguard (its own chain, and end to end in
// examples/internal/scenario) use it to report ratios measured side by side.
package paired

import (
	"testing"
	"time"
)

// Run makes the calls in turn until b's loop ends and returns each one's mean
// time per call, in nanoseconds, in the order of calls. It fails b at the
// first error. b's ns/op is then the time of one turn, all calls together.
func Run(b *testing.B, calls []func() error) []float64 {
	b.Helper()
	spent := make([]time.Duration, len(calls))
	turn := 0
	for b.Loop() {
		turn++
		for j := range calls {
			i := (turn + j) % len(calls)
			start := time.Now()
			if err := calls[i](); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(start)
		}
	}
	per := make([]float64, len(calls))
	for i, d := range spent {
		per[i] = float64(d) / float64(b.N)
	}
	return per
}

// Bench runs each call alone as a sub-benchmark of b named by names, with
// allocations reported, then all of them in turn (Run) as the sub-benchmark
// "paired", which reports each one's time per call as the metric
// "<name>-ns" and then whatever report adds from those times.
func Bench(b *testing.B, names []string, calls []func() error, report func(b *testing.B, per []float64)) {
	b.Helper()
	for i, name := range names {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := calls[i](); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("paired", func(b *testing.B) {
		per := Run(b, calls)
		for i, name := range names {
			b.ReportMetric(per[i], name+"-ns")
		}
		report(b, per)
	})
}
