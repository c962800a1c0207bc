package geminiguard_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

// Scale of the soak, per Client configuration (two configurations: the
// totals are twice these).
const (
	soakUnary      = 5000
	soakStreams    = 2000
	soakGoroutines = 32
)

// soakFallbackText is the Fallback's answer in configuration B.
const soakFallbackText = "busy"

// soakConfig is one Client configuration of the soak.
type soakConfig struct {
	name        string
	opts        []geminiguard.Option
	callTimeout time.Duration
	maxAttempts int
	fallback    bool
	// retry budget (RetryPolicy.BudgetRatio, BudgetMinPerSecond) and
	// AllOpenProbeEvery, for the bound on upstream requests
	budgetRatio, budgetMinPerSecond float64
	allOpenProbeEvery               time.Duration
	// store is the configuration's failing shared state, nil when it has
	// none: checkHealthy makes it healthy with the fake.
	store *soakStore
}

// soakCascade is the cascade of both configurations; soakFaultRates how
// often each of its models fails.
var (
	soakCascade    = []string{pro, flash, lite}
	soakFaultRates = map[string]float64{pro: 0.35, flash: 0.2, lite: 0.1}
)

func soakConfigs() []soakConfig {
	store := &soakStore{SharedState: fleet.NewMemoryState()}
	return []soakConfig{
		{
			// Defaults, a cascade of three and short timeouts. The project
			// cool-down is short so that a spend cap or a bad-key answer
			// does not leave the rest of the run to a 5-minute cool-down.
			name: "A",
			opts: []geminiguard.Option{
				geminiguard.WithCascade(soakCascade...),
				geminiguard.WithTimeouts(3*time.Second, 10*time.Second),
				geminiguard.WithStreamDeadlines(2*time.Second, time.Second),
				geminiguard.WithProjectCoolDown(3 * time.Second),
			},
			callTimeout: 10 * time.Second, maxAttempts: 3,
			budgetRatio: 0.1, budgetMinPerSecond: 1, allOpenProbeEvery: 2 * time.Second,
		},
		{
			// A Fallback, local limits on the primary, a failure-rate
			// breaker, stream resume, fleet mode on a store that fails
			// one call in seven.
			name: "B",
			opts: []geminiguard.Option{
				geminiguard.WithSharedState(store),
				geminiguard.WithCascade(soakCascade...),
				geminiguard.WithFallback(geminiguard.TextFallback(soakFallbackText)),
				geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 300, TPM: 20_000, RPD: 2_000}),
				geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureRate: 0.5, Window: 10 * time.Second, MinRequests: 10, OpenFor: 5 * time.Second}),
				geminiguard.WithStreamResume(true),
				geminiguard.WithTimeouts(5*time.Second, 20*time.Second),
				geminiguard.WithStreamDeadlines(3*time.Second, 2*time.Second),
				geminiguard.WithProjectCoolDown(3 * time.Second),
			},
			callTimeout: 20 * time.Second, maxAttempts: 3, fallback: true,
			budgetRatio: 0.1, budgetMinPerSecond: 1, allOpenProbeEvery: 2 * time.Second,
			store: store,
		},
	}
}

// soakStore is a shared state that fails one call in seven until it is
// healthy, so that the soak's Client keeps switching between the fleet's
// limits and its own; it notifies changes as the memory store does.
type soakStore struct {
	fleet.SharedState
	calls   atomic.Int64
	healthy atomic.Bool
}

// fails tells whether this call to the store fails.
func (s *soakStore) fails() bool {
	return s.calls.Add(1)%7 == 0 && !s.healthy.Load()
}

var errSoakStore = errors.New("soak: the shared state fails")

func (s *soakStore) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	if s.fails() {
		return fleet.Lease{}, errSoakStore
	}
	return s.SharedState.Lease(ctx, r)
}

// Subscribe passes the memory store's notifications on.
func (s *soakStore) Subscribe(project string, changed func()) (stop func()) {
	return s.SharedState.(fleet.Subscriber).Subscribe(project, changed)
}

func (s *soakStore) Publish(ctx context.Context, project string, f fleet.Fact) error {
	if s.fails() {
		return errSoakStore
	}
	return s.SharedState.Publish(ctx, project, f)
}

// soakFigures are the soak's totals, for its figures line.
type soakFigures struct {
	unary, streams, goroutines   atomic.Int64
	successes, fallbacks, errors atomic.Int64
	breaks, cancels, userPanics  atomic.Int64
	upstream                     atomic.Int64

	mu       sync.Mutex     // guards classes
	classes  map[string]int // the errors callers got, by configuration and class
	fakeTime atomic.Int64   // nanoseconds of fake time, all configurations
}

// class counts an error a caller got.
func (f *soakFigures) class(cfg string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.classes == nil {
		f.classes = make(map[string]int)
	}
	k := cfg + "/" + geminiguard.Classify(err).Class.String()
	if f.classes[k] == 0 && testing.Verbose() {
		fmt.Printf("soak: first %s error: %v\n", k, err)
	}
	f.classes[k]++
}

// TestSoak runs thousands of unary calls and streams from many goroutines,
// in fake time, against a fake whose three models answer with every fault
// kind (and CONTINUATION pauses), under random caller deadlines,
// cancellations, early breaks and consumer panics, for two Client
// configurations; then a table of bad options and bad calls. It counts
// every invariant violation (soakInvariants), prints one line of figures and
// fails when any count is not 0, showing the first examples of each with
// the seed, configuration, call number and goroutine. Rerun a seed with
// -soak.seed=N.
func TestSoak(t *testing.T) {
	seed := *soakSeed
	tally := newSoakTally(soakInvariants)
	var figs soakFigures
	for _, cfg := range soakConfigs() {
		t.Run("chaos/"+cfg.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { runSoak(t, seed, cfg, tally, &figs) })
		})
	}
	t.Run("bad-inputs", func(t *testing.T) { runSoakBadInputs(t, seed, tally) })

	t.Logf("soak: seed=%d unary=%d streams=%d goroutines=%d %s upstream=%d successes=%d fallbacks=%d errors=%d breaks=%d cancels=%d consumerPanics=%d fakeTime=%v",
		seed, figs.unary.Load(), figs.streams.Load(), figs.goroutines.Load(), tally.line(), figs.upstream.Load(),
		figs.successes.Load(), figs.fallbacks.Load(), figs.errors.Load(), figs.breaks.Load(), figs.cancels.Load(), figs.userPanics.Load(),
		time.Duration(figs.fakeTime.Load()).Round(time.Millisecond))
	t.Logf("soak: errors by configuration and class: %v", figs.classes)
	for _, f := range tally.failures() {
		t.Errorf("soak seed=%d: %s", seed, f)
	}
}

