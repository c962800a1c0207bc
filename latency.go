package geminiguard

import (
	"fmt"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"
)

// Learned attempt deadlines: the latency defence. Per model and size class
// of request, the Client learns how long the model takes to answer (a
// unary answer, or a stream's first chunk: learned apart), and bounds an
// attempt by
//
//	cut = max(cutFloor, cutFactor × median)
//
// when that is shorter than the attempt timeout: an attempt not answered
// by then is abandoned for the next model (or, with no other model, tried
// again), as a stalled request would only be waited out. The median is
// robust to the stalls themselves (a minority); the factor leaves room for
// an answer's ordinary spread. A model that is slow on every request has a
// slow median, so its requests are not cut (40s answers: a 120s cut, past
// the 60s attempt timeout); a request that asks for more (a larger
// maxOutputTokens or thinking budget) is learned apart. An abandoned
// attempt counts as an answer later than any other. Cuts are
// capped like retries: over any 10s, at most cutRatio of first attempts
// (plus a floor). A model whose recent requests are cut more often than
// the budget can rescue gets less traffic (see route.go), so the calls it
// gets can still be rescued.

const (
	cutFactor      = 3
	cutFloor       = time.Second // never cut an attempt sooner
	cutWarmup      = 10          // answers a class needs before its attempts are cut
	cutRefresh     = 32          // answers between two refreshes of a class's cut, once warm
	cutMaxSamples  = 512         // past it, a class's counts are halved: recent answers weigh more
	cutRatio       = 0.1         // cuts per first attempt, over the budget's window
	cutMinPerSec   = 1           // cuts always allowed per second, on top (the retry budget's floor)
	sizeClasses    = 4
	latencyClasses = 2 * sizeClasses // unary answers, then streams' first chunks
)

// Latency buckets: four per doubling, from about 1ms to about 4.9h.
const (
	latencyMinOctave = 20 // 2^20 ns ≈ 1ms
	latencyOctaves   = 24
	latencyBuckets   = latencyOctaves * 4
)

// latencyClass returns the size class of a request: 0 when it sets no
// output or thinking budget, then by the tokens it may spend (up to 2,048;
// up to 16,384; more, a dynamic thinking budget or a high thinking level).
func latencyClass(cfg *genai.GenerateContentConfig) int {
	if cfg == nil {
		return 0
	}
	spend := int64(cfg.MaxOutputTokens)
	if tc := cfg.ThinkingConfig; tc != nil {
		switch {
		case tc.ThinkingBudget != nil && *tc.ThinkingBudget < 0, tc.ThinkingLevel == genai.ThinkingLevelHigh:
			return 3
		case tc.ThinkingBudget != nil:
			spend += int64(*tc.ThinkingBudget)
		}
	}
	switch {
	case spend <= 0:
		return 0
	case spend <= 2048:
		return 1
	case spend <= 16384:
		return 2
	}
	return 3
}

// latencies learns one model's answer times, per size class. Safe for
// concurrent use; recording is an atomic add or two, and every cutRefresh
// answers one recorder recomputes the class's cut. The zero value is ready.
type latencies struct {
	classes [latencyClasses]latencyHistogram
}

type latencyHistogram struct {
	counts  [latencyBuckets]atomic.Int64
	records atomic.Int64 // answers recorded, for the refresh cadence
	cut     atomic.Int64 // the learned cut, in nanoseconds; 0 while warming up
	hedge   atomic.Int64 // the learned hedge delay (hedge.go), in nanoseconds; 0 while warming up
	mu      sync.Mutex   // serialises refreshes
}

// record counts an answer of class that took d; an abandoned attempt is
// recorded with a d beyond every bucket.
func (l *latencies) record(class int, d time.Duration) {
	h := &l.classes[class]
	h.counts[latencyBucket(d)].Add(1)
	if n := h.records.Add(1); n <= 2*cutRefresh || n%cutRefresh == 0 {
		h.refresh() // at each answer while it warms up, then now and then
	}
}

// hedge returns the learned hedge delay of an attempt of class (hedge.go),
// false until the class has warmed up.
func (l *latencies) hedge(class int) (time.Duration, bool) {
	d := l.classes[class].hedge.Load()
	return time.Duration(d), d > 0
}

// cut returns the learned deadline of an attempt of class, false until the
// class has warmed up.
func (l *latencies) cut(class int) (time.Duration, bool) {
	c := l.classes[class].cut.Load()
	return time.Duration(c), c > 0
}

// refresh recomputes the cut from the counts, and halves them when they
// hold more than cutMaxSamples.
func (h *latencyHistogram) refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	var counts [latencyBuckets]int64
	var total int64
	for i := range h.counts {
		counts[i] = h.counts[i].Load()
		total += counts[i]
	}
	if total < cutWarmup {
		return
	}
	median, tail := -1, -1
	var seen int64
	for i, n := range counts {
		seen += n
		if median < 0 && 2*seen >= total {
			median = i
		}
		if float64(seen) >= hedgeQuantile*float64(total) {
			tail = i
			break
		}
	}
	cut := max(cutFloor, cutFactor*latencyMid(median))
	h.cut.Store(int64(cut))
	h.hedge.Store(int64(hedgeDelay(latencyMid(median), latencyEnd(tail), cut)))
	if total > cutMaxSamples {
		for i := range h.counts {
			h.counts[i].Add(-counts[i] / 2)
		}
	}
}

// latencyBucket returns the bucket of d: four per doubling.
func latencyBucket(d time.Duration) int {
	ns := uint64(max(d, 0))
	o := bits.Len64(ns) - 1 // ns in [2^o, 2^(o+1))
	if o < latencyMinOctave {
		return 0
	}
	quarter := int(ns>>(o-2)) & 3 // the two bits after the leading one
	return min((o-latencyMinOctave)*4+quarter, latencyBuckets-1)
}

// latencyEnd returns the end of bucket i: every latency in it is shorter.
func latencyEnd(i int) time.Duration {
	if i >= latencyBuckets-1 {
		return math.MaxInt64 // the last bucket holds the abandoned attempts
	}
	o, quarter := latencyMinOctave+i/4, i%4
	return time.Duration(uint64(4+quarter+1) << (o - 2))
}

// latencyMid returns the middle of bucket i, within 12% of any latency in it.
func latencyMid(i int) time.Duration {
	o, quarter := latencyMinOctave+i/4, i%4
	return time.Duration(uint64(2*(4+quarter)+1) << (o - 3))
}

// cutError marks an attempt abandoned at its learned deadline: a slow
// answer, not a failed model. Classify reads it as ClassTimeout,
// retryable, not counted by the breaker. It unwraps to the attempt's error.
type cutError struct {
	err   error
	after time.Duration
}

func (e *cutError) Error() string {
	return fmt.Sprintf("geminiguard: attempt abandoned after %v, three times the model's median answer time: %v", e.after, e.err)
}

func (e *cutError) Unwrap() error { return e.err }
