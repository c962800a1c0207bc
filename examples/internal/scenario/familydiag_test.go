package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/internal/latency"
)

// A diagnosis of the brownout family (issue 19), not a test: it plays
// geminiguard, with every call recorded, against the oracle, and names the
// mechanism that costs each cell missing primary share ≥ 0.9× or p99 ≤ 2×
// the oracle's. Run it with
//
//	FAMILY_DIAG=200 FAMILY_SEED=1 go test -run TestFamilyDiagnosis -v ./internal/scenario
//	FAMILY_CELL=1000010 go test -run TestFamilyDiagnosisCell -v ./internal/scenario
//	FAMILY_CELL=1000010 FAMILY_REPLICAS=4 go test -run TestFamilyDiagnosisCell -v ./internal/scenario   # as a fleet of 4
//
// Share: for the calls the primary did not answer, the call's first try of
// it (throttle-fail: the failure rule; throttle-slow: the latency rule;
// open; open(startup): the breaker opened before the primary ever
// answered; cut; timeout; 503). P99: for the calls at or above the p99
// rank, a stall waited out before the primary's first answer, before its
// latency.Warmup-th (the cut's warm-up), or after it; cut+next: the learned cut and
// the next model's answer.

// playDiagnosed plays cell c in fake time against geminiguard, recorded
// call by call (diagArm), and the oracle, in that order.
func playDiagnosed(t *testing.T, c Cell) (*diagCaller, *Result) {
	var d *diagCaller
	var res *Result
	synctest.Test(t, func(t *testing.T) {
		sc := c.Scenario()
		arm := diagArm(&d)
		if n, _ := strconv.Atoi(os.Getenv("FAMILY_REPLICAS")); n > 1 { // each call's record only
			arm = recordedArm(&d, fleetArm("geminiguard", n, sharedFleet))
		}
		sc.Arms = []Arm{arm, OracleArm()}
		res = Run(t.Context(), sc)
	})
	return d, res
}

// TestFamilyDiagnosis prints, per cell of the family FAMILY_SEED of
// FAMILY_DIAG cells, the figures (CELL lines) and, for the cells missing a
// target, the mechanism (SHARE and P99 lines), then the counts.
func TestFamilyDiagnosis(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("FAMILY_DIAG"))
	if n == 0 {
		t.Skip("FAMILY_DIAG not set")
	}
	seed, _ := strconv.ParseUint(os.Getenv("FAMILY_SEED"), 10, 64)
	shareCause, p99Cause := map[string]int{}, map[string]int{}
	shareMiss, p99Miss := 0, 0
	var met [5]int
	for _, c := range Family(seed, n) {
		d, res := playDiagnosed(t, c)
		ss := res.Summaries()
		g, o := ss[0], ss[1]
		fmt.Printf("CELL %d %.3f %.3f %.3f %.4f\n", c.Seed, shareRatio(g, o), p99Ratio(g, o), g.PerCall, g.Success)
		for i, ok := range []bool{shareRatio(g, o) >= 0.9, shareRatio(g, o) >= 0.75, p99Ratio(g, o) <= 2, p99Ratio(g, o) <= 3, g.PerCall <= 1.3} {
			if ok {
				met[i]++
			}
		}
		if shareRatio(g, o) < 0.9 {
			shareMiss++
			cause := d.shareCause(res.Arms[0])
			shareCause[strings.Fields(cause)[0]]++
			fmt.Printf("SHARE %.2f %s: %s\n", shareRatio(g, o), cause, c)
		}
		if p99Ratio(g, o) > 2 {
			p99Miss++
			cause := d.p99Cause(res.Arms[0], g)
			p99Cause[strings.Fields(cause)[0]]++
			fmt.Printf("P99 %.2f %s: %s\n", p99Ratio(g, o), cause, c)
		}
	}
	fmt.Printf("MET share>=.9 %d, >=.75 %d, p99<=2 %d, <=3 %d, req<=1.3 %d of %d\n", met[0], met[1], met[2], met[3], met[4], n)
	fmt.Printf("share misses %d: %v\np99 misses %d: %v\n", shareMiss, shareCause, p99Miss, p99Cause)
}

// recordedArm is inner with every call's record kept in a diagCaller,
// stored in *out when it starts (FAMILY_REPLICAS: a fleet's calls).
func recordedArm(out **diagCaller, inner Arm) Arm {
	return Arm{Name: inner.Name, New: func(ctx context.Context, env Env) (Caller, error) {
		c, err := inner.New(ctx, env)
		if err != nil {
			return nil, err
		}
		*out = &diagCaller{inner: c, recs: map[int]*geminiguard.CallRecord{}, start: env.Start}
		return *out, nil
	}}
}