// soakCall is one call of the soak, drawn from the seed and its number.
type soakCall struct {
	cfg        string
	id         int  // the call's number, in its prompt
	g          int  // the goroutine that makes it
	stream     bool // GenerateContentStream, else GenerateContent
	model      string
	deadline   time.Duration // the caller's deadline after the start; 0: none
	cancel     time.Duration // the caller cancels after this; 0: never
	breakAfter int           // streams: the caller breaks after this many chunks; 0: never
	panicAfter int           // streams: the loop body panics after this many chunks; 0: never
	think      time.Duration // pause before the call
	prompt     int           // the number in its prompt: its own id, or a prompt it shares with other calls
	bulkhead   string        // the bulkhead it names (InBulkhead); "": none
	key        string        // its idempotency key (Idempotent); "": none
	queue      time.Duration // how long its bulkhead may queue it (the call timeout starts after)
}

func (sc soakCall) String() string {
	kind := "unary"
	if sc.stream {
		kind = "stream"
	}
	return fmt.Sprintf("cfg=%s call=%d prompt=%d g=%d %s model=%q deadline=%v cancel=%v break=%d bulkhead=%q key=%q", sc.cfg, sc.id, sc.prompt, sc.g, kind, sc.model, sc.deadline, sc.cancel, sc.breakAfter, sc.bulkhead, sc.key)
}

// planSoakCall draws call id's shape. Calls with id%7 in {2, 5} are
// streams: 2 in 7.
func planSoakCall(seed uint64, cfg string, id int) soakCall {
	r := rand.New(rand.NewPCG(seed, 1<<40|uint64(id)))
	sc := soakCall{cfg: cfg, id: id, prompt: id, g: id % soakGoroutines, stream: id%7 == 2 || id%7 == 5}
	if r.IntN(3) == 0 {
		sc.model = soakCascade[r.IntN(len(soakCascade))]
	}
	if r.IntN(10) < 4 {
		sc.deadline = 100*time.Millisecond + time.Duration(r.Int64N(int64(15*time.Second)))
	}
	if r.IntN(10) < 1 {
		sc.cancel = time.Duration(r.Int64N(int64(5 * time.Second)))
	}
	if sc.stream {
		switch x := r.IntN(100); {
		case x < 20:
			sc.breakAfter = 1 + r.IntN(3)
		case x < 22:
			sc.panicAfter = 1 + r.IntN(3)
		}
	}
	sc.think = time.Duration(r.Int64N(int64(time.Second)))
	return sc
}

// soakRun is one configuration's run.
type soakRun struct {
	cfg    soakConfig
	seed   uint64
	srv    *geminitest.Server
	c      *geminiguard.Client
	tally  *soakTally
	figs   *soakFigures
	texts  map[string]string // model → its full text
	faults *soakFaults
	// shared: calls may share answers (WithDedup, idempotency keys), so
	// a caller's CallRecord need not show the requests sent for it;
	// cached: the answer cache (WithAnswerCache) may answer as the Fallback.
	shared, cached bool
	// outage, when set, says which prompts are in an outage (soakFaults.outage).
	outage  func(id int) bool
	mu      sync.Mutex          // guards sent
	sent    map[soakSeenKey]int // per model and call (by prompt): the requests its CallRecord shows; without sharing
	maxCost atomic.Int64        // the most one call's CallRecord cost, in Micros
	// spentAtChaosEnd is the day's spend once the chaos was over.
	spentAtChaosEnd geminiguard.Micros
	callsOK         atomic.Int64 // calls that returned an answer (streams: ended without error)
	callsFB         atomic.Int64 // of which the Fallback's
	calls           atomic.Int64 // calls made
}

// errConsumerPanic is what the soak's stream loop bodies panic with.
var errConsumerPanic = errors.New("soak: the consumer's loop body panics")

func runSoak(t *testing.T, seed uint64, cfg soakConfig, tally *soakTally, figs *soakFigures) {
	faults := newSoakFaults(seed, (soakUnary+soakStreams)*9/10, soakFaultRates)
	var models []geminitest.Model
	for i, m := range soakCascade {
		// The quota is the paid tier's, high enough never to be hit: the
		// limits a scripted 429 states are learned, and the free tier's
		// (10 RPM) would leave the run to the limiter.
		models = append(models, geminitest.Model{Name: m, Latency: time.Duration(20*(3-i)) * time.Millisecond,
			ChunkInterval: 10 * time.Millisecond, Decide: faults.decide(m),
			Quota: geminitest.Quota{RPM: 20_000, RPD: 1_000_000, PaidTier: true}})
	}
	srv := geminitest.New(models...)
	r := &soakRun{cfg: cfg, seed: seed, srv: srv, c: newClient(t, srv, nil, cfg.opts...), tally: tally, figs: figs, texts: make(map[string]string), faults: faults}
	for _, m := range soakCascade {
		r.texts[m] = srv.FullText(m)
	}
	baseline := goleak.IgnoreCurrent() // what runs before the soak, in and out of the bubble
	start := time.Now()

	// An operator re-runs CheckCascade every few seconds, as a service
	// would: it ends the cool-downs of models the fake answered 404 or
	// limit 0 for, and project cool-downs.
	stopDoctor := make(chan struct{})
	var doctor sync.WaitGroup
	doctor.Go(func() {
		for {
			select {
			case <-stopDoctor:
				return
			case <-time.After(2 * time.Second):
				_, _ = r.c.CheckCascade(t.Context())
			}
		}
	})

	var wg sync.WaitGroup
	for g := range soakGoroutines {
		wg.Go(func() {
			for id := g; id < soakUnary+soakStreams; id += soakGoroutines {
				sc := planSoakCall(seed, cfg.name, id)
				time.Sleep(sc.think)
				if sc.stream {
					r.stream(t.Context(), sc)
				} else {
					r.unary(t.Context(), sc)
				}
			}
		})
	}
	wg.Wait()
	close(stopDoctor)
	doctor.Wait()
	chaos := time.Since(start)

	r.checkStats()
	r.checkBudget(chaos)
	upstream := 0
	for _, m := range soakCascade {
		upstream += srv.Total(m)
	}
	r.checkHealthy(t.Context(), faults)

	synctest.Wait()
	// Goroutines the run left behind, by their stacks: a count of the
	// process's goroutines also saw workers that other packages start
	// lazily, outside the bubble (the opencensus one genai's dependencies
	// start), and flaked.
	if err := goleak.Find(baseline, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
		r.tally.add("leaked", "cfg=%s: %v", cfg.name, err)
	}
	r.checkCoverage(t, faults)

	figs.unary.Add(soakUnary)
	figs.streams.Add(soakStreams)
	figs.goroutines.Add(soakGoroutines)
	figs.upstream.Add(int64(upstream))
	figs.fakeTime.Add(int64(time.Since(start)))
	t.Logf("soak cfg=%s: %d upstream requests, chaos %v of fake time, %s", cfg.name, upstream, chaos.Round(time.Millisecond), r.tally.line())
}

