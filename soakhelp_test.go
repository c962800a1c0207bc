package geminiguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// soakSeed seeds every random draw of the soak: the fault each upstream
// request gets, and each call's shape (unary or stream, model, deadline,
// cancellation, early break). Rerun a failing seed with
// go test -race -run Soak -soak.seed=N .
var soakSeed = flag.Uint64("soak.seed", 1, "seed of TestSoak's random draws")

// The soak's invariants, each asserted at 0, in the order of its figures line.
var soakInvariants = []string{
	"panics",           // a panic out of a Client method (not the consumer's own)
	"silent",           // nil error with empty text; a stream that ends with no finishReason and no error
	"untyped",          // an error no sentinel, context error or request-scoped API error explains
	"overruns",         // returned later than the caller's deadline, a cancellation or the call timeout, + 1ms
	"wrongText",        // an answer not exactly one model's text nor exactly the Fallback's
	"recordMismatch",   // a CallRecord (or StreamError.Partial) that disagrees with what the caller saw
	"statsMismatch",    // Stats that disagree with what the callers saw
	"overBudget",       // upstream requests beyond the retry budget's bound
	"leaked",           // goroutines left behind in the bubble
	"unclosedBreakers", // breakers not closed, or the primary not answering, once the fake is healthy
	"badBreaksGood",    // a bad call or option after which a good call does not get the primary's answer at once
	// Issue 18, for every configuration:
	"stalledAfterText", // (1) a stream failed as stalled after it yielded text, though none of its upstream requests stalled
	"emptyChunk",       // (3) a chunk without a candidate reached the caller's loop
	"recordRequests",   // (10) the requests CallRecords show (attempts not skipped) differ from Stats' or the fake's; configurations without sharing
}

// soakTally counts invariant violations and keeps the first few examples of
// each. Safe for concurrent use.
type soakTally struct {
	names    []string // the invariants, in order
	mu       sync.Mutex
	counts   map[string]int
	examples map[string][]string
}

// newSoakTally returns a tally of the invariants names, in that order.
func newSoakTally(names []string) *soakTally {
	return &soakTally{names: names, counts: make(map[string]int), examples: make(map[string][]string)}
}

// soakExamples is how many examples of each invariant a failure shows.
var soakExamples = flag.Int("soak.examples", 3, "examples TestSoak shows of each failed invariant")

func (t *soakTally) add(invariant, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !slices.Contains(t.names, invariant) {
		panic("soak: unknown invariant " + invariant)
	}
	t.counts[invariant]++
	if len(t.examples[invariant]) < *soakExamples {
		t.examples[invariant] = append(t.examples[invariant], fmt.Sprintf(format, args...))
	}
}

// line returns the invariants as "name=n" pairs, in order.
func (t *soakTally) line() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for i, inv := range t.names {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%d", inv, t.counts[inv])
	}
	return b.String()
}

// failures returns one line per non-zero invariant with its examples.
func (t *soakTally) failures() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []string
	for _, inv := range t.names {
		if n := t.counts[inv]; n > 0 {
			out = append(out, fmt.Sprintf("%s=%d, e.g.:\n\t%s", inv, n, strings.Join(t.examples[inv], "\n\t")))
		}
	}
	return out
}

// typedErr reports whether err is an error a caller can act on: it matches
// one of the package's sentinels; or a context error while the caller's
// context is done (callerDone) or the call timeout has passed (timedOut); or
// it is request-scoped: an API error with a 4xx code, or a *ModelError whose
// verdict is a bad request. Anything else is untyped.
// callerDone reports whether the caller's context had ended when its call
// returned at end: cancelled, or its deadline reached (at that very
// instant of fake time the context's timer may not have fired yet).
func callerDone(ctx context.Context, end time.Time) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !end.Before(d)
}

func typedErr(err error, callerDone, timedOut bool) bool {
	for _, s := range []error{
		geminiguard.ErrCircuitOpen, geminiguard.ErrRateLimited, geminiguard.ErrQuotaExhausted,
		geminiguard.ErrAllModelsFailed, geminiguard.ErrEmptyResponse, geminiguard.ErrBlocked,
		geminiguard.ErrStreamInterrupted, geminiguard.ErrModelNotFound,
		geminiguard.ErrBulkheadFull, geminiguard.ErrBudgetExhausted,
	} {
		if errors.Is(err, s) {
			return true
		}
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return callerDone || timedOut
	}
	var api genai.APIError
	if errors.As(err, &api) && api.Code >= 400 && api.Code < 500 {
		return true
	}
	// A request refused as malformed, before or by the API.
	v := geminiguard.Classify(err)
	return v.Class == geminiguard.ClassBadRequest && v.Scope == geminiguard.ScopeRequest
}

