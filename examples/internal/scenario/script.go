package scenario

import (
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/geminiguard/geminiguard/geminitest"
)

// Script decides how a model answers a request. It must be a pure function
// of the request: the fake of every arm consults it for every generate and
// stream request, and the oracle consults it before choosing a model, so
// every arm meets the same faults and latencies.
type Script func(r Request) geminitest.Step

// Request is a generate or stream request as a Script sees it.
type Request struct {
	Model string        // the model it was sent to
	Call  int           // the call whose prompt it carries, -1 when none
	At    time.Duration // when it reached the model, since the run's start
	// Resumed is the length of the answer's beginning that the request
	// carries as a partial model turn (a resumed stream): the fake answers
	// the rest of the step's text. 0 when none.
	Resumed int
	// InFlight is the number of generate and stream requests the arm's fake
	// was still working on when this one arrived, over every model. A
	// request counts until the latency its step gives has passed, even when
	// the client gave up on it before: the server keeps computing.
	InFlight int
}

// callTag marks a call's index in its prompt, so that the fake, the
// upstream log and the oracle can tell which call a request belongs to.
const callTag = "call#"

// Prompt returns the prompt of call: its tag and a question.
func Prompt(call int) string {
	return fmt.Sprintf("%s%05d Summarise the incident report in three sentences.", callTag, call)
}

// callOf returns the call index tagged in s, -1 when s carries none.
func callOf(s string) int {
	_, rest, ok := strings.Cut(s, callTag)
	if !ok || len(rest) < 5 {
		return -1
	}
	n, err := strconv.Atoi(rest[:5])
	if err != nil {
		return -1
	}
	return n
}

// answerWords is the length of every answer in words.
const answerWords = 48

// Answer returns the text every model answers call with. Its words are
// unique within the answer, so a lost or repeated piece of a stream shows
// in a comparison with it.
func Answer(call int) string {
	var b strings.Builder
	for w := range answerWords {
		fmt.Fprintf(&b, "c%d.w%02d ", call, w)
	}
	return b.String()
}

// draw returns a uniform number in [0, 1) that depends only on seed and
// the parts.
func draw(seed uint64, parts ...any) float64 {
	return rng(seed, parts...).Float64()
}

// rng returns a generator seeded by seed and the parts.
func rng(seed uint64, parts ...any) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		fmt.Fprintf(h, "%v|", p)
	}
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// latencySigma is the spread of answer latencies: log-normal with this
// sigma around the model's median, so that p95 is about 1.5 times p50, as
// measured answer times of one model with one prompt size are.
const latencySigma = 0.25

// spread returns median scaled by a log-normal draw that depends only on
// seed, the model and the call (not on the time, so a retry of a call on
// the same model takes as long as its first attempt would have, and every
// arm that sends call to model waits the same).
func spread(seed uint64, median time.Duration, model string, call int) time.Duration {
	z := rng(seed, "latency", model, call).NormFloat64()
	z = max(-2.5, min(2.5, z))
	return time.Duration(float64(median) * math.Exp(latencySigma*z))
}

// answer returns the step of a good answer of m to r: its latency and the
// call's text.
func answer(seed uint64, m Model, r Request) geminitest.Step {
	return geminitest.Step{Latency: spread(seed, m.Latency, m.Name, r.Call), Text: Answer(r.Call)}
}

// Error latencies: how long the API takes to refuse.
const (
	overloadLatency = 300 * time.Millisecond // 503 UNAVAILABLE "model is overloaded"
)

// overloaded returns the step of a 503 overload answer.
func overloaded() geminitest.Step {
	return geminitest.Step{Fault: geminitest.Overloaded, Latency: overloadLatency}
}

// poisson returns n arrival offsets of a Poisson process of rate per
// second, drawn from seed.
func poisson(seed uint64, n int, rate float64) []time.Duration {
	r := rng(seed, "arrivals")
	out := make([]time.Duration, n)
	var t float64
	for i := range out {
		out[i] = time.Duration(t * float64(time.Second))
		t += r.ExpFloat64() / rate
	}
	return out
}

// evenly returns n arrival offsets every gap, starting at 0.
func evenly(n int, gap time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i) * gap
	}
	return out
}

// bursts returns the arrival offsets of bursts: every period, size calls
// spread evenly over spread.
func bursts(count, size int, period, spread time.Duration) []time.Duration {
	out := make([]time.Duration, 0, count*size)
	for b := range count {
		for i := range size {
			out = append(out, time.Duration(b)*period+time.Duration(i)*spread/time.Duration(size))
		}
	}
	return out
}
