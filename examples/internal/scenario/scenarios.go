package scenario

import (
	"math"
	"slices"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/pacific"
)

// The models of the scenarios, with the seed's latencies: a Pro model
// answers in about 2s, a Flash model in about 0.8s, a Flash-Lite in about
// 0.5s (log-normal spread, see spread); gemini-2.5-flash, the secondary of
// slowBrownout, answers as fast as the primary Flash.
const (
	pro     = "gemini-3.1-pro"
	flash   = "gemini-3.5-flash"
	flash25 = "gemini-2.5-flash"
	lite    = "gemini-2.5-flash-lite"

	proLatency   = 2 * time.Second
	flashLatency = 800 * time.Millisecond
	liteLatency  = 500 * time.Millisecond
)

// healthy returns a script in which every model answers every call.
func healthy(seed uint64, sc *Scenario) Script {
	return func(r Request) geminitest.Step {
		return answer(seed, sc.mustModel(r.Model), r)
	}
}

// Burst429 sends bursts of three times the primary's per-minute quota; the
// fake enforces both models' quotas as the API does (sliding minute, 429
// with QuotaFailure and RetryInfo).
func Burst429() *Scenario {
	const seed = 429
	sc := &Scenario{
		Name:    "burst429",
		Summary: "5 bursts, one a minute, of 30 calls in 10s: 3x the primary's 10 RPM; the secondary allows 30 RPM",
		Anchor:  "seed: backoff only 25% success / 8.2 s; + breaker 87% / 1.4 s; + bucket 96% / 1.1 s",
		Models: []Model{
			{Name: flash, Latency: flashLatency, Quota: geminitest.Quota{RPM: 10}},
			{Name: lite, Latency: liteLatency, Quota: geminitest.Quota{RPM: 30}},
		},
		Workload: Workload{Arrivals: bursts(5, 30, time.Minute, 10*time.Second)},
		Arms:     Arms(),
	}
	sc.Script = healthy(seed, sc)
	return sc
}

// dailyReset is how long after the start of dailyExhausted the primary's
// daily quota resets (midnight America/Los_Angeles): after the workload.
const dailyReset = 30 * time.Minute

// DailyExhausted meets a primary whose daily quota is gone until the
// Pacific midnight, with 25 queries back to back.
func DailyExhausted() *Scenario {
	const seed = 86400
	sc := &Scenario{
		Name:    "dailyExhausted",
		Summary: "the primary's daily quota is gone (429 PerDay until Pacific midnight, 30 min away); 25 queries back to back",
		Anchor:  "seed: 8.29 s per query without cool-downs, 0.93 s with them",
		Models: []Model{
			{Name: flash, Latency: flashLatency},
			{Name: lite, Latency: liteLatency},
		},
		Align:    func(now time.Time) time.Time { return pacific.NextMidnight(now).Add(-dailyReset) },
		Workload: Workload{Calls: 25},
		Arms:     Arms(),
		Measures: []Measure{
			{Name: "mean after 1st", Format: "%.2fs", Of: meanAfterFirst},
			{Name: "primary req", Format: "%.0f", Of: func(sc *Scenario, r *ArmRun) float64 {
				return float64(requests(r, sc.Models[0].Name, 0, dailyReset))
			}},
		},
	}
	sc.Script = func(r Request) geminitest.Step {
		if r.Model == flash && r.At < dailyReset {
			return geminitest.Step{Fault: geminitest.DailyQuota}
		}
		return answer(seed, sc.mustModel(r.Model), r)
	}
	return sc
}

