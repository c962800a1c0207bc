package scenario

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/geminiguard/geminiguard"
)

// The scenarios' own measures (Scenario.Measures), each a pure function of
// an arm's run.

// requests counts r's upstream requests to model sent in [from, to).
func requests(r *ArmRun, model string, from, to time.Duration) int {
	n := 0
	for _, u := range r.Upstream {
		if u.Model == model && u.At >= from && u.At < to {
			n++
		}
	}
	return n
}

// meanAfterFirst is the mean latency, in seconds, of the calls after the
// first (answered or not).
func meanAfterFirst(_ *Scenario, r *ArmRun) float64 {
	if len(r.Calls) < 2 {
		return math.NaN()
	}
	var sum time.Duration
	for _, c := range r.Calls[1:] {
		sum += c.Latency
	}
	return (sum / time.Duration(len(r.Calls)-1)).Seconds()
}

// inWindow reports whether d falls in sc's outage window.
func (sc *Scenario) inWindow(d time.Duration) bool {
	return d >= sc.Window[0] && d < sc.Window[1]
}

// outageCalls returns the calls of r that started during sc's window.
func outageCalls(sc *Scenario, r *ArmRun) []Call {
	var out []Call
	for _, c := range r.Calls {
		if sc.inWindow(c.Start) {
			out = append(out, c)
		}
	}
	return out
}

// outageLoad is the upstream requests sent during the window per call
// started during it.
func outageLoad(sc *Scenario, r *ArmRun) float64 {
	calls := len(outageCalls(sc, r))
	if calls == 0 {
		return math.NaN()
	}
	n := 0
	for _, u := range r.Upstream {
		if sc.inWindow(u.At) {
			n++
		}
	}
	return float64(n) / float64(calls)
}

// FastFail is the latency under which a failed call counts as failing
// fast: the 1 ms of fake time a refusal by open breakers may take.
const FastFail = time.Millisecond

// fastFails is the percentage of the calls started during the window that
// returned within FastFail.
func fastFails(sc *Scenario, r *ArmRun) float64 {
	calls := outageCalls(sc, r)
	if len(calls) == 0 {
		return math.NaN()
	}
	n := 0
	for _, c := range calls {
		if c.Latency <= FastFail {
			n++
		}
	}
	return 100 * float64(n) / float64(len(calls))
}

// recovery is the time, in seconds, from the end of the window until the
// first call started after it got its answer; NaN when none did.
func recovery(sc *Scenario, r *ArmRun) float64 {
	first := time.Duration(-1)
	for _, c := range r.Calls {
		if c.OK && c.Start >= sc.Window[1] {
			if end := c.Start + c.Latency; first < 0 || end < first {
				first = end
			}
		}
	}
	if first < 0 {
		return math.NaN()
	}
	return (first - sc.Window[1]).Seconds()
}

// firstSecondLoad is the upstream requests sent in the second that starts
// with the first request answered after the window, over the mean requests
// per second before the window (steady state).
func firstSecondLoad(sc *Scenario, r *ArmRun) float64 {
	steady, recovered := 0, time.Duration(-1)
	for _, u := range r.Upstream {
		if u.At < sc.Window[0] {
			steady++
		}
		if u.At >= sc.Window[1] && u.Status == 200 && recovered < 0 {
			recovered = u.At
		}
	}
	if steady == 0 || recovered < 0 {
		return math.NaN()
	}
	n := 0
	for _, u := range r.Upstream {
		if u.At >= recovered && u.At < recovered+time.Second {
			n++
		}
	}
	return float64(n) / (float64(steady) / sc.Window[0].Seconds())
}

// cutCalls returns the calls of r whose user saw some text but not the
// answer, exactly, without error: streams cut, garbled or reported cut.
func cutCalls(r *ArmRun) []Call {
	var out []Call
	for _, c := range r.Calls {
		if c.Text != "" && !c.OK {
			out = append(out, c)
		}
	}
	return out
}

// reported is the percentage of cut calls whose user got an error, i.e.
// was told the answer is not whole.
func reported(_ *Scenario, r *ArmRun) float64 {
	cut := cutCalls(r)
	if len(cut) == 0 {
		return math.NaN()
	}
	n := 0
	for _, c := range cut {
		if c.Err != nil {
			n++
		}
	}
	return 100 * float64(n) / float64(len(cut))
}

// sumCalls sums f over r's calls.
func sumCalls(r *ArmRun, f func(Call) int) float64 {
	n := 0
	for _, c := range r.Calls {
		n += f(c)
	}
	return float64(n)
}

// featureCalls returns the calls of r that feature sent.
func featureCalls(r *ArmRun, feature string) []Call {
	var out []Call
	for _, c := range r.Calls {
		if c.Feature == feature {
			out = append(out, c)
		}
	}
	return out
}

// featurePercentile returns the measure of the p-th percentile latency, in
// seconds, of the calls feature sent; +Inf when it falls on failed calls.
func featurePercentile(feature string, p float64) func(*Scenario, *ArmRun) float64 {
	return func(_ *Scenario, r *ArmRun) float64 {
		calls := featureCalls(r, feature)
		var answered []time.Duration
		for _, c := range calls {
			if c.OK {
				answered = append(answered, c.Latency)
			}
		}
		slices.Sort(answered)
		d := percentile(answered, len(calls), p)
		if d == Never {
			return math.Inf(1)
		}
		return d.Seconds()
	}
}

// featureSuccess returns the measure of the percentage of the calls feature
// sent that got a good answer.
func featureSuccess(feature string) func(*Scenario, *ArmRun) float64 {
	return func(_ *Scenario, r *ArmRun) float64 {
		calls := featureCalls(r, feature)
		if len(calls) == 0 {
			return math.NaN()
		}
		n := 0
		for _, c := range calls {
			if c.OK {
				n++
			}
		}
		return 100 * float64(n) / float64(len(calls))
	}
}

// batchDrain is the longest time, in seconds, from a batch burst to the
// last answer of its calls: how long the batch job took to get its burst
// done; NaN when no batch call was answered.
func batchDrain(_ *Scenario, r *ArmRun) float64 {
	drain := time.Duration(-1)
	for _, c := range featureCalls(r, batch) {
		if c.OK {
			drain = max(drain, c.Latency)
		}
	}
	if drain < 0 {
		return math.NaN()
	}
	return drain.Seconds()
}

// bulkheadRefused returns the measure of the calls feature sent that a
// bulkhead refused (geminiguard.ErrBulkheadFull).
func bulkheadRefused(feature string) func(*Scenario, *ArmRun) float64 {
	return func(_ *Scenario, r *ArmRun) float64 {
		n := 0
		for _, c := range featureCalls(r, feature) {
			if errors.Is(c.Err, geminiguard.ErrBulkheadFull) {
				n++
			}
		}
		return float64(n)
	}
}