// soakFaultWeights spreads the fake's faults: every kind, the everyday ones
// (overload, per-minute quota, cuts) often, the ones that take a model or
// the whole project out for long (daily quota, limit zero, spend cap, bad
// key, retired model) rarely, so that the run is not one long cool-down.
var soakFaultWeights = map[geminitest.Fault]float64{
	geminitest.RateLimitMinute:             2,
	geminitest.DailyQuota:                  0.02,
	geminitest.DailyAndMinute:              0.02,
	geminitest.LimitZero:                   0.02,
	geminitest.SpendCap:                    0.02,
	geminitest.PrepayDepleted:              0.02,
	geminitest.ResourceExhausted:           0.1,
	geminitest.RateLimitLegacy:             0.1,
	geminitest.Internal:                    5,
	geminitest.Overloaded:                  10,
	geminitest.DeadlineExpired503:          3,
	geminitest.GatewayTimeout:              3,
	geminitest.InvalidArgument:             0.5,
	geminitest.APIKeyInvalid:               0.02,
	geminitest.FailedPrecondition:          0.02,
	geminitest.LeakedKey:                   0.02,
	geminitest.Unregistered:                0.02,
	geminitest.ServiceDisabled:             0.02,
	geminitest.NotFound:                    0.02,
	geminitest.NonJSONBody:                 2,
	geminitest.JSONArrayBody:               2,
	geminitest.DropBeforeHeaders:           3,
	geminitest.PromptBlocked:               0.5,
	geminitest.FinishSafety:                0.5,
	geminitest.FinishRecitation:            0.5,
	geminitest.FinishOther:                 1,
	geminitest.FinishMalformedFunctionCall: 1,
	geminitest.MaxTokensEmpty:              1,
	geminitest.StopNoParts:                 1,
	geminitest.NoCandidates:                1,
	geminitest.StreamCutBetween:            5,
	geminitest.StreamCutInside:             4,
	geminitest.StreamErrorInside:           4,
	geminitest.StreamNoFinish:              3,
	geminitest.StreamStallFirst:            3,
	geminitest.StreamStallBetween:          3,
}

// soakLateFaults take a model out until midnight (the local limiter then
// refuses it for the rest of the fake day): the soak draws them only for the
// last calls, so that the run is not spent on the cascade's last model.
var soakLateFaults = map[geminitest.Fault]bool{geminitest.DailyQuota: true, geminitest.DailyAndMinute: true}

// soakContinuation is the chance that an answer (faulty or not) pauses
// halfway with finishReason CONTINUATION.
const soakContinuation = 0.12

// soakFaults decides every generate and stream request of the soak's fake.
// The step of a request is drawn from a generator seeded with the run's seed,
// the model, the call's number (read from the prompt) and how many requests
// of that call the model saw before: the faults a call meets do not depend on
// how the goroutines were scheduled. Safe for concurrent use.
type soakFaults struct {
	seed    uint64
	late    int          // calls from this number on are late: their models may run out of daily quota
	forced  []soakForced // kinds yet to be met for sure, by call number
	healthy atomic.Bool  // every request answers normally
	// outage, when set, says which prompts are in an outage: every request
	// of theirs fails at once (503, no latency).
	outage func(id int) bool

	mu    sync.Mutex               // guards seen, drawn
	seen  map[soakSeenKey]int      // requests per model and call
	drawn map[geminitest.Fault]int // steps drawn per fault kind
	cont  int                      // steps drawn with Continuation
	kinds []geminitest.Fault       // the faults of soakFaultWeights, in order
	total float64                  // sum of soakFaultWeights
	rates map[string]float64       // per model: the chance a request is faulty
	index map[string]uint64        // per model: its number, for the seed
	stall map[int]bool             // the prompts a stall was drawn for (StreamStallFirst, StreamStallBetween)
}

// soakForced is a fault the soak must meet, from call on.
type soakForced struct {
	call  int
	fault geminitest.Fault
}

type soakSeenKey struct {
	model string
	call  int
}

func newSoakFaults(seed uint64, late int, rates map[string]float64) *soakFaults {
	f := &soakFaults{seed: seed, late: late, seen: make(map[soakSeenKey]int), drawn: make(map[geminitest.Fault]int), rates: rates, index: make(map[string]uint64), stall: make(map[int]bool)}
	for k := range soakFaultWeights {
		f.kinds = append(f.kinds, k)
	}
	sort.Slice(f.kinds, func(i, j int) bool { return f.kinds[i] < f.kinds[j] })
	for _, k := range f.kinds {
		f.total += soakFaultWeights[k]
	}
	// Every kind once for sure: the first request of a call numbered at
	// least its call gets it. Spread over the calls before late; the
	// daily quotas after it.
	for i, k := range f.kinds {
		id := (i + 1) * late / (len(f.kinds) + 1)
		if soakLateFaults[k] {
			id = late + i
		}
		f.forced = append(f.forced, soakForced{call: id, fault: k})
	}
	sort.Slice(f.forced, func(i, j int) bool { return f.forced[i].call < f.forced[j].call })
	names := make([]string, 0, len(rates))
	for m := range rates {
		names = append(names, m)
	}
	sort.Strings(names)
	for i, m := range names {
		f.index[m] = uint64(i + 1)
	}
	return f
}