// Storm503 is a brownout as users report it: the primary fails 37% of its
// calls with 503, in bursts, the secondary 5%.
func Storm503() *Scenario {
	const (
		seed       = 503
		calls      = 1000
		rate       = 2.0 // calls per second
		slot       = 15 * time.Second
		stormShare = 0.36 // share of slots in a storm
		stormFail  = 0.85 // 503 rate of the primary in a storm slot
		calmFail   = 0.10 // and outside: 0.36*0.85 + 0.64*0.10 = 0.37
		liteFail   = 0.05
	)
	arrivals := poisson(seed, calls, rate)
	slots := int(arrivals[len(arrivals)-1]/slot) + 2
	storm := make([]bool, slots)
	for _, s := range rng(seed, "storms").Perm(slots)[:int(math.Round(stormShare*float64(slots)))] {
		storm[s] = true
	}
	sc := &Scenario{
		Name:    "storm503",
		Summary: "brownout: the primary answers 503 to 37% of requests (85% in 15s storm slots, 10% between), the secondary to 5%; 1000 calls, Poisson 2/s",
		Anchor:  "37.46% of 646 GenerateContent calls failed with 503 over 30 days (discuss.ai.google.dev, 2026); G5: ≥99.9% success at ≤1.5 attempts per call",
		Models: []Model{
			{Name: flash, Latency: flashLatency},
			{Name: lite, Latency: liteLatency},
		},
		Workload: Workload{Arrivals: arrivals},
		Arms:     Arms(),
	}
	sc.Script = func(r Request) geminitest.Step {
		p := liteFail
		if r.Model == flash {
			p = calmFail
			if s := int(r.At / slot); s < slots && storm[s] {
				p = stormFail
			}
		}
		if draw(seed, "503", r.Model, r.Call, r.At) < p {
			return overloaded()
		}
		return answer(seed, sc.mustModel(r.Model), r)
	}
	return sc
}

// The full outage's window, since the run's start.
const (
	outageStart = 60 * time.Second
	outageEnd   = 180 * time.Second
)

// FullOutage takes every model down for two minutes, then brings them back.
func FullOutage() *Scenario {
	const seed = 500
	sc := &Scenario{
		Name:    "fullOutage",
		Summary: "every model answers 503 from 60s to 180s, then recovers; a call every 0.5s for 300s; cascade Pro → Flash → Flash-Lite",
		Anchor:  "G3: ≤1.1 upstream requests per call during a total outage (SRE retry budget); G6: recovery within OpenFor + 1 probe, first second ≤1.2x steady traffic",
		Models: []Model{
			{Name: pro, Latency: proLatency},
			{Name: flash, Latency: flashLatency},
			{Name: lite, Latency: liteLatency},
		},
		Workload: Workload{Arrivals: evenly(600, 500*time.Millisecond)},
		Window:   [2]time.Duration{outageStart, outageEnd},
		Arms:     Arms(),
		Measures: []Measure{
			{Name: "outage req/call", Format: "%.2f", Of: outageLoad},
			{Name: "fast fails", Format: "%.1f%%", Of: fastFails},
			{Name: "recovery", Format: "%.1fs", Of: recovery},
			{Name: "1st s load", Format: "%.2fx", Of: firstSecondLoad},
		},
	}
	sc.Script = func(r Request) geminitest.Step {
		if r.At >= outageStart && r.At < outageEnd {
			return overloaded()
		}
		return answer(seed, sc.mustModel(r.Model), r)
	}
	return sc
}

// retiredAt is when the primary of retired404 is shut down.
const retiredAt = 60 * time.Second

// Retired404 shuts the primary down during the run: from then on it is
// gone from models.list and answers 404 NOT_FOUND.
func Retired404() *Scenario {
	const seed = 404
	sc := &Scenario{
		Name:    "retired404",
		Summary: "the primary is shut down at 60s (404 NOT_FOUND, gone from models.list); a call every 0.5s for 180s",
		Anchor:  "gemini-2.0-flash was shut down on 2026-06-01 and answers 404; G4: exactly 1 attempt on a 404",
		Models: []Model{
			{Name: flash, Latency: flashLatency},
			{Name: lite, Latency: liteLatency},
		},
		Retire:   &Retirement{Model: flash, At: retiredAt},
		Workload: Workload{Arrivals: evenly(360, 500*time.Millisecond)},
		Window:   [2]time.Duration{retiredAt, 180 * time.Second},
		Arms:     Arms(),
		Measures: []Measure{
			{Name: "req to retired", Format: "%.0f", Of: func(sc *Scenario, r *ArmRun) float64 {
				return float64(requests(r, flash, retiredAt, math.MaxInt64))
			}},
		},
	}
	sc.Script = func(r Request) geminitest.Step {
		if r.Model == flash && r.At >= retiredAt {
			return geminitest.Step{Fault: geminitest.NotFound}
		}
		return answer(seed, sc.mustModel(r.Model), r)
	}
	return sc
}