// checkCoverage fails the soak itself when a fault kind was never drawn:
// the soak must cover them all.
func (r *soakRun) checkCoverage(t *testing.T, f *soakFaults) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range f.kinds {
		if f.drawn[k] == 0 {
			t.Errorf("soak cfg=%s seed=%d: fault %v was never drawn: raise its weight or the scale", r.cfg.name, r.seed, k)
		}
	}
	if f.cont == 0 {
		t.Errorf("soak cfg=%s seed=%d: no CONTINUATION answer was drawn", r.cfg.name, r.seed)
	}
}

func (r *soakRun) prompt(sc soakCall) []*genai.Content {
	return genai.Text(fmt.Sprintf("soak call %d: tell me something", sc.prompt))
}

// callOpts adds sc's bulkhead name and idempotency key to ctx.
func callOpts(ctx context.Context, sc soakCall) context.Context {
	if sc.bulkhead != "" {
		ctx = geminiguard.InBulkhead(ctx, sc.bulkhead)
	}
	if sc.key != "" {
		ctx = geminiguard.Idempotent(ctx, sc.key)
	}
	return ctx
}

// recorded keeps the requests the CallRecord of sc shows (its attempts not
// skipped), per model, and the call's cost.
func (r *soakRun) recorded(sc soakCall, rec *geminiguard.CallRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sent == nil {
		r.sent = make(map[soakSeenKey]int)
	}
	if !r.shared {
		for _, m := range soakCascade {
			r.sent[soakSeenKey{m, sc.prompt}] += 0 // the call is known
		}
		for _, a := range rec.Attempts {
			if !a.Skipped {
				r.sent[soakSeenKey{a.Model, sc.prompt}]++
			}
		}
	}
	for c := int64(rec.Cost); ; {
		m := r.maxCost.Load()
		if c <= m || r.maxCost.CompareAndSwap(m, c) {
			break
		}
	}
}

// checkIssue18 checks a call's error against the invariants of issue 18
// that the error shows; got is what a stream yielded before it.
func (r *soakRun) checkIssue18(sc soakCall, err error, got string, cancelled, callerDone bool, rec geminiguard.CallRecord) {
	if err == nil {
		return
	}
	// (1) A stream cut as stalled after it showed text, none of whose
	// requests was made to stall (the fake's chunks come every 10ms, its
	// first within 300ms, far inside the deadlines), before the caller's
	// deadline (which shortens the attempt's).
	if sc.stream && got != "" && !callerDone && strings.Contains(err.Error(), "stalled") && !r.faults.stalled(sc.prompt) {
		r.tally.add("stalledAfterText", "seed=%d %v: %v after %d bytes, no stall drawn for its prompt; attempts=%s", r.seed, sc, err, len(got), attemptsOf(rec))
	}
	// (2) A call's bulkhead refusal must be its own bulkhead's; the
	// interactive bulkhead is sized never to fill.
	if errors.Is(err, geminiguard.ErrBulkheadFull) && (sc.bulkhead == soakInteractive || !strings.Contains(err.Error(), fmt.Sprintf("bulkhead %q", sc.bulkhead))) {
		r.tally.add("foreignBulkhead", "seed=%d %v: %v", r.seed, sc, err)
	}
	// (4) In an outage every request fails at once, so a caller alone gets
	// the Fallback (or the answer cache) before its deadline: never a bare
	// context error.
	if r.outage != nil && r.outage(sc.prompt) && sc.deadline > 0 && !cancelled && r.cfg.fallback && bareContextErr(err) {
		r.tally.add("fallbackLost", "seed=%d %v: %v in an outage with a Fallback; record deduplicated=%v replayed=%v attempts=%s", r.seed, sc, err, rec.Deduplicated, rec.Replayed, attemptsOf(rec))
	}
}

// bareContextErr reports whether err is a context error and no more: none
// of the package's sentinels.
func bareContextErr(err error) bool {
	return (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) && !typedErr(err, false, false)
}

// callCtx returns the caller's context of sc: its deadline, and its
// cancellation, whose fake time is stored in cancelAt.
func (r *soakRun) callCtx(parent context.Context, sc soakCall, cancelAt *atomic.Int64) (context.Context, func()) {
	ctx, cancel := context.WithCancel(parent)
	if sc.deadline > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, sc.deadline)
		prev := cancel
		cancel = func() { c2(); prev() }
	}
	var timer *time.Timer
	if sc.cancel > 0 {
		r.figs.cancels.Add(1)
		timer = time.AfterFunc(sc.cancel, func() {
			cancelAt.Store(time.Now().UnixNano())
			cancel()
		})
	}
	return ctx, func() {
		if timer != nil {
			timer.Stop()
		}
		cancel()
	}
}

