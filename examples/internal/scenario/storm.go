package scenario

import (
	"container/heap"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/internal/jitter"
)

// The retry storm of Marc Brooker's "Exponential Backoff And Jitter" (AWS
// Architecture Blog, 2015), ported from its simulator
// (aws-samples/aws-arch-backoff-simulator, src/backoff_simulator.py) with
// the same model and constants: clients contend to update one row under
// optimistic concurrency (read the version, write it back: one write wins
// per version); every message takes |N(10ms, 2ms)|; a client whose write
// lost backs off, then reads again; base 5ms, cap 2s.
const (
	stormNetMean = 10 * time.Millisecond
	stormNetSD   = 2 * time.Millisecond
	stormBase    = 5 * time.Millisecond
	stormCap     = 2 * time.Second
)

// StormAlgorithms are the backoffs the study compares, by their
// geminiguard.Jitter names; NoBackoff retries at once.
var StormAlgorithms = []StormAlgorithm{NoBackoff, {"exponential", geminiguard.JitterNone}, {"equal jitter", geminiguard.JitterEqual}, {"full jitter", geminiguard.JitterFull}, {"decorrelated", geminiguard.JitterDecorrelated}}

// StormAlgorithm is a backoff of the study.
type StormAlgorithm struct {
	Name   string
	Jitter geminiguard.Jitter // ignored for NoBackoff
}

// NoBackoff retries at once.
var NoBackoff = StormAlgorithm{Name: "none"}

// StormResult is one algorithm's means over the trials.
type StormResult struct {
	Algorithm  string
	Clients    int
	Completion time.Duration // mean time until the last client's write succeeded
	Calls      float64       // mean writes sent, lost ones included
}

// RetryStorm runs trials of the study for each algorithm with clients
// clients, drawing from seed, and returns the means in StormAlgorithms
// order. It runs on its own event clock: no bubble needed.
func RetryStorm(clients, trials int, seed uint64) []StormResult {
	out := make([]StormResult, len(StormAlgorithms))
	for i, alg := range StormAlgorithms {
		r := rng(seed, "storm", alg.Name, clients)
		var total time.Duration
		calls := 0
		for range trials {
			end, n := stormTrial(alg, clients, r.NormFloat64, r.Float64)
			total += end
			calls += n
		}
		out[i] = StormResult{Algorithm: alg.Name, Clients: clients, Completion: total / time.Duration(trials), Calls: float64(calls) / float64(trials)}
	}
	return out
}

// stormEvent is a message arriving at time at: to the server (a read or a
// write of version) or back to client.
type stormEvent struct {
	at      time.Duration
	client  int
	kind    int // stormRead, stormWrite (at the server) or stormReadReply, stormWriteReply (at the client)
	version int // read reply: the version read; write: the version written
	ok      bool
}

const (
	stormRead = iota
	stormReadReply
	stormWrite
	stormWriteReply
)

// stormQueue is a min-heap of events by time.
type stormQueue []stormEvent

func (q stormQueue) Len() int           { return len(q) }
func (q stormQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q stormQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *stormQueue) Push(x any)        { *q = append(*q, x.(stormEvent)) }
func (q *stormQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// stormTrial runs one trial and returns the time of its last event and the
// writes sent. normal and uniform are the trial's draws.
func stormTrial(alg StormAlgorithm, clients int, normal, uniform func() float64) (time.Duration, int) {
	delay := func() time.Duration {
		return time.Duration(math.Abs(float64(stormNetMean) + normal()*float64(stormNetSD)))
	}
	attempts := make([]int, clients)
	prev := make([]time.Duration, clients) // decorrelated jitter's previous sleep
	q := make(stormQueue, 0, clients)
	for c := range clients {
		q = append(q, stormEvent{at: delay(), client: c, kind: stormRead})
	}
	heap.Init(&q)
	version, writes := 0, 0
	var now time.Duration
	for q.Len() > 0 {
		e := heap.Pop(&q).(stormEvent)
		now = e.at
		next := stormEvent{at: now + delay(), client: e.client}
		switch e.kind {
		case stormRead:
			next.kind, next.version = stormReadReply, version
		case stormReadReply:
			next.kind, next.version = stormWrite, e.version
		case stormWrite:
			writes++
			next.kind, next.ok = stormWriteReply, e.version == version
			if next.ok {
				version++
			}
		case stormWriteReply:
			if e.ok {
				continue
			}
			attempts[e.client]++
			wait := stormBackoff(alg, prev[e.client], attempts[e.client], uniform())
			prev[e.client] = wait
			next.at += wait
			next.kind = stormRead
		}
		heap.Push(&q, next)
	}
	return now, writes
}

// stormBackoff is the wait after the n-th lost write (n ≥ 1): the study's
// formulas, min(cap, base·2^n) before jitter, computed by the library's own
// (internal/jitter) with its attempt number n+1. prev is the client's
// previous wait (decorrelated jitter) and r a uniform draw in [0, 1).
func stormBackoff(alg StormAlgorithm, prev time.Duration, n int, r float64) time.Duration {
	if alg == NoBackoff {
		return 0
	}
	kind := jitter.Full
	switch alg.Jitter {
	case geminiguard.JitterNone:
		kind = jitter.None
	case geminiguard.JitterEqual:
		kind = jitter.Equal
	case geminiguard.JitterDecorrelated:
		kind = jitter.Decorrelated
	}
	return jitter.Delay(kind, stormBase, stormCap, prev, n+1, r)
}

// WriteStormTable writes results (from RetryStorm) as a table, with each
// algorithm's calls and completion time relative to no backoff and to
// un-jittered exponential backoff. markdown selects a Markdown table.
func WriteStormTable(w io.Writer, results []StormResult, markdown bool) error {
	var none, expo StormResult
	for _, r := range results {
		switch r.Algorithm {
		case NoBackoff.Name:
			none = r
		case StormAlgorithms[1].Name:
			expo = r
		}
	}
	rows := [][]string{{"backoff", "clients", "completion", "calls", "calls / none", "time / exponential"}}
	for _, r := range results {
		rows = append(rows, []string{r.Algorithm, fmt.Sprint(r.Clients), fmt.Sprintf("%.0f ms", float64(r.Completion)/float64(time.Millisecond)),
			fmt.Sprintf("%.0f", r.Calls), fmt.Sprintf("%.2f", r.Calls/none.Calls), fmt.Sprintf("%.3f", float64(r.Completion)/float64(expo.Completion))})
	}
	return writeRows(w, rows, markdown)
}
