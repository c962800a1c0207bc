package scenario

import (
	"slices"
	"time"

	"github.com/geminiguard/geminiguard/geminitest"
)

// Scenario is a named outage script and the workload that meets it. It is
// a plain value: Run reads it and never changes it.
type Scenario struct {
	Name    string // as on the command line, e.g. "storm503"
	Summary string // what breaks and how, in one line
	// Anchor is the published or seed figure the scenario sets geminiguard
	// against, quoted in BENCHMARKS.md.
	Anchor string
	// Models are the cascade, primary first, as the fake serves them.
	Models []Model
	// Script decides every answer of every model.
	Script Script
	// Retire, when set, takes a model off the API during the run.
	Retire *Retirement
	// Workload is what the users send.
	Workload Workload
	// Align, when set, returns the moment the run starts given the time
	// Run is called (e.g. just before a Pacific midnight). Nil: at once.
	Align func(now time.Time) time.Time
	// Window, when its end is after its start, is the span of the outage
	// since the run's start: the chart shades it.
	Window [2]time.Duration
	// Arms are compared, in this order.
	Arms []Arm
	// HedgeAfter, when > 0, gives the failsafe arm a HedgePolicy on every
	// model with this fixed delay (the latency scenarios): see FailsafeArm.
	HedgeAfter time.Duration
	// HedgeQuantile, when > 0, gives the failsafe arm instead a HedgePolicy
	// on every model that hedges after this quantile of the model's recent
	// durations, within a budget (the brownout family): see FailsafeArm.
	HedgeQuantile float64
	// Stall, when set, says whether the script's answer to r is a stall,
	// which the oracle avoids when another model answers in time; nil: an
	// answer later than stallFactor times its model's median is one (see
	// Model.Latency). A scenario whose answers spread wider than that sets
	// it, so that a long answer is not taken for a stall.
	Stall func(r Request) bool
	// Measures are the scenario's own columns of the report.
	Measures []Measure
}

// Model is one model of a scenario's cascade.
type Model struct {
	Name string
	// Latency is the median time to a full unary answer, or to a stream's
	// first event; each call's latency is spread around it. An answer that
	// takes more than stallFactor times Latency is a stall (the spread
	// stays within 1.87 times): the oracle avoids it when another model
	// answers in time.
	Latency time.Duration
	// ChunkInterval is the time between two events of a streamed answer.
	ChunkInterval time.Duration
	// Chunks is the number of events a streamed answer is split into
	// (0: the fake's default).
	Chunks int
	// Quota is the server's quota, emulated by the fake. The arms that take
	// limits configure it as theirs (geminiguard.WithLimits, a failsafe-go
	// rate limiter), and the oracle never exceeds it.
	Quota geminitest.Quota
}

// Retirement takes Model off the API At a moment since the run's start:
// from then on it is absent from models.list and answers 404 NOT_FOUND.
type Retirement struct {
	Model string
	At    time.Duration
}

// Workload is the calls a scenario sends to each arm.
type Workload struct {
	// Arrivals are the start offsets of the calls since the run's start, in
	// order; nil with Calls > 0 means back to back: each call starts when
	// the previous one returned.
	Arrivals []time.Duration
	// Calls is the number of back-to-back calls when Arrivals is nil.
	Calls int
	// Callers, with Calls, is the number of users sending them at once
	// (0: one): caller k sends calls k, k+Callers, k+2·Callers, ..., each
	// Think after its previous one returned.
	Callers int
	Think   time.Duration
	// Stream sends GenerateContentStream calls instead of GenerateContent.
	Stream bool
	// Feature, when set, names the feature of the app that sends call (e.g.
	// "interactive", "batch"): the arms that isolate features (BulkheadArm)
	// put each call in its feature's bulkhead. Nil: no features.
	Feature func(call int) string
}

// calls returns the number of calls of w.
func (w Workload) calls() int {
	if w.Arrivals != nil {
		return len(w.Arrivals)
	}
	return w.Calls
}

// Measure is one of a scenario's own columns in the report.
type Measure struct {
	Name   string // column header
	Format string // fmt verb of the value, e.g. "%.2f"
	// Of computes the value from an arm's run; NaN when it does not apply.
	Of func(sc *Scenario, r *ArmRun) float64
}

// stallFactor is how many times its median latency an answer of a model
// must exceed to be a stall: above the spread's ceiling (see spread).
const stallFactor = 2

// stalls reports whether an answer of m that takes latency is a stall.
func (m Model) stalls(latency time.Duration) bool {
	return latency > stallFactor*m.Latency
}

// model returns the cascade model called name, and whether there is one.
func (sc *Scenario) model(name string) (Model, bool) {
	i := slices.IndexFunc(sc.Models, func(m Model) bool { return m.Name == name })
	if i < 0 {
		return Model{}, false
	}
	return sc.Models[i], true
}

// names returns the cascade's model names, primary first.
func (sc *Scenario) names() []string {
	out := make([]string, len(sc.Models))
	for i, m := range sc.Models {
		out[i] = m.Name
	}
	return out
}

// All returns the named scenarios, in the order of DESIGN.md §7, then the
// latency scenarios of issue 10, then batchFlood and capacityDrop (issue 13). Each call returns fresh values.
// The fleet scenarios of issue 11 (fleet429, fleetOutage) come last.
func All() []*Scenario {
	return []*Scenario{Burst429(), DailyExhausted(), Storm503(), FullOutage(), Retired404(), StreamCut(), SlowBrownout(), LongThinking(), BatchFlood(), CapacityDrop(),
		Fleet429(), FleetOutage()}
}

// Lookup returns the scenario called name, nil when there is none.
func Lookup(name string) *Scenario {
	for _, sc := range All() {
		if sc.Name == name {
			return sc
		}
	}
	return nil
}