// checkTimes counts the overruns of a call that started at start and ended
// at end: past the caller's deadline, the cancellation or limit (the call
// timeout, for unary calls and a stream's first chunk), each + 1ms.
func (r *soakRun) checkTimes(sc soakCall, rec *geminiguard.CallRecord, start, end time.Time, cancelAt int64, limitEnd time.Time, limitWhat string) {
	const slack = time.Millisecond
	if sc.deadline > 0 && end.Sub(start) > sc.deadline+slack {
		r.tally.add("overruns", "%v: returned %v after the start, deadline %v", sc, end.Sub(start), sc.deadline)
	}
	if cancelAt != 0 {
		if d := end.Sub(time.Unix(0, cancelAt)); d > slack {
			r.tally.add("overruns", "%v: returned %v after the caller cancelled", sc, d)
		}
	}
	if !limitEnd.IsZero() && limitEnd.Sub(start) > sc.queue+r.cfg.callTimeout+slack {
		r.tally.add("overruns", "%v: %s %v after the start, queue %v + call timeout %v; attempts=%s", sc, limitWhat, limitEnd.Sub(start), sc.queue, r.cfg.callTimeout, attemptsOf(*rec))
	}
}

// whose returns the model whose full text is text, or "(fallback)" for the
// Fallback's, or "" when none.
func (r *soakRun) whose(text string) string {
	for m, full := range r.texts {
		if text == full {
			return m
		}
	}
	if r.cfg.fallback && text == soakFallbackText {
		return "(fallback)"
	}
	return ""
}

// prefixOf reports whether text is a prefix of one model's text or of the
// Fallback's.
func (r *soakRun) prefixOf(text string) bool {
	for _, full := range r.texts {
		if strings.HasPrefix(full, text) {
			return true
		}
	}
	return r.cfg.fallback && strings.HasPrefix(soakFallbackText, text)
}

// spliced reports whether text is what a stream resumed on another model
// yields (WithStreamResume sends the text so far to the same model or the
// next one): a prefix of one model's text, then text of another, which the
// fake starts over since the partial turn is not its own (and again for each
// later resume). With last set, the
// second part must end last's text (a complete answer from last); without,
// it may be any part of a model's text (a stream that failed later).
func (r *soakRun) spliced(text, last string) bool {
	for k := 1; k < len(text); k++ {
		if !r.prefixOf(text[:k]) {
			return false
		}
		rest := text[k:]
		for m, full := range r.texts {
			if last != "" && m == last && strings.HasSuffix(full, rest) || last == "" && strings.Contains(full, rest) {
				return true
			}
		}
		if r.spliced(rest, last) { // resumed again: another splice
			return true
		}
	}
	return false
}

// checkAnswer checks a complete answer against its record.
func (r *soakRun) checkAnswer(sc soakCall, text string, rec geminiguard.CallRecord) {
	who := r.whose(text)
	if who == "" && rec.Resumes > 0 && rec.Model != "" && r.spliced(text, rec.Model) {
		who = rec.Model // resumed on another model: the last one answered
	}
	switch who {
	case "":
		r.tally.add("wrongText", "%v: text %q (%d bytes) is no model's and not the Fallback's; record model=%q fallback=%v attempts=%s", sc, clip(text), len(text), rec.Model, rec.Fallback, attemptsOf(rec))
	case "(fallback)":
		if !rec.Fallback || rec.Model != "" {
			r.tally.add("recordMismatch", "%v: the Fallback's text, record model=%q fallback=%v", sc, rec.Model, rec.Fallback)
		}
	default:
		if r.cached && rec.Fallback && rec.Model == "" {
			break // the answer cache's: a model's earlier answer, served as the Fallback
		}
		if rec.Fallback || rec.Model != who {
			r.tally.add("recordMismatch", "%v: %s's text, record model=%q fallback=%v attempts=%s", sc, who, rec.Model, rec.Fallback, attemptsOf(rec))
		}
	}
}

func (r *soakRun) unary(parent context.Context, sc soakCall) {
	var cancelAt atomic.Int64
	ctx, cancel := r.callCtx(parent, sc, &cancelAt)
	defer cancel()
	var rec geminiguard.CallRecord
	start := time.Now()
	var (
		resp     *genai.GenerateContentResponse
		err      error
		panicked any
	)
	r.calls.Add(1)
	func() {
		defer func() { panicked = recover() }()
		resp, err = r.c.GenerateContent(geminiguard.RecordCall(callOpts(ctx, sc), &rec), sc.model, r.prompt(sc), nil)
	}()
	end := time.Now()
	if panicked != nil {
		r.tally.add("panics", "seed=%d %v: GenerateContent panicked: %v", r.seed, sc, panicked)
		return
	}
	r.recorded(sc, &rec)
	r.checkTimes(sc, &rec, start, end, cancelAt.Load(), end, "returned")
	r.checkIssue18(sc, err, "", cancelAt.Load() != 0, callerDone(ctx, end), rec)
	if err != nil {
		r.figs.errors.Add(1)
		r.figs.class(r.cfg.name, err)
		if !typedErr(err, callerDone(ctx, end), end.Sub(start) >= r.cfg.callTimeout) {
			r.tally.add("untyped", "seed=%d %v: %T: %v", r.seed, sc, err, err)
		}
		if rec.Model != "" || rec.Fallback {
			r.tally.add("recordMismatch", "%v: error %v, record model=%q fallback=%v", sc, err, rec.Model, rec.Fallback)
		}
		return
	}
	text := ""
	if resp != nil {
		text = resp.Text()
	}
	if text == "" {
		r.tally.add("silent", "seed=%d %v: nil error, empty text; record model=%q fallback=%v attempts=%s", r.seed, sc, rec.Model, rec.Fallback, attemptsOf(rec))
		return
	}
	r.callsOK.Add(1)
	r.figs.successes.Add(1)
	if rec.Fallback {
		r.callsFB.Add(1)
		r.figs.fallbacks.Add(1)
	}
	r.checkAnswer(sc, text, rec)
}

