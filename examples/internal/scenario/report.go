package scenario

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// Never is the latency of a percentile that falls on failed calls: those
// users never got an answer.
const Never = time.Duration(math.MaxInt64)

// Summary is an arm's run reduced to the report's columns.
type Summary struct {
	Arm      string
	StartErr error // the arm could not start; the other fields are zero
	Calls    int
	Answered int     // calls that got a good answer (Call.OK)
	Success  float64 // Answered / Calls
	// Mean is the mean time to a good answer over the answered calls. P50,
	// P95 and P99 are percentiles (nearest rank) of the time to a good
	// answer over all calls, a failed call counting as never answered: a
	// percentile that falls on failed calls is Never.
	Mean, P50, P95, P99 time.Duration
	// FailIn is the mean time until a failed call returned its error (how
	// fast failures come back); 0 when no call failed.
	FailIn time.Duration
	// Upstream is the fake's count of generate and stream requests
	// (ArmRun.Total); PerCall is Upstream / Calls.
	Upstream int
	PerCall  float64
	Got429   int // upstream answers with status 429
	// Primary counts the answered calls that the cascade's first model
	// answered; PrimaryShare is Primary / Calls (failed calls count in the
	// denominator). Fallbacks counts the answered calls that the primary
	// did not answer (another model, or a configured last resort did);
	// FallbackRate is Fallbacks / Calls. Primary + Fallbacks = Answered.
	Primary      int
	PrimaryShare float64
	Fallbacks    int
	FallbackRate float64
	// Extra holds the scenario's Measures, in order.
	Extra []float64
}

// Summarize reduces r, an arm's run of sc, to a Summary.
func Summarize(sc *Scenario, r *ArmRun) Summary {
	s := Summary{Arm: r.Arm, StartErr: r.StartErr}
	if r.StartErr != nil {
		return s
	}
	s.Calls, s.Upstream = len(r.Calls), r.Total
	var answered []time.Duration
	var sum, failSum time.Duration
	for _, c := range r.Calls {
		switch {
		case c.OK:
			answered = append(answered, c.Latency)
			sum += c.Latency
			if sc.primary(c.Outcome) {
				s.Primary++
			} else {
				s.Fallbacks++
			}
		default:
			failSum += c.Latency
		}
	}
	s.Answered = len(answered)
	slices.Sort(answered)
	if s.Calls > 0 {
		s.Success = float64(s.Answered) / float64(s.Calls)
		s.PerCall = float64(s.Upstream) / float64(s.Calls)
		s.PrimaryShare = float64(s.Primary) / float64(s.Calls)
		s.FallbackRate = float64(s.Fallbacks) / float64(s.Calls)
	}
	if s.Answered > 0 {
		s.Mean = sum / time.Duration(s.Answered)
	}
	if failed := s.Calls - s.Answered; failed > 0 {
		s.FailIn = failSum / time.Duration(failed)
	}
	s.P50, s.P95, s.P99 = percentile(answered, s.Calls, 0.50), percentile(answered, s.Calls, 0.95), percentile(answered, s.Calls, 0.99)
	for _, u := range r.Upstream {
		if u.Status == 429 {
			s.Got429++
		}
	}
	for _, m := range sc.Measures {
		s.Extra = append(s.Extra, m.Of(sc, r))
	}
	return s
}

// Measure returns the value of the scenario measure called name, NaN when
// there is none.
func (s Summary) Measure(sc *Scenario, name string) float64 {
	for i, m := range sc.Measures {
		if m.Name == name && i < len(s.Extra) {
			return s.Extra[i]
		}
	}
	return math.NaN()
}

// percentile returns the nearest-rank p-th percentile of calls values of
// which the sorted answered are finite and the rest Never.
func percentile(answered []time.Duration, calls int, p float64) time.Duration {
	if calls == 0 {
		return 0
	}
	k := int(math.Ceil(p*float64(calls))) - 1
	if k >= len(answered) {
		return Never
	}
	return answered[max(k, 0)]
}

// Summaries summarizes every arm of r, in order.
func (r *Result) Summaries() []Summary {
	out := make([]Summary, len(r.Arms))
	for i, a := range r.Arms {
		out[i] = Summarize(r.Scenario, a)
	}
	return out
}