// diagCaller is geminiguard at its defaults with every call's record kept,
// and its primary's breaker openings counted; or inner's calls, recorded.
type diagCaller struct {
	inner Caller
	c     *geminiguard.Client
	mu    sync.Mutex
	recs  map[int]*geminiguard.CallRecord
	// primary's breaker openings, and whether the primary had answered before
	opens        []time.Time
	startupOpens int
	answered     bool
	start        time.Time
}

// diagArm is the arm of a diagCaller, stored in *out when it starts.
func diagArm(out **diagCaller) Arm {
	return Arm{Name: "geminiguard", New: func(ctx context.Context, env Env) (Caller, error) {
		d := &diagCaller{recs: map[int]*geminiguard.CallRecord{}, start: env.Start}
		primary := env.Scenario.Models[0].Name
		// The family's geminiguard arm, with a hook.
		c, err := geminiguard.New(ctx, append(guardOptions(env),
			geminiguard.WithHooks(geminiguard.Hooks{OnStateChange: func(_ context.Context, e geminiguard.StateChangeEvent) {
				if e.Model != primary {
					return
				}
				if os.Getenv("FAMILY_CELL") != "" {
					fmt.Printf("T %v %v->%v\n", e.At.Sub(d.start), e.From, e.To)
				}
				if e.To != geminiguard.StateOpen || e.From != geminiguard.StateClosed {
					return
				}
				d.mu.Lock()
				d.opens = append(d.opens, e.At)
				if !d.answered {
					d.startupOpens++
				}
				d.mu.Unlock()
			}}))...)
		if err != nil {
			return nil, err
		}
		d.c = c
		*out = d
		return d, nil
	}}
}

func (d *diagCaller) Generate(ctx context.Context, call int) Outcome {
	rec := new(geminiguard.CallRecord)
	var o Outcome
	if d.inner != nil {
		o = d.inner.Generate(geminiguard.RecordCall(ctx, rec), call)
	} else {
		o = generate(geminiguard.RecordCall(ctx, rec), d.c.GenerateContent, "", call)
	}
	d.mu.Lock()
	d.recs[call] = rec
	if o.Err == nil && o.Model == flash {
		d.answered = true
	}
	d.mu.Unlock()
	return o
}

// Close closes the inner Caller when it is an io.Closer, else the Client.
func (d *diagCaller) Close() error {
	if cl, ok := d.inner.(io.Closer); ok {
		return cl.Close()
	}
	if d.c != nil {
		return d.c.Close()
	}
	return nil
}

// Stream is not diagnosed: the family sends unary calls.
func (d *diagCaller) Stream(ctx context.Context, call int) Outcome {
	return Outcome{Err: errors.New("scenario: the diagnosis sends unary calls only")}
}

// firstPrimary classifies the call's first attempt of the primary.
func firstPrimary(rec *geminiguard.CallRecord) string {
	for _, a := range rec.Attempts {
		if a.Model != flash {
			continue
		}
		switch {
		case a.Err == nil:
			return "answered"
		case strings.Contains(a.Err.Error(), "adaptive throttling"):
			var acc, req int
			msg := a.Err.Error()
			fmt.Sscanf(msg[strings.Index(msg, "answered "):], "answered %d of its last %d", &acc, &req)
			if 4*acc < req {
				return "throttle-fail"
			}
			return "throttle-slow"
		case errors.Is(a.Err, geminiguard.ErrCircuitOpen) && a.Skipped:
			return "open"
		case strings.Contains(a.Err.Error(), "attempt abandoned"):
			return "cut"
		case strings.Contains(a.Err.Error(), "attempt timed out"):
			return "timeout"
		case a.Skipped:
			return "skipped-other"
		}
		return "503"
	}
	return "none"
}

// shareCause names the avoidable mechanism that kept the most calls from
// the primary in ar.
func (d *diagCaller) shareCause(ar *ArmRun) string {
	counts := map[string]int{}
	for _, c := range ar.Calls {
		if c.OK && c.Model == flash {
			continue
		}
		counts[firstPrimary(d.recs[c.Index])]++
	}
	// the avoidable causes: which one cost the most calls
	best, bn := "none-avoidable", 0
	for _, k := range []string{"open", "throttle-fail", "throttle-slow", "cut", "timeout", "skipped-other", "none"} {
		if counts[k] > bn {
			best, bn = k, counts[k]
		}
	}
	if best == "open" && d.startupOpens > 0 {
		best = "open(startup)"
	}
	return fmt.Sprintf("%s %v startupOpens=%d opens=%d", best, counts, d.startupOpens, len(d.opens))
}