// decide returns model's Decide func.
func (f *soakFaults) decide(model string) func(geminitest.Request, int) geminitest.Step {
	return func(req geminitest.Request, _ int) geminitest.Step {
		if f.healthy.Load() {
			return geminitest.Step{}
		}
		id, ok := soakCallID(req.Contents)
		if !ok {
			return geminitest.Step{}
		}
		if f.outage != nil && f.outage(id) {
			f.mu.Lock()
			f.drawn[geminitest.Overloaded]++
			f.mu.Unlock()
			return geminitest.Step{Fault: geminitest.Overloaded}
		}
		f.mu.Lock()
		k := soakSeenKey{model, id}
		n := f.seen[k]
		f.seen[k]++
		f.mu.Unlock()
		r := rand.New(rand.NewPCG(f.seed, uint64(id)<<24|uint64(n)<<8|f.index[model]))
		st := f.draw(r, f.rates[model], id >= f.late)
		f.mu.Lock()
		if len(f.forced) > 0 && f.forced[0].call <= id {
			st.Fault = f.forced[0].fault
			f.forced = f.forced[1:]
		}
		f.mu.Unlock()
		f.mu.Lock()
		f.drawn[st.Fault]++
		if st.Fault == geminitest.StreamStallFirst || st.Fault == geminitest.StreamStallBetween {
			f.stall[id] = true
		}
		if st.Continuation {
			f.cont++
		}
		f.mu.Unlock()
		return st
	}
}

// draw returns a step: a fault with probability rate, with random latency,
// server-stated delay, cut position and stall; CONTINUATION at random. The
// daily quotas (soakLateFaults) are drawn again, as another fault, unless
// late: they take a model out until midnight.
func (f *soakFaults) draw(r *rand.Rand, rate float64, late bool) geminitest.Step {
	var st geminitest.Step
	if r.Float64() < rate {
		for st.Fault == geminitest.OK || (soakLateFaults[st.Fault] && !late) {
			x := r.Float64() * f.total
			for _, k := range f.kinds {
				if x -= soakFaultWeights[k]; x < 0 {
					st.Fault = k
					break
				}
			}
		}
	}
	if r.IntN(2) == 0 {
		st.Latency = time.Duration(r.Int64N(int64(300 * time.Millisecond)))
	}
	st.RetryDelay = 500*time.Millisecond + time.Duration(r.Int64N(int64(4500*time.Millisecond)))
	st.CutAfter = r.IntN(5) - 1
	st.Stall = [...]time.Duration{300 * time.Millisecond, 2 * time.Second, 10 * time.Second, time.Hour}[r.IntN(4)]
	st.Continuation = r.Float64() < soakContinuation
	return st
}

// stalled reports whether a stall was drawn for a request of prompt id.
func (f *soakFaults) stalled(id int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stall[id]
}

// soakCallID reads the call number from a soak prompt ("soak call N").
func soakCallID(contents []*genai.Content) (int, bool) {
	if len(contents) == 0 || contents[0] == nil || len(contents[0].Parts) == 0 || contents[0].Parts[0] == nil {
		return 0, false
	}
	var id int
	if _, err := fmt.Sscanf(contents[0].Parts[0].Text, "soak call %d", &id); err != nil {
		return 0, false
	}
	return id, true
}

// soakUnitKey groups the upstream requests that belong to one first
// attempt: the same call, model and verb, and the same continuation token
// or resumed text. The first request of a group is a first attempt (it
// deposits into the retry budget); every further one is a retry.
type soakUnitKey struct {
	call    int
	model   string
	verb    geminitest.Verb
	token   string
	partial int // length of a resumed text, -1 when none
}

// soakUnit returns the unit of a logged request, false for requests that are
// not the soak's.
func soakUnit(model string, req geminitest.Request) (soakUnitKey, bool) {
	id, ok := soakCallID(req.Contents)
	if !ok {
		return soakUnitKey{}, false
	}
	var body struct {
		ContinuationToken []byte `json:"continuationToken"`
	}
	_ = json.Unmarshal(req.Body, &body)
	k := soakUnitKey{call: id, model: model, verb: req.Verb, token: string(body.ContinuationToken), partial: -1}
	if last := req.Contents[len(req.Contents)-1]; len(req.Contents) > 1 && last != nil && last.Role == genai.RoleModel {
		k.partial = 0
		for _, p := range last.Parts {
			if p != nil {
				k.partial += len(p.Text)
			}
		}
	}
	return k, true
}