// WriteTable writes r as a table: one row per arm, the standard columns
// then the scenario's measures. markdown selects a Markdown table instead
// of aligned text.
func (r *Result) WriteTable(w io.Writer, markdown bool) error {
	sc := r.Scenario
	head := []string{"arm", "success", "mean", "p50", "p95", "p99", "fail in", "req/call", "429s", "primary", "fallback"}
	for _, m := range sc.Measures {
		head = append(head, m.Name)
	}
	rows := [][]string{head}
	for _, s := range r.Summaries() {
		if s.StartErr != nil {
			rows = append(rows, []string{s.Arm, "did not start: " + s.StartErr.Error()})
			continue
		}
		mean, failIn := secs(s.Mean), secs(s.FailIn)
		if s.Answered == 0 {
			mean = "–"
		}
		if s.Answered == s.Calls {
			failIn = "–"
		}
		row := []string{s.Arm, pct(s.Success), mean, secs(s.P50), secs(s.P95), secs(s.P99), failIn,
			fmt.Sprintf("%.2f", s.PerCall), fmt.Sprint(s.Got429), pct(s.PrimaryShare), pct(s.FallbackRate)}
		for i, m := range sc.Measures {
			row = append(row, value(m.Format, s.Extra[i]))
		}
		rows = append(rows, row)
	}
	return writeRows(w, rows, markdown)
}

// writeRows writes rows, the first one the header, as right-aligned text
// columns or as a Markdown table.
func writeRows(w io.Writer, rows [][]string, markdown bool) error {
	if !markdown {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, row := range rows {
			fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
		}
		return tw.Flush()
	}
	for i, row := range rows {
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | ")); err != nil {
			return err
		}
		if i == 0 {
			sep := make([]string, len(row))
			for j := range sep {
				sep[j] = "---:"
			}
			sep[0] = "---"
			if _, err := fmt.Fprintf(w, "|%s|\n", strings.Join(sep, "|")); err != nil {
				return err
			}
		}
	}
	return nil
}

func pct(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }

// secs formats d in seconds, Never as ∞.
func secs(d time.Duration) string {
	if d == Never {
		return "∞"
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}

// value formats v with format, NaN as "–" and +Inf as ∞.
func value(format string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case math.IsInf(v, 1):
		return "∞"
	}
	return fmt.Sprintf(format, v)
}

// Point is one bucket of an arm's timeline.
type Point struct {
	At      time.Duration // the bucket's start, since the run's start
	Calls   int           // calls started in the bucket
	Success float64       // share of them that got a good answer; NaN without calls
	Latency time.Duration // their mean time to a good answer; 0 without answers
}

// Timeline buckets r's calls by start time, every width.
func Timeline(r *ArmRun, width time.Duration) []Point {
	var out []Point
	var answered []int
	for _, c := range r.Calls {
		b := int(c.Start / width)
		for len(out) <= b {
			out = append(out, Point{At: time.Duration(len(out)) * width})
			answered = append(answered, 0)
		}
		out[b].Calls++
		if c.OK {
			answered[b]++
			out[b].Latency += c.Latency
		}
	}
	for i := range out {
		p := &out[i]
		p.Success = math.NaN()
		if p.Calls > 0 {
			p.Success = float64(answered[i]) / float64(p.Calls)
		}
		if answered[i] > 0 {
			p.Latency /= time.Duration(answered[i])
		}
	}
	return out
}

// diff compares shown, the text a user saw, with want, the whole answer:
// lost is the characters of want missing from shown, dup the characters of
// shown that are not part of want in order (both counted against their
// longest common subsequence, in runes).
func diff(want, shown string) (lost, dup int) {
	if strings.HasPrefix(want, shown) {
		return utf8.RuneCountInString(want) - utf8.RuneCountInString(shown), 0
	}
	a, b := []rune(want), []rune(shown)
	prev, cur := make([]int, len(b)+1), make([]int, len(b)+1)
	for i := range a {
		for j := range b {
			switch {
			case a[i] == b[j]:
				cur[j+1] = prev[j] + 1
			default:
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev, cur = cur, prev
	}
	common := prev[len(b)]
	return utf8.RuneCountInString(want) - common, utf8.RuneCountInString(shown) - common
}

// primary reports whether out was answered by the cascade's primary.
func (sc *Scenario) primary(out Outcome) bool {
	return strings.TrimPrefix(out.Model, "models/") == sc.Models[0].Name
}