// p99Cause classifies the calls at or above the p99 rank.
func (d *diagCaller) p99Cause(ar *ArmRun, s Summary) string {
	calls := slices.Clone(ar.Calls)
	sort.Slice(calls, func(i, j int) bool { return calls[i].Latency > calls[j].Latency })
	k := max(1, len(calls)/100+1)
	var ends []time.Duration
	for _, c := range ar.Calls {
		if c.OK && c.Model == flash {
			ends = append(ends, c.Start+c.Latency)
		}
	}
	slices.Sort(ends)
	warm, first := time.Duration(1<<62), time.Duration(1<<62)
	if len(ends) >= latency.Warmup {
		warm = ends[latency.Warmup-1]
	}
	if len(ends) > 0 {
		first = ends[0]
	}
	counts := map[string]int{}
	for _, c := range calls[:k] {
		rec := d.recs[c.Index]
		cause := tailCause(rec, c)
		if strings.Contains(cause, "waited-stall") {
			if c.Start < first {
				cause = "stall-before-first"
			} else if c.Start < warm {
				cause = "stall-before-warm"
			} else {
				cause = "stall-after-warm"
			}
		} else if strings.HasPrefix(cause, "cut") {
			cause = "cut+next"
			if c.Start < warm {
				cause = "cut-before-warm+next"
			}
		} else if strings.Contains(cause, "cut") {
			cause = "other+cut"
		}
		counts[cause]++
	}
	best, bn := "", 0
	for k, v := range counts {
		if v > bn || (v == bn && k < best) {
			best, bn = k, v
		}
	}
	return fmt.Sprintf("%s %v", best, counts)
}

// tailCause describes call c's attempts in one word each.
func tailCause(rec *geminiguard.CallRecord, c Call) string {
	if !c.OK {
		return "failed"
	}
	var parts []string
	for _, a := range rec.Attempts {
		switch {
		case a.Err == nil && a.Model == flash && a.Elapsed >= 5*time.Second:
			parts = append(parts, "waited-stall")
		case a.Err == nil:
			parts = append(parts, "ok:"+a.Model[len(a.Model)-4:])
		case strings.Contains(a.Err.Error(), "attempt abandoned"):
			parts = append(parts, "cut")
		case strings.Contains(a.Err.Error(), "attempt timed out"):
			parts = append(parts, "timeout")
		case a.Skipped:
			parts = append(parts, "skip")
		default:
			parts = append(parts, "fail")
		}
		if a.Delay > 0 {
			parts[len(parts)-1] += "+delay"
		}
	}
	return strings.Join(parts, ",")
}

// TestFamilyDiagnosisCell prints the failed and the three slowest calls of
// cell FAMILY_CELL, attempt by attempt, and its primary's breaker changes.
func TestFamilyDiagnosisCell(t *testing.T) {
	seed, _ := strconv.ParseUint(os.Getenv("FAMILY_CELL"), 10, 64)
	if seed == 0 {
		t.Skip("FAMILY_CELL not set")
	}
	c := DrawCell(seed)
	d, res := playDiagnosed(t, c)
	calls := slices.Clone(res.Arms[0].Calls)
	sort.Slice(calls, func(i, j int) bool { return calls[i].Latency > calls[j].Latency })
	for _, cl := range calls {
		if cl.OK {
			continue
		}
		fmt.Printf("FAILED call %d start %v latency %v err %v\n", cl.Index, cl.Start, cl.Latency, cl.Err)
		for _, a := range d.recs[cl.Index].Attempts {
			fmt.Printf("   %s delay %v elapsed %v skipped %v err %v\n", a.Model, a.Delay, a.Elapsed, a.Skipped, a.Err)
		}
	}
	if from, to, ok := strings.Cut(os.Getenv("FAMILY_WINDOW"), "-"); ok { // e.g. 3m10s-3m40s: every call started then
		f, _ := time.ParseDuration(from)
		u, _ := time.ParseDuration(to)
		sort.Slice(calls, func(i, j int) bool { return calls[i].Start < calls[j].Start })
		for _, cl := range calls {
			if cl.Start < f || cl.Start > u {
				continue
			}
			fmt.Printf("call %d start %v latency %v model %s\n", cl.Index, cl.Start, cl.Latency, cl.Model)
			for _, a := range d.recs[cl.Index].Attempts {
				fmt.Printf("   %s delay %v elapsed %v skipped %v err %v\n", a.Model, a.Delay, a.Elapsed, a.Skipped, a.Err)
			}
		}
		return
	}
	for _, cl := range calls[:3] {
		fmt.Printf("call %d start %v latency %v model %s\n", cl.Index, cl.Start, cl.Latency, cl.Model)
		for _, a := range d.recs[cl.Index].Attempts {
			fmt.Printf("   %s delay %v elapsed %v skipped %v err %v\n", a.Model, a.Delay, a.Elapsed, a.Skipped, a.Err)
		}
	}
}