func (r *soakRun) stream(parent context.Context, sc soakCall) {
	var cancelAt atomic.Int64
	ctx, cancel := r.callCtx(parent, sc, &cancelAt)
	defer cancel()
	var rec geminiguard.CallRecord
	start := time.Now()
	var (
		text        strings.Builder
		chunks      int
		finish      genai.FinishReason
		err         error
		firstAt     time.Time
		broke       bool
		panicked    any
		afterErr    int // yields after an error
		nilResponse int
	)
	r.calls.Add(1)
	func() {
		defer func() { panicked = recover() }()
		for resp, e := range r.c.GenerateContentStream(geminiguard.RecordCall(callOpts(ctx, sc), &rec), sc.model, r.prompt(sc), nil) {
			if err != nil {
				afterErr++
			}
			if e != nil {
				err = e
				continue
			}
			if resp == nil {
				nilResponse++
				continue
			}
			chunks++
			if firstAt.IsZero() {
				firstAt = time.Now()
			}
			if (len(resp.Candidates) == 0 || resp.Candidates[0] == nil) && !geminiguard.IsFallback(resp) {
				r.tally.add("emptyChunk", "seed=%d %v: chunk %d has no candidate; attempts so far unknown", r.seed, sc, chunks)
			}
			text.WriteString(resp.Text())
			if len(resp.Candidates) > 0 && resp.Candidates[0] != nil {
				finish = resp.Candidates[0].FinishReason
			}
			if chunks == sc.panicAfter {
				panic(errConsumerPanic)
			}
			if chunks == sc.breakAfter {
				broke = true
				break
			}
		}
	}()
	end := time.Now()
	if panicked == nil {
		r.recorded(sc, &rec) // a loop body's panic leaves the record unfilled
	}
	if panicked != nil {
		if panicked == errConsumerPanic {
			r.figs.userPanics.Add(1) // ours, and it reached us: as it should
			return
		}
		r.tally.add("panics", "seed=%d %v: GenerateContentStream panicked: %v", r.seed, sc, panicked)
		return
	}
	got := text.String()
	limitEnd, what := firstAt, "first chunk"
	if firstAt.IsZero() {
		limitEnd, what = end, "ended without a chunk"
	}
	r.checkTimes(sc, &rec, start, end, cancelAt.Load(), limitEnd, what)
	r.checkIssue18(sc, err, got, cancelAt.Load() != 0, callerDone(ctx, end), rec)
	if afterErr > 0 || nilResponse > 0 {
		r.tally.add("silent", "seed=%d %v: %d yields after the error, %d nil responses with nil error", r.seed, sc, afterErr, nilResponse)
	}
	switch {
	case err != nil:
		r.figs.errors.Add(1)
		r.figs.class(r.cfg.name, err)
		if !typedErr(err, callerDone(ctx, end), !firstAt.IsZero() || end.Sub(start) >= r.cfg.callTimeout) {
			r.tally.add("untyped", "seed=%d %v: %T: %v", r.seed, sc, err, err)
		}
		if !r.prefixOf(got) && !(rec.Resumes > 0 && r.spliced(got, "")) {
			r.tally.add("wrongText", "%v: before its error the stream yielded %q, no model's text begins so; attempts=%s", sc, clip(got), attemptsOf(rec))
		}
		var serr *geminiguard.StreamError
		if errors.As(err, &serr) && serr.Partial != got {
			r.tally.add("recordMismatch", "%v: StreamError.Partial has %d bytes, the caller got %d", sc, len(serr.Partial), len(got))
		}
		if rec.Model != "" || rec.Fallback {
			r.tally.add("recordMismatch", "%v: error %v, record model=%q fallback=%v", sc, err, rec.Model, rec.Fallback)
		}
	case broke:
		r.figs.breaks.Add(1)
		r.callsOK.Add(1) // the library counts a stream the caller stopped as a success
		r.figs.successes.Add(1)
		if rec.Fallback {
			r.callsFB.Add(1)
			r.figs.fallbacks.Add(1)
		}
		if !r.prefixOf(got) && !(rec.Resumes > 0 && r.spliced(got, "")) {
			r.tally.add("wrongText", "%v: broken after %d chunks, text %q begins no model's text; attempts=%s", sc, chunks, clip(got), attemptsOf(rec))
		}
		if !rec.Fallback && (rec.Model == "" || !strings.HasPrefix(r.texts[rec.Model], got) && rec.Resumes == 0) {
			r.tally.add("recordMismatch", "%v: broken after %d chunks, record model=%q fallback=%v for text %q", sc, chunks, rec.Model, rec.Fallback, clip(got))
		}
	case got == "" || finish == "":
		r.tally.add("silent", "seed=%d %v: ended with no error after %d chunks, %d bytes, last finishReason %q; record model=%q attempts=%s", r.seed, sc, chunks, len(got), finish, rec.Model, attemptsOf(rec))
	default:
		r.callsOK.Add(1)
		r.figs.successes.Add(1)
		if rec.Fallback {
			r.callsFB.Add(1)
			r.figs.fallbacks.Add(1)
		}
		r.checkAnswer(sc, got, rec)
	}
}

// checkStats compares the Client's Stats with what the callers saw: every
// call counted once, successes and Fallback answers as the callers got
// them, and no upstream request the fake saw missing from the models'
// counters.
func (r *soakRun) checkStats() {
	st := r.c.Stats()
	calls, ok, fb := r.calls.Load(), r.callsOK.Load(), r.callsFB.Load()
	if st.Calls != calls {
		r.tally.add("statsMismatch", "cfg=%s: Stats.Calls=%d, callers made %d", r.cfg.name, st.Calls, calls)
	}
	if st.Successes+st.Fallbacks != ok {
		r.tally.add("statsMismatch", "cfg=%s: Stats.Successes+Fallbacks=%d+%d=%d, callers got %d answers (streams the consumer's panic ended not counted)",
			r.cfg.name, st.Successes, st.Fallbacks, st.Successes+st.Fallbacks, ok)
	}
	if st.Fallbacks != fb {
		r.tally.add("statsMismatch", "cfg=%s: Stats.Fallbacks=%d, callers got %d Fallback answers", r.cfg.name, st.Fallbacks, fb)
	}
	if st.Calls > 0 && math.Abs(st.FallbackRate-float64(st.Fallbacks)/float64(st.Calls)) > 1e-9 {
		r.tally.add("statsMismatch", "cfg=%s: FallbackRate %v, Fallbacks/Calls %v", r.cfg.name, st.FallbackRate, float64(st.Fallbacks)/float64(st.Calls))
	}
	for _, ms := range st.Models {
		if hits := int64(r.srv.Total(ms.Model)); hits > ms.Requests {
			r.tally.add("statsMismatch", "cfg=%s: the fake got %d requests for %s, its Stats count %d", r.cfg.name, hits, ms.Model, ms.Requests)
		}
	}
	r.checkRecordRequests(st)
}