// The stream cuts of streamCut, drawn with equal chances: a transport
// error, half an event, an error object inside the 200 stream, and a clean
// end without finishReason after part of the text (silent in the SDK).
var cuts = []geminitest.Fault{geminitest.StreamCutBetween, geminitest.StreamCutInside, geminitest.StreamErrorInside, geminitest.StreamNoFinish}

// StreamCut cuts 20% of streams mid-answer.
func StreamCut() *Scenario {
	const (
		seed   = 2020
		chunks = 8
		share  = 0.20
	)
	sc := &Scenario{
		Name:    "streamCut",
		Summary: "20% of streams cut mid-answer (transport error, half an event, error event, or a clean end without finishReason); 300 streams, Poisson 1/s",
		Anchor:  "commit point (gRFC A6): never retry after the first chunk reached the caller, unless the resume is exact",
		Models: []Model{
			{Name: flash, Latency: 500 * time.Millisecond, ChunkInterval: 100 * time.Millisecond, Chunks: chunks},
			{Name: lite, Latency: 300 * time.Millisecond, ChunkInterval: 80 * time.Millisecond, Chunks: chunks},
		},
		Workload: Workload{Arrivals: poisson(seed, 300, 1.0), Stream: true},
		Arms: []Arm{RawArm(), SDKRetryArm(), FailsafeArm(),
			GeminiguardArm("geminiguard"),
			GeminiguardArm("geminiguard+resume", geminiguard.WithStreamResume(true)),
			OracleArm()},
		Measures: []Measure{
			{Name: "cut", Format: "%.0f", Of: func(_ *Scenario, r *ArmRun) float64 { return float64(len(cutCalls(r))) }},
			{Name: "reported", Format: "%.1f%%", Of: reported},
			{Name: "lost chars", Format: "%.0f", Of: func(_ *Scenario, r *ArmRun) float64 { return sumCalls(r, func(c Call) int { return c.Lost }) }},
			{Name: "dup chars", Format: "%.0f", Of: func(_ *Scenario, r *ArmRun) float64 { return sumCalls(r, func(c Call) int { return c.Dup }) }},
		},
	}
	sc.Script = func(r Request) geminitest.Step {
		step := answer(seed, sc.mustModel(r.Model), r)
		draws := rng(seed, "cut", r.Model, r.Call, r.At)
		if draws.Float64() >= share {
			return step
		}
		step.Fault = cuts[draws.IntN(len(cuts))]
		step.CutAfter = 1 + draws.IntN(chunks-2)
		if step.Fault == geminitest.StreamNoFinish {
			// The clean end comes after part of what this request answers.
			step.Text = step.Text[:r.Resumed+(len(step.Text)-r.Resumed)*step.CutAfter/chunks]
		}
		return step
	}
	return sc
}

// The latency brownout of slowBrownout: its seed, the share of the
// primary's requests that stall, and how long they stall before answering.
const (
	slowSeed     = 4545
	stallShare   = 0.15
	stallLatency = 45 * time.Second
)

// SlowBrownout is a brownout without a single error: 15% of the primary's
// requests stall 45s before they answer, drawn per request (a second
// request of the same call may not stall).
func SlowBrownout() *Scenario {
	const seed = slowSeed
	sc := &Scenario{
		Name:    "slowBrownout",
		Summary: "latency brownout, no errors: 15% of the primary's requests stall 45s before answering, the secondary answers in 0.8s; 300 calls, Poisson 2/s",
		Anchor:  "The Tail at Scale (Dean & Barroso, CACM 2013): hedging after the p95 latency cut BigTable's p99.9 from 1,800 ms to 74 ms for 2% more requests; issue 10: p99 ≤ 3× the oracle's, 100% success, ≤ 1.1 requests per call",
		Models: []Model{
			{Name: flash, Latency: flashLatency},
			{Name: flash25, Latency: flashLatency},
		},
		Workload:   Workload{Arrivals: poisson(seed, 300, 2.0)},
		Arms:       Arms(),
		HedgeAfter: hedgeAfter,
	}
	sc.Script = func(r Request) geminitest.Step {
		step := answer(seed, sc.mustModel(r.Model), r)
		if r.Model == flash && stalled(seed, r) {
			step.Latency = stallLatency
		}
		return step
	}
	return sc
}

