package scenario

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

// Result is one run of a scenario: every arm's calls and upstream requests.
type Result struct {
	Scenario *Scenario
	Start    time.Time // the run's start, in the bubble's clock
	Arms     []*ArmRun // in the scenario's arm order
}

// Arm returns the run of the arm called name, nil when there is none.
func (r *Result) Arm(name string) *ArmRun {
	for _, a := range r.Arms {
		if a.Arm == name {
			return a
		}
	}
	return nil
}

// ArmRun is what one arm did during a run.
type ArmRun struct {
	Arm      string
	StartErr error      // the arm could not start (e.g. New refused the cascade); no call was sent
	Calls    []Call     // by index
	Upstream []Upstream // generate and stream requests, in the order sent
	// Total is the fake's count of generate and stream requests over the
	// cascade's models (geminitest.Server.Total).
	Total int
	// Figures are the arm's own counts, by name, when its Caller reports
	// some (figureReporter; e.g. FigRoundTrips); nil otherwise.
	Figures map[string]float64
}

// Call is one call of the workload as an arm's user saw it.
type Call struct {
	Index   int
	Start   time.Duration // since the run's start
	Latency time.Duration // until the call returned (for streams: ended)
	Outcome
	// OK: the user got a good answer (for streams: exactly the whole answer).
	OK bool
	// Lost and Dup are, for streams, the characters of the answer the user
	// never saw and the characters shown that are not part of it in order
	// (repeats), against Answer(Index).
	Lost, Dup int
	// Feature is the feature that sent the call (Workload.Feature), "" when
	// the workload has none.
	Feature string
}

// Run plays sc for each of its arms at once, each against its own fake
// following sc.Script, and returns what they did. It must be called inside
// a testing/synctest bubble (see the package documentation); it returns when
// every call of every arm has returned. ctx bounds the whole run.
func Run(ctx context.Context, sc *Scenario) *Result {
	now := time.Now()
	if sc.Align != nil {
		time.Sleep(sc.Align(now).Sub(now))
	}
	res := &Result{Scenario: sc, Start: time.Now()}
	var wg sync.WaitGroup
	for _, arm := range sc.Arms {
		ar := &ArmRun{Arm: arm.Name}
		res.Arms = append(res.Arms, ar)
		wg.Go(func() { runArm(ctx, sc, arm, res.Start, ar) })
	}
	wg.Wait()
	return res
}

// runArm plays sc for one arm, filling ar.
func runArm(ctx context.Context, sc *Scenario, arm Arm, start time.Time, ar *ArmRun) {
	load := new(atomic.Int64)
	srv := geminitest.New(sc.fakeModels(start, load)...)
	rec := newRecorder(srv.Transport(), start)
	if r := sc.Retire; r != nil {
		t := time.AfterFunc(r.At, func() { srv.SetModel(sc.fakeModel(sc.mustModel(r.Model), start, true, load)) })
		defer t.Stop()
	}
	caller, err := arm.New(ctx, Env{Scenario: sc, HTTPClient: &http.Client{Transport: rec}, BaseURL: geminitest.BaseURL, Start: start})
	if err != nil {
		ar.StartErr = err
		return
	}
	ar.Calls = make([]Call, sc.Workload.calls())
	do := func(i int) {
		c := &ar.Calls[i]
		c.Index, c.Start = i, time.Since(start)
		ctx := ctx
		if f := sc.Workload.Feature; f != nil {
			c.Feature = f(i)
			ctx = withFeature(ctx, c.Feature)
		}
		if sc.Workload.Stream {
			c.Outcome = caller.Stream(ctx, i)
			c.Lost, c.Dup = diff(Answer(i), c.Text)
			c.OK = c.Err == nil && c.Text == Answer(i)
		} else {
			c.Outcome = caller.Generate(ctx, i)
			c.OK = c.Err == nil && c.Text != ""
		}
		c.Latency = time.Since(start) - c.Start
	}
	if arr := sc.Workload.Arrivals; arr != nil {
		var wg sync.WaitGroup
		for i, at := range arr {
			wg.Go(func() {
				time.Sleep(at - time.Since(start))
				do(i)
			})
		}
		wg.Wait()
	} else {
		callers := max(sc.Workload.Callers, 1)
		var wg sync.WaitGroup
		for k := range callers {
			wg.Go(func() {
				for i := k; i < len(ar.Calls); i += callers {
					if i >= callers && sc.Workload.Think > 0 {
						time.Sleep(sc.Workload.Think)
					}
					do(i)
				}
			})
		}
		wg.Wait()
	}
	ar.Upstream = rec.entries()
	if fr, ok := caller.(figureReporter); ok {
		ar.Figures = fr.figures()
	}
	if cl, ok := caller.(io.Closer); ok {
		cl.Close() // a Client's Close fails only for a Client New did not make
	}
	for _, m := range sc.Models {
		ar.Total += srv.Total(m.Name)
	}
}

// fakeModels returns the fake's models for a run that starts at start;
// load counts the requests in flight at the fake (Request.InFlight).
func (sc *Scenario) fakeModels(start time.Time, load *atomic.Int64) []geminitest.Model {
	out := make([]geminitest.Model, len(sc.Models))
	for i, m := range sc.Models {
		out[i] = sc.fakeModel(m, start, false, load)
	}
	return out
}

// fakeModel returns m as the fake serves it: every generate and stream
// request decided by sc.Script; unlisted when retired. load counts the
// fake's requests in flight: each from its arrival until its step's
// latency has passed.
func (sc *Scenario) fakeModel(m Model, start time.Time, retired bool, load *atomic.Int64) geminitest.Model {
	return geminitest.Model{
		Name:          m.Name,
		Latency:       m.Latency,
		ChunkInterval: m.ChunkInterval,
		Chunks:        m.Chunks,
		Quota:         m.Quota,
		Unlisted:      retired,
		Decide: func(r geminitest.Request, _ int) geminitest.Step {
			req := request(m.Name, r, start)
			req.InFlight = int(load.Add(1) - 1)
			step := sc.Script(req)
			latency := step.Latency
			if latency == 0 && step.Fault == geminitest.OK {
				latency = m.Latency
			}
			time.AfterFunc(latency, func() { load.Add(-1) })
			return step
		},
	}
}

// request reads what a Script sees of a request the fake received in a
// run that started at start.
func request(model string, r geminitest.Request, start time.Time) Request {
	req := Request{Model: model, Call: -1, At: r.At.Sub(start)}
	if len(r.Contents) == 0 {
		return req
	}
	req.Call = callOf(textOf(r.Contents[0]))
	if last := r.Contents[len(r.Contents)-1]; len(r.Contents) > 1 && last != nil && last.Role == genai.RoleModel {
		if partial := textOf(last); strings.HasPrefix(Answer(req.Call), partial) {
			req.Resumed = len(partial)
		}
	}
	return req
}

// textOf returns the text of c's parts.
func textOf(c *genai.Content) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range c.Parts {
		if p != nil {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// mustModel returns the cascade model called name; a scenario that names a
// model outside its cascade is a programming error.
func (sc *Scenario) mustModel(name string) Model {
	m, ok := sc.model(name)
	if !ok {
		panic("scenario " + sc.Name + ": no model " + name + " in the cascade")
	}
	return m
}
