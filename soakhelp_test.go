package geminiguard_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/internal/fakegemini"
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
}

// soakTally counts invariant violations and keeps the first few examples of
// each. Safe for concurrent use.
type soakTally struct {
	mu       sync.Mutex
	counts   map[string]int
	examples map[string][]string
}

func newSoakTally() *soakTally {
	return &soakTally{counts: make(map[string]int), examples: make(map[string][]string)}
}

// soakExamples is how many examples of each invariant a failure shows.
var soakExamples = flag.Int("soak.examples", 3, "examples TestSoak shows of each failed invariant")

func (t *soakTally) add(invariant, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[invariant]++
	if len(t.examples[invariant]) < *soakExamples {
		t.examples[invariant] = append(t.examples[invariant], fmt.Sprintf(format, args...))
	}
}

func (t *soakTally) count(invariant string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counts[invariant]
}

// line returns the invariants as "name=n" pairs, in order.
func (t *soakTally) line() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	for i, inv := range soakInvariants {
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
	for _, inv := range soakInvariants {
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
func typedErr(err error, callerDone, timedOut bool) bool {
	for _, s := range []error{
		geminiguard.ErrCircuitOpen, geminiguard.ErrRateLimited, geminiguard.ErrQuotaExhausted,
		geminiguard.ErrAllModelsFailed, geminiguard.ErrEmptyResponse, geminiguard.ErrBlocked,
		geminiguard.ErrStreamInterrupted, geminiguard.ErrModelNotFound,
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
var soakFaultWeights = map[fakegemini.Fault]float64{
	fakegemini.RateLimitMinute:             2,
	fakegemini.DailyQuota:                  0.02,
	fakegemini.DailyAndMinute:              0.02,
	fakegemini.LimitZero:                   0.02,
	fakegemini.SpendCap:                    0.02,
	fakegemini.PrepayDepleted:              0.02,
	fakegemini.ResourceExhausted:           0.1,
	fakegemini.RateLimitLegacy:             0.1,
	fakegemini.Internal:                    5,
	fakegemini.Overloaded:                  10,
	fakegemini.DeadlineExpired503:          3,
	fakegemini.GatewayTimeout:              3,
	fakegemini.InvalidArgument:             0.5,
	fakegemini.APIKeyInvalid:               0.02,
	fakegemini.FailedPrecondition:          0.02,
	fakegemini.LeakedKey:                   0.02,
	fakegemini.Unregistered:                0.02,
	fakegemini.ServiceDisabled:             0.02,
	fakegemini.NotFound:                    0.02,
	fakegemini.NonJSONBody:                 2,
	fakegemini.JSONArrayBody:               2,
	fakegemini.DropBeforeHeaders:           3,
	fakegemini.PromptBlocked:               0.5,
	fakegemini.FinishSafety:                0.5,
	fakegemini.FinishRecitation:            0.5,
	fakegemini.FinishOther:                 1,
	fakegemini.FinishMalformedFunctionCall: 1,
	fakegemini.MaxTokensEmpty:              1,
	fakegemini.StopNoParts:                 1,
	fakegemini.NoCandidates:                1,
	fakegemini.StreamCutBetween:            5,
	fakegemini.StreamCutInside:             4,
	fakegemini.StreamErrorInside:           4,
	fakegemini.StreamNoFinish:              3,
	fakegemini.StreamStallFirst:            3,
	fakegemini.StreamStallBetween:          3,
}

// soakLateFaults take a model out until midnight (the local limiter then
// refuses it for the rest of the fake day): the soak draws them only for the
// last calls, so that the run is not spent on the cascade's last model.
var soakLateFaults = map[fakegemini.Fault]bool{fakegemini.DailyQuota: true, fakegemini.DailyAndMinute: true}

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

	mu    sync.Mutex               // guards seen, drawn
	seen  map[soakSeenKey]int      // requests per model and call
	drawn map[fakegemini.Fault]int // steps drawn per fault kind
	cont  int                      // steps drawn with Continuation
	kinds []fakegemini.Fault       // the faults of soakFaultWeights, in order
	total float64                  // sum of soakFaultWeights
	rates map[string]float64       // per model: the chance a request is faulty
	index map[string]uint64        // per model: its number, for the seed
}

// soakForced is a fault the soak must meet, from call on.
type soakForced struct {
	call  int
	fault fakegemini.Fault
}

type soakSeenKey struct {
	model string
	call  int
}

func newSoakFaults(seed uint64, late int, rates map[string]float64) *soakFaults {
	f := &soakFaults{seed: seed, late: late, seen: make(map[soakSeenKey]int), drawn: make(map[fakegemini.Fault]int), rates: rates, index: make(map[string]uint64)}
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
func (f *soakFaults) decide(model string) func(fakegemini.Request, int) fakegemini.Step {
	return func(req fakegemini.Request, _ int) fakegemini.Step {
		if f.healthy.Load() {
			return fakegemini.Step{}
		}
		id, ok := soakCallID(req.Contents)
		if !ok {
			return fakegemini.Step{}
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
func (f *soakFaults) draw(r *rand.Rand, rate float64, late bool) fakegemini.Step {
	var st fakegemini.Step
	if r.Float64() < rate {
		for st.Fault == fakegemini.OK || (soakLateFaults[st.Fault] && !late) {
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
	verb    fakegemini.Verb
	token   string
	partial int // length of a resumed text, -1 when none
}

// soakUnit returns the unit of a logged request, false for requests that are
// not the soak's.
func soakUnit(model string, req fakegemini.Request) (soakUnitKey, bool) {
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