// checkRecordRequests compares the requests each call's CallRecord shows
// with those the fake got for it, per model, and Stats' requests with the
// fake's (issue 18, item 10). Only where every request belongs to one
// caller's record: not under sharing; and not for the streams a loop
// body's panic ended, whose records are not filled.
func (r *soakRun) checkRecordRequests(st geminiguard.Stats) {
	if r.shared {
		return
	}
	for _, ms := range st.Models {
		if hits := int64(r.srv.Total(ms.Model)); hits != ms.Requests {
			r.tally.add("recordRequests", "seed=%d cfg=%s: %s: Stats count %d requests, the fake got %d", r.seed, r.cfg.name, ms.Model, ms.Requests, hits)
		}
	}
	fake := make(map[soakSeenKey]int)
	for _, m := range soakCascade {
		for _, req := range r.srv.Requests(m) {
			if id, ok := soakCallID(req.Contents); ok {
				fake[soakSeenKey{m, id}]++
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, n := range r.sent {
		if fake[k] != n {
			r.tally.add("recordRequests", "seed=%d cfg=%s call=%d: its CallRecord shows %d requests to %s, the fake got %d", r.seed, r.cfg.name, k.call, n, k.model, fake[k])
		}
	}
}

// retryBudgetTTL is the Client's retry budget window (retryBudgetTTL in
// options.go).
const soakBudgetTTL = 10 * time.Second

// checkBudget bounds the upstream requests of the chaos phase (which lasted
// d of fake time).
//
// The soak groups the requests the fake logged by call, model, verb and
// continuation token or resumed text (soakUnit): each group is what one
// first attempt of one model started, and the Client deposits into its
// retry budget once per first attempt sent. The group's further requests
// are retries (in place, or in a later round), each withdrawn from the
// budget first, except the early probe of an all-open cascade, which starts
// afresh (at most one per AllOpenProbeEvery across the Client, so at most
// d/AllOpenProbeEvery+1 of them).
//
// The budget (backoff.go, retryBudget) allows a withdrawal only while
// ratio·(first attempts) − retries + reserve ≥ 1 over its window, the
// window being between 0.9·ttl and ttl long (budgetSlots = 10). Cut the
// phase into k = ⌈d/(0.9·ttl)⌉+1 intervals of 0.9·ttl: the retries of one
// interval all fall within the window of its last retry, so they are at
// most ratio·(first attempts of that window) + reserve; each first attempt
// lies in the windows of at most two intervals. So
//
//	retries ≤ 2·ratio·firstAttempts + k·reserve + probes,  reserve = minPerSecond·ttl.
//
// Within one group: at most MaxAttempts requests in the call's rounds
// (tries carry over from round to round), and MaxAttempts more if an early
// probe picked the model again.
func (r *soakRun) checkBudget(d time.Duration) {
	groups := make(map[soakUnitKey]int)
	total := 0
	for _, m := range soakCascade {
		for _, req := range r.srv.Requests(m) {
			k, ok := soakUnit(m, req)
			if !ok {
				continue
			}
			groups[k]++
			total++
		}
	}
	first := len(groups)
	retries := total - first
	k := math.Ceil(float64(d)/float64(soakBudgetTTL*9/10)) + 1
	probes := math.Ceil(float64(d)/float64(r.cfg.allOpenProbeEvery)) + 1
	bound := 2*r.cfg.budgetRatio*float64(first) + k*r.cfg.budgetMinPerSecond*soakBudgetTTL.Seconds() + probes
	if float64(retries) > bound {
		r.tally.add("overBudget", "cfg=%s: %d retries over %d first attempts in %v of fake time; the budget's bound is %.0f", r.cfg.name, retries, first, d.Round(time.Millisecond), bound)
	}
	n := 0
	for g, c := range groups {
		if c > 2*r.cfg.maxAttempts {
			n++
			if n <= *soakExamples {
				r.tally.add("overBudget", "cfg=%s call=%d: %d requests to %s (%s, token %q, resumed at %d); at most %d", r.cfg.name, g.call, c, g.model, g.verb, g.token, g.partial, 2*r.cfg.maxAttempts)
			}
		}
	}
}

// checkHealthy makes the fake (and the configuration's shared state: with
// it failing, a lease that fails sends the call to the next model, as it
// should) healthy, lets a day pass in fake time (every
// OpenFor, cool-down and daily quota is over), runs CheckCascade as an
// operator would, and then asks every model directly, a few times: every
// breaker must then be closed, and a call with no model named must get the
// primary's answer with exactly one upstream request.
func (r *soakRun) checkHealthy(ctx context.Context, faults *soakFaults) {
	faults.healthy.Store(true)
	if r.cfg.store != nil {
		r.cfg.store.healthy.Store(true)
	}
	time.Sleep(25 * time.Hour)
	if _, err := r.c.CheckCascade(ctx); err != nil {
		r.tally.add("unclosedBreakers", "cfg=%s: CheckCascade on a healthy fake: %v", r.cfg.name, err)
	}
	for _, m := range soakCascade {
		for range 3 {
			_, _, _ = ask(ctx, r.c, m)
		}
	}
	for _, ms := range r.c.Stats().Models {
		if ms.State != geminiguard.StateClosed || ms.EmbedState != geminiguard.StateClosed {
			r.tally.add("unclosedBreakers", "seed=%d cfg=%s: %s is %v (embed %v) once the fake is healthy; cool-down until %v", r.seed, r.cfg.name, ms.Model, ms.State, ms.EmbedState, ms.CoolDownUntil)
		}
	}
	before := 0
	for _, m := range soakCascade {
		before += r.srv.Total(m)
	}
	resp, rec, err := ask(ctx, r.c, "")
	after := 0
	for _, m := range soakCascade {
		after += r.srv.Total(m)
	}
	if err != nil || rec.Model != pro || resp.Text() != r.texts[pro] || after-before != 1 {
		r.tally.add("unclosedBreakers", "seed=%d cfg=%s: once healthy, a call got model=%q err=%v with %d upstream requests; want %s with 1", r.seed, r.cfg.name, rec.Model, err, after-before, pro)
	}
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:30] + "…" + s[len(s)-25:]
	}
	return s
}

// attemptsOf summarises a record's attempts: "model:class" each, "+" for a
// skip.
func attemptsOf(rec geminiguard.CallRecord) string {
	var parts []string
	for _, a := range rec.Attempts {
		s := a.Model + ":ok"
		if a.Err != nil {
			s = a.Model + ":" + geminiguard.Classify(a.Err).Class.String()
		}
		if a.Skipped {
			s = "+" + s
		}
		parts = append(parts, s)
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// runSoakBadInputs tries bad options on New and bad calls on a Client, each
// on a fresh fake: New returns an error or a working Client, a bad call
// returns a typed error (or an answer), nothing panics, and the next good
// call on the same Client gets the primary's answer with exactly one
// upstream request.
func runSoakBadInputs(t *testing.T, seed uint64, tally *soakTally) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, row := range []struct {
		name string
		opts []geminiguard.Option
	}{
		{"negative RPM", []geminiguard.Option{geminiguard.WithLimits(pro, geminiguard.Limits{RPM: -1})}},
		{"RPM MaxInt", []geminiguard.Option{geminiguard.WithLimits(pro, geminiguard.Limits{RPM: math.MaxInt})}},
		{"TPM and RPD MaxInt", []geminiguard.Option{geminiguard.WithLimits(pro, geminiguard.Limits{TPM: math.MaxInt, RPD: math.MaxInt})}},
		{"NaN headroom", []geminiguard.Option{geminiguard.WithHeadroom(nan)}},
		{"+Inf headroom", []geminiguard.Option{geminiguard.WithHeadroom(inf)}},
		{"zero headroom", []geminiguard.Option{geminiguard.WithHeadroom(0)}},
		{"attempt = call timeout", []geminiguard.Option{geminiguard.WithTimeouts(10*time.Second, 10*time.Second)}},
		{"negative timeouts", []geminiguard.Option{geminiguard.WithTimeouts(-time.Second, -time.Second)}},
		{"huge timeouts", []geminiguard.Option{geminiguard.WithTimeouts(math.MaxInt64-1, math.MaxInt64)}},
		{"zero stream deadlines", []geminiguard.Option{geminiguard.WithStreamDeadlines(0, -1)}},
		{"nil option", []geminiguard.Option{nil}},
		{"nil fallback", []geminiguard.Option{geminiguard.WithFallback(nil)}},
		{"empty cascade", []geminiguard.Option{geminiguard.WithCascade()}},
		{"cascade with empty name", []geminiguard.Option{geminiguard.WithCascade(pro, "")}},
		{"cascade with ?", []geminiguard.Option{geminiguard.WithCascade(pro + "?alt=x")}},
		{"cascade with ..", []geminiguard.Option{geminiguard.WithCascade("../" + pro)}},
		{"cascade with a model twice", []geminiguard.Option{geminiguard.WithCascade(pro, "models/"+pro)}},
		{"negative MaxAttempts", []geminiguard.Option{geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: -1})}},
		{"MaxAttempts MaxInt", []geminiguard.Option{geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: math.MaxInt})}},
		{"NaN BudgetRatio", []geminiguard.Option{geminiguard.WithRetry(geminiguard.RetryPolicy{BudgetRatio: nan})}},
		{"+Inf BudgetMinPerSecond", []geminiguard.Option{geminiguard.WithRetry(geminiguard.RetryPolicy{BudgetMinPerSecond: inf})}},
		{"huge BaseDelay", []geminiguard.Option{geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: math.MaxInt64})}},
		{"NaN FailureRate", []geminiguard.Option{geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureRate: nan})}},
		{"FailureRate 2", []geminiguard.Option{geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureRate: 2})}},
		{"negative OpenFor", []geminiguard.Option{geminiguard.WithBreaker(geminiguard.BreakerSettings{OpenFor: -time.Second})}},
		{"HalfOpenProbes MaxInt", []geminiguard.Option{geminiguard.WithBreaker(geminiguard.BreakerSettings{HalfOpenProbes: math.MaxInt})}},
		{"tiny breaker Window", []geminiguard.Option{geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureRate: 0.5, Window: time.Nanosecond})}},
		{"nil jitter source", []geminiguard.Option{geminiguard.WithJitterSource(nil)}},
		{"nil genai client", []geminiguard.Option{geminiguard.WithGenAIClient(nil)}},
		{"negative project cool-down", []geminiguard.Option{geminiguard.WithProjectCoolDown(-time.Second)}},
		{"nil shutdowns", []geminiguard.Option{geminiguard.WithShutdowns(nil)}},
	} {
		t.Run("option/"+row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := soakHealthyServer()
				opts := append([]geminiguard.Option{geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
					geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade(soakCascade...)}, row.opts...)
				var (
					c   *geminiguard.Client
					err error
				)
				if p := soakRecover(func() { c, err = geminiguard.New(t.Context(), opts...) }); p != nil {
					tally.add("panics", "seed=%d option %s: New panicked: %v", seed, row.name, p)
					return
				}
				if err != nil {
					return // rejected: fine
				}
				soakGoodCall(t.Context(), srv, c, tally, "option "+row.name)
			})
		})
	}

	type outcome struct {
		text  string
		err   error
		empty bool // a nil error without any content
	}
	generate := func(contents []*genai.Content, cfg *genai.GenerateContentConfig, model string) func(context.Context, *geminiguard.Client) outcome {
		return func(ctx context.Context, c *geminiguard.Client) outcome {
			resp, err := c.GenerateContent(ctx, model, contents, cfg)
			if err != nil {
				return outcome{err: err}
			}
			text := ""
			if resp != nil {
				text = resp.Text()
			}
			return outcome{text: text, empty: text == ""}
		}
	}
	stream := func(contents []*genai.Content, cfg *genai.GenerateContentConfig, model string, panicAt int) func(context.Context, *geminiguard.Client) outcome {
		return func(ctx context.Context, c *geminiguard.Client) outcome {
			var b strings.Builder
			n := 0
			for resp, err := range c.GenerateContentStream(ctx, model, contents, cfg) {
				if err != nil {
					return outcome{text: b.String(), err: err}
				}
				n++
				b.WriteString(resp.Text())
				if n == panicAt {
					panic(errConsumerPanic)
				}
			}
			return outcome{text: b.String(), empty: b.Len() == 0}
		}
	}
	embed := func(contents []*genai.Content, model string) func(context.Context, *geminiguard.Client) outcome {
		return func(ctx context.Context, c *geminiguard.Client) outcome {
			resp, err := c.EmbedContent(ctx, model, contents, nil)
			if err != nil {
				return outcome{err: err}
			}
			return outcome{text: "(embeddings)", empty: resp == nil || len(resp.Embeddings) == 0}
		}
	}
	hi := genai.Text("hi")
	nilElem := []*genai.Content{genai.NewContentFromText("hi", genai.RoleUser), nil}
	nilPart := []*genai.Content{{Role: genai.RoleUser, Parts: []*genai.Part{nil}}}
	huge := make([]*genai.Content, 20_000)
	for i := range huge {
		huge[i] = genai.NewContentFromText("word ", genai.RoleUser)
	}
	nanTemp := &genai.GenerateContentConfig{Temperature: genai.Ptr(float32(nan))}
	infTemp := &genai.GenerateContentConfig{Temperature: genai.Ptr(float32(inf))}
	infSchema := &genai.GenerateContentConfig{ResponseMIMEType: "application/json",
		ResponseSchema: &genai.Schema{Type: genai.TypeNumber, Minimum: genai.Ptr(inf)}}
	chanSchema := &genai.GenerateContentConfig{ResponseMIMEType: "application/json", ResponseJsonSchema: make(chan int)}
	// probing opens the primary's breaker (one 503, threshold 1) and lets
	// OpenFor pass: the bad call is then the primary's half-open probe.
	probing := func(ctx context.Context, srv *geminitest.Server, c *geminiguard.Client) {
		srv.Script(pro, geminitest.Step{Fault: geminitest.Overloaded})
		_, _, _ = ask(ctx, c, "")
		time.Sleep(2 * time.Second)
	}
	probeOpts := []geminiguard.Option{geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 1, OpenFor: time.Second}),
		geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1})}
	for _, row := range []struct {
		name  string
		opts  []geminiguard.Option
		setup func(context.Context, *geminitest.Server, *geminiguard.Client)
		call  func(context.Context, *geminiguard.Client) outcome
	}{
		{name: "nil content element", call: generate(nilElem, nil, "")},
		{name: "nil part", call: generate(nilPart, nil, "")},
		{name: "nil contents", call: generate(nil, nil, "")},
		{name: "NaN temperature", call: generate(hi, nanTemp, "")},
		{name: "+Inf temperature", call: generate(hi, infTemp, "")},
		{name: "+Inf schema minimum", call: generate(hi, infSchema, "")},
		{name: "unmarshalable JSON schema", call: generate(hi, chanSchema, "")},
		{name: "model with ?", call: generate(hi, nil, pro+"?alt=x")},
		{name: "model with ..", call: generate(hi, nil, "../../"+pro)},
		{name: "model not served", call: generate(hi, nil, "gemini-nope")},
		{name: "huge contents", call: generate(huge, nil, "")},
		{name: "stream nil content element", call: stream(nilElem, nil, "", 0)},
		{name: "stream NaN temperature", call: stream(hi, nanTemp, "", 0)},
		{name: "stream +Inf schema minimum", call: stream(hi, infSchema, "", 0)},
		{name: "stream model with ..", call: stream(hi, nil, "../../"+pro, 0)},
		{name: "embed without model", call: embed(hi, "")},
		{name: "embed nil contents", call: embed(nil, pro)},
		{name: "embed nil content element", call: embed(nilElem, pro)},
		{name: "probe: nil content element", opts: probeOpts, setup: probing, call: generate(nilElem, nil, "")},
		{name: "probe: stream consumer panics", opts: probeOpts, setup: probing, call: stream(hi, nil, "", 1)},
		{name: "probe: NaN temperature", opts: probeOpts, setup: probing, call: generate(hi, nanTemp, "")},
		{name: "cancelled context", call: func(ctx context.Context, c *geminiguard.Client) outcome {
			ctx, cancel := context.WithCancel(ctx)
			cancel()
			return generate(hi, nil, "")(ctx, c)
		}},
	} {
		t.Run("call/"+row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := soakHealthyServer()
				c := newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithCascade(soakCascade...)}, row.opts...)...)
				if row.setup != nil {
					row.setup(t.Context(), srv, c)
				}
				var out outcome
				p := soakRecover(func() { out = row.call(t.Context(), c) })
				switch {
				case p == errConsumerPanic:
				case p != nil:
					tally.add("panics", "seed=%d bad call %q: panicked: %v", seed, row.name, p)
				case out.err != nil && !typedErr(out.err, false, false) && !strings.HasPrefix(row.name, "cancelled"):
					tally.add("untyped", "seed=%d bad call %q: %T: %v", seed, row.name, out.err, out.err)
				case out.err == nil && out.empty:
					tally.add("silent", "seed=%d bad call %q: nil error and nothing in the answer", seed, row.name)
				}
				soakGoodCall(t.Context(), srv, c, tally, "after bad call "+row.name)
			})
		})
	}
}