// stalled reports whether slowBrownout's request r stalls: a draw per
// request, so a retry or a hedge of the same call draws again.
func stalled(seed uint64, r Request) bool {
	return draw(seed, "stall", r.Model, r.Call, r.At) < stallShare
}

// thinkLatency is how long every request of longThinking takes.
const thinkLatency = 40 * time.Second

// LongThinking is a workload that is slow by nature: every request of
// every model takes 40s (a large thinking budget spent), under the 60s
// attempt timeout of geminiguard's defaults. Nothing stalls: the models'
// median is 40s.
func LongThinking() *Scenario {
	sc := &Scenario{
		Name:    "longThinking",
		Summary: "every request of every model takes 40s (long thinking), no errors; 150 calls, Poisson 1/s",
		Anchor:  "hedge the tail only (Dean & Barroso; gRFC A6): a model that is slow on every request is neither cut nor duplicated; issue 10: 100% success at ≤ 1.05 requests per call",
		Models: []Model{
			{Name: flash, Latency: thinkLatency},
			{Name: lite, Latency: thinkLatency},
		},
		Workload:   Workload{Arrivals: poisson(1040, 150, 1.0)},
		Arms:       Arms(),
		HedgeAfter: hedgeAfter,
	}
	sc.Script = func(r Request) geminitest.Step {
		return geminitest.Step{Latency: thinkLatency, Text: Answer(r.Call)}
	}
	return sc
}

// hedgeAfter is the fixed delay of the failsafe arm's HedgePolicy in the
// latency scenarios, as a developer sets it once from the primary's
// latency on ordinary requests: Flash's p95 (1.5 times its 0.8s median
// under the seed's spread), rounded to 1.2s. longThinking meets the same
// setting with requests that take 40s.
const hedgeAfter = 1200 * time.Millisecond

// The features of batchFlood and their load.
const (
	interactive = "interactive"
	batch       = "batch"

	floodRun       = 120 * time.Second // the interactive feature's span: one call a second
	floodBurst     = 200               // calls of one batch burst, sent at once
	floodPeriod    = 60 * time.Second  // between two bursts
	floodFirst     = 10 * time.Second  // the first burst, since the run's start
	floodBursts    = 2
	floodSlowdown  = 10 // requests in flight that add one median latency
	floodBatchRuns = 8  // the batch bulkhead's MaxConcurrent
	floodCeiling   = 64 // the batch bulkhead's MaxConcurrent set too high, and the adaptive limits' ceiling
	floodSeed      = 13
)

// BatchFlood is one Client shared by two features of an app: an
// interactive one sending a call a second and a batch job sending 200 calls
// at once every minute. The model slows down with its load, as a shared
// backend does: each answer takes the median latency times 1 + n/10, n the
// requests it is already working on. Unbounded, a burst puts 200 requests
// in flight and every interactive call waits about 21 times longer; with a
// bulkhead the batch runs 8 at a time, queued, and the interactive feature
// keeps its own slots. The adaptive arms (issue 13) let the batch's limit
// find its own level under a ceiling of 64; a fixed 64 is the same ceiling
// held.
func BatchFlood() *Scenario {
	sc := flood("batchFlood",
		"one Client, two features: interactive 1 call/s for 120s, batch 200 calls at once at 10s and 70s; the model's latency is 0.8s × (1 + in flight/10)",
		"issue 13: the interactive feature keeps its p95 under a batch flood thanks to bulkheads")
	// The raw SDK is left out: it queues nothing either, and meets the
	// flood as geminiguard without bulkheads does (same p95).
	sc.Arms = append([]Arm{GeminiguardArm("geminiguard")}, floodArms()...)
	sc.Script = func(r Request) geminitest.Step {
		step := answer(floodSeed, sc.mustModel(r.Model), r)
		step.Latency = step.Latency * time.Duration(floodSlowdown+r.InFlight) / floodSlowdown
		return step
	}
	return sc
}