// soakHealthyServer returns a fake whose cascade models always answer.
func soakHealthyServer() *geminitest.Server {
	var models []geminitest.Model
	for _, m := range soakCascade {
		models = append(models, geminitest.Model{Name: m, Latency: 50 * time.Millisecond})
	}
	return geminitest.New(models...)
}

// soakGoodCall makes a good call on c and counts it under badBreaksGood
// unless the primary answers it with exactly one upstream request.
func soakGoodCall(ctx context.Context, srv *geminitest.Server, c *geminiguard.Client, tally *soakTally, what string) {
	total := func() int {
		n := 0
		for _, m := range soakCascade {
			n += srv.Total(m)
		}
		return n
	}
	before := total()
	var (
		resp *genai.GenerateContentResponse
		rec  geminiguard.CallRecord
		err  error
	)
	if p := soakRecover(func() { resp, rec, err = ask(ctx, c, "") }); p != nil {
		tally.add("badBreaksGood", "%s: the good call panicked: %v", what, p)
		return
	}
	sent := total() - before
	if err != nil || rec.Model != pro || resp.Text() != srv.FullText(pro) || sent != 1 {
		tally.add("badBreaksGood", "%s: the next good call got model=%q err=%v after %d upstream requests; want %s with 1", what, rec.Model, err, sent, pro)
	}
}

// soakRecover runs f and returns what it panicked with, nil when it did not.
func soakRecover(f func()) (p any) {
	defer func() { p = recover() }()
	f()
	return nil
}