// CapacityDrop is BatchFlood's app meeting a backend that loses half its
// capacity at 60s, between the two bursts: from then on each request in
// flight adds a fifth of the median latency instead of a tenth (1 + n/5).
// The batch bulkhead's fixed 8 was sized for the first minute, and a fixed
// 64 is too high throughout: the question of issue 13 is whether an
// adaptive limit finds the level by itself. (A harsher drop, 1 + n/3 or
// n/2, leaves no limit that drains a burst within its queue timeout: every
// arm then refuses or fails 12% or more of the batch.)
func CapacityDrop() *Scenario {
	sc := flood("capacityDrop",
		"batchFlood's workload; at 60s the model's capacity halves: its latency goes from 0.8s × (1 + in flight/10) to 0.8s × (1 + in flight/5)",
		"issue 13: an adaptive bulkhead limit against a fixed one that the backend's capacity made too high")
	sc.Arms = floodArms()
	sc.Script = func(r Request) geminitest.Step {
		step := answer(floodSeed, sc.mustModel(r.Model), r)
		slowdown := floodSlowdown
		if r.At >= dropAt {
			slowdown = dropSlowdown
		}
		step.Latency = step.Latency * time.Duration(slowdown+r.InFlight) / time.Duration(slowdown)
		return step
	}
	return sc
}

// The capacity drop of CapacityDrop.
const (
	dropAt       = 60 * time.Second
	dropSlowdown = 5 // requests in flight that add one median latency, from dropAt
)

// floodArms are the bulkhead arms of the flood scenarios: the batch
// feature's limit fixed at 8 (sized for BatchFlood's model), fixed at 64
// (too high), and adaptive under a ceiling of 64 (AIMD, gradient); the
// interactive feature's is fixed at 8 in all.
func floodArms() []Arm {
	arm := func(name string, batchRuns int, limit geminiguard.BulkheadLimit) Arm {
		return BulkheadArm(name, map[string]geminiguard.Bulkhead{
			// The batch waits its turn: a burst drains in about 40s,
			// before the next one.
			batch:       {MaxConcurrent: batchRuns, MaxQueue: floodBurst, QueueTimeout: floodPeriod, Limit: limit},
			interactive: {MaxConcurrent: 8, MaxQueue: 8, QueueTimeout: 5 * time.Second},
		})
	}
	return []Arm{
		arm("geminiguard+bulkheads", floodBatchRuns, geminiguard.LimitFixed),
		arm("bulkheads fixed 64", floodCeiling, geminiguard.LimitFixed),
		arm("bulkheads aimd ≤64", floodCeiling, geminiguard.LimitAIMD),
		arm("bulkheads gradient ≤64", floodCeiling, geminiguard.LimitGradient),
	}
}

// flood returns the scenario named name of BatchFlood's workload and
// measures, without arms or script.
func flood(name, summary, anchor string) *Scenario {
	var arrivals []time.Duration
	features := map[int]string{}
	for b := range floodBursts {
		for range floodBurst {
			arrivals = append(arrivals, floodFirst+time.Duration(b)*floodPeriod)
		}
	}
	// Half a second off the whole seconds, so that no interactive call
	// arrives with a burst.
	for i := range int(floodRun / time.Second) {
		arrivals = append(arrivals, time.Duration(i)*time.Second+time.Second/2)
	}
	slices.Sort(arrivals)
	// The bursts come at whole seconds: the calls at those offsets are
	// the batch's.
	for i, at := range arrivals {
		if at%time.Second == 0 {
			features[i] = batch
		} else {
			features[i] = interactive
		}
	}
	return &Scenario{
		Name:    name,
		Summary: summary,
		Anchor:  anchor,
		Models:  []Model{{Name: flash, Latency: flashLatency}},
		Workload: Workload{
			Arrivals: arrivals,
			Feature:  func(call int) string { return features[call] },
		},
		Measures: []Measure{
			{Name: "interactive p50", Format: "%.2fs", Of: featurePercentile(interactive, 0.50)},
			{Name: "interactive p95", Format: "%.2fs", Of: featurePercentile(interactive, 0.95)},
			{Name: "interactive p99", Format: "%.2fs", Of: featurePercentile(interactive, 0.99)},
			{Name: "interactive ok", Format: "%.1f%%", Of: featureSuccess(interactive)},
			{Name: "batch ok", Format: "%.1f%%", Of: featureSuccess(batch)},
			{Name: "batch drain", Format: "%.1fs", Of: batchDrain},
			{Name: "batch refused", Format: "%.0f", Of: bulkheadRefused(batch)},
		},
	}
}
