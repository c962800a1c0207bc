// Package latency learns how long a model takes to answer, per class of
// request, and derives from it the two deadlines the chain acts on: the cut
// (an attempt not answered by then is abandoned) and the hedge delay (an
// attempt not answered by then is raced by a second request). It reads no
// clock: callers record durations they measured. A learner may read other
// learners' records of the same model with its own (SetOthers: a fleet's
// replicas, each seeing a share of the traffic, learn as one would from
// all of it); each halves only its own.
package latency

import (
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

// The learned deadlines of a class whose answers have the given median,
// whose HedgeQuantile answers end before tail, whose HedgeQuantile
// answered attempts (abandoned ones left out) end before answered, and
// whose answers' quartiles read as a log-normal spread put the end of 95%
// and of 99% of them at spread95 and spread99 times the median
// (answersSpread):
//
//	ceiling = min(maxSpread, max(CutMax, spread99)) × median
//	cut     = max(CutFloor, min(ceiling, max(CutMin × median, answered, spread95 × median)))
//	last    = max(CutFloor, ceiling)
//	hedge   = min(cut, max(CutFloor, tail, HedgeSpread × median))
//	        = min(cut, max(CutFloor, answered)) when more than 1 − HedgeQuantile of the attempts were abandoned
//
// So an attempt is cut once it is later than 95% of the model's answers,
// never sooner than twice its median (answers of one length vary less)
// and never later than three times it, unless the answers spread wider (an
// answer's time is its output's length): then the ceiling is the end of
// 99% of them, up to ten times the median, and the quartiles, which a cut
// at the tail hardly moves, keep the cut from holding itself down where it
// censored the answers it cut. Stalls that were cut do not
// move it: they are abandoned, not answered. The median is of the answers
// and the abandoned attempts, those counted as slower than every answer;
// when they are more than half, it is the slowest answer's (a model that
// hangs on most of its requests and answers the rest keeps the cut its
// answers give), unless the answers are fewer than 1 − HedgeQuantile of
// the record, or the latest refreshEvery attempts were all abandoned: every
// request slowed past the cut (a latency shift), and the cut is lifted,
// for the slower answers to teach the new one. An attempt
// with no other model to go to (the last of its call) is cut at last: its
// cut only buys another request to the same model, which a model slowed
// on every request (a latency shift, not stalls) answers as late. A model
// that stalls on more than 5% of its requests (their p95 is a stall) is
// hedged once an attempt is later than 95% of its answers: each stall
// costs a second request at the cut anyway, and the hedge, which keeps the
// original, sends it sooner (the brownout family's p99 ≤ 2× the oracle's
// in 1.5 more points of the cells of each seed; BENCHMARKS.md). A model
// that does not (long thinking) keeps the spread's floor, and is not
// hedged into double cost.
//
// Before a class has Warmup answers it has no cut and no learned hedge
// delay; from EarlyHedgeAfter answers on, an attempt is hedged (never cut)
// at the early delay (one sent before there was one, with another model to
// go to, is cut at it: the caller's choice, WhenEarly; or, overtaken by the
// answer of one sent after it, at CutMax times the answers' own median:
// AnswersCut)
//
//	early = max(CutFloor, CutMax × median of the answers and of the attempts in flight sent before them)
//
// (those counted as slower than every answer; the lower median: of two
// answers, the faster), so that a stall of a model that has answered only a
// call or two is raced rather than waited out. The median is not moved by
// stalls among up to half of the answers (their largest is: a stall waited
// out and answered would put it past the attempt timeout), the attempts in
// flight hold it back while a burst that slowed every request answers (its
// first answers are its fastest; there is no early delay while half of them
// or more are in flight, as for CohortCut), and CutMax of it leaves room for
// the spread of a model slow on every request, which is not hedged. The cut
// and the learned delay wait for Warmup answers: a quantile of fewer is too
// noisy for them (BENCHMARKS.md, Brownout family).
const (
	CutMin          = 2
	CutMax          = 3
	CutFloor        = 500 * time.Millisecond // never cut (nor hedge) an attempt sooner
	HedgeQuantile   = 0.95                   // an attempt later than this share of the answers is hedged
	HedgeSpread     = 2                      // and later than this many times the median answer time
	Warmup          = 10                     // answers a class needs before it has its cut and learned hedge delay
	EarlyHedgeAfter = 2                      // answers a class needs before it has the early hedge delay
	refreshEvery    = 32                     // answers between two refreshes of a class, once warm
	maxSpread       = 10                     // the cut's ceiling, in medians, however widely the answers spread (answersSpread)
	maxSamples      = 512                    // past it, a class's counts are halved: recent answers weigh more
)

// Buckets: four per doubling, from about 1ms to about 4.9h.
const (
	minOctave = 20 // 2^20 ns ≈ 1ms
	octaves   = 24
	Buckets   = octaves * 4
)

// Abandoned is the duration to record for an attempt abandoned unanswered:
// later than any answer.
const Abandoned = time.Duration(math.MaxInt64)

// Learner learns one model's answer times in classes of requests [0, n).
// Safe for concurrent use: recording is an atomic add or two, and every
// refreshEvery answers one recorder recomputes its class's deadlines.
type Learner struct {
	classes []histogram
}

// New returns a Learner of n classes.
func New(n int) *Learner {
	l := &Learner{classes: make([]histogram, n)}
	for i := range l.classes {
		l.classes[i].learned = make(chan struct{})
		l.classes[i].early = make(chan struct{})
	}
	return l
}

type histogram struct {
	counts        [Buckets]atomic.Int64
	others        [Buckets]atomic.Int64 // other learners' counts of the class (SetOthers: a fleet's other replicas), read with counts
	records       atomic.Int64          // answers recorded, for the refresh cadence
	cut           atomic.Int64          // the learned cut, in nanoseconds; 0 while warming up
	last          atomic.Int64          // the learned cut of an attempt with nowhere else to go
	ceiling       atomic.Uint64         // the cut's ceiling in medians (answersSpread's spread99), as float64 bits; stored before cut
	hedge         atomic.Int64          // the learned hedge delay, in nanoseconds; 0 while warming up
	learned       chan struct{}         // closed by the refresh that first stores the deadlines
	early         chan struct{}         // closed by the EarlyHedgeAfter-th answer, own or others' (WhenEarly)
	earlyOnce     sync.Once             // closes early
	answers       atomic.Int64          // answers recorded (not Abandoned), up to EarlyHedgeAfter
	abandonedRun  atomic.Int64          // attempts abandoned in a row, reset by an answer (concurrent records may race: an estimate)
	pending       atomic.Int64          // attempts sent before the deadlines were learned, still in flight (Sent, Ended)
	cohortAnswers atomic.Int64          // answers of those attempts (CohortAnswered)
	sent          atomic.Int64          // the latest of those attempts' places in the order sent (Sent)
	overtaking    atomic.Int64          // the latest place of one of them that answered (Overtaken)
	mu            sync.Mutex            // serialises refreshes
}

// Record counts an answer of class that took d (Abandoned for an attempt
// abandoned unanswered).
func (l *Learner) Record(class int, d time.Duration) {
	h := &l.classes[class]
	h.counts[Bucket(d)].Add(1)
	if d == Abandoned {
		h.abandonedRun.Add(1)
	} else if h.abandonedRun.Load() != 0 {
		h.abandonedRun.Store(0)
	}
	if d != Abandoned && h.answers.Load() < EarlyHedgeAfter && h.answers.Add(1) == EarlyHedgeAfter {
		h.earlyOnce.Do(func() { close(h.early) })
	}
	if n := h.records.Add(1); n <= 2*refreshEvery || n%refreshEvery == 0 {
		h.refresh() // at each answer while it warms up, then now and then
	}
}

// Hedge returns the learned hedge delay of an attempt of class: until the
// class has warmed up, the early one (its cohort's cut, as CohortCut's),
// false before it has EarlyHedgeAfter answers or while half of its cohort
// or more is in flight.
func (l *Learner) Hedge(class int) (time.Duration, bool) {
	h := &l.classes[class]
	if d := h.hedge.Load(); d > 0 {
		return time.Duration(d), true
	}
	return h.cohortCut(EarlyHedgeAfter, CutMax)
}

// Cut returns the learned deadline of an attempt of class, false until the
// class has warmed up; last: the attempt has no other model to go to.
func (l *Learner) Cut(class int, last bool) (time.Duration, bool) {
	h := &l.classes[class]
	c := h.cut.Load()
	if last {
		c = h.last.Load()
	}
	return time.Duration(c), c > 0
}

// Learned reports whether class has warmed up: Cut and Hedge report its
// deadlines.
func (l *Learner) Learned(class int) bool {
	return l.classes[class].cut.Load() > 0
}

// WhenLearned returns a channel closed once class has warmed up. An
// attempt sent before that can wait on it, to be bounded by what the
// answers of others taught meanwhile.
func (l *Learner) WhenLearned(class int) <-chan struct{} {
	return l.classes[class].learned
}

// WhenEarly returns a channel closed once class has EarlyHedgeAfter
// answers: from then on Hedge may report the early delay, for an attempt
// sent before that to be bounded by.
func (l *Learner) WhenEarly(class int) <-chan struct{} {
	return l.classes[class].early
}

// Sent counts an attempt of class sent before the class warmed up, in
// flight until Ended: CohortCut counts it as at least as long as it has
// taken so far. It returns the attempt's place in the order those were
// sent, from 1, for CohortAnswered and Overtaken.
func (l *Learner) Sent(class int) int64 {
	h := &l.classes[class]
	h.pending.Add(1)
	return h.sent.Add(1)
}

// Ended counts the end of an attempt counted by Sent.
func (l *Learner) Ended(class int) { l.classes[class].pending.Add(-1) }

// CohortCut returns the cut of an attempt of class sent before the class
// warmed up: the learned cut's ceiling (CutMax times, or more for answers
// that spread wider: answersSpread) times the median of the answers and of
// the attempts still in flight that were sent before (Sent), those counted
// as slower than every answer; false until the class has warmed up, or
// while half of them or more are in flight (their median is then not known
// yet). With settled (the caller saw none of those attempts answer for a
// while: what is left stalls), the median is scaled as the learned cut
// scales the answers' median (CutMin to the ceiling) instead.
// The first answers of a burst of requests are its fastest, and a model
// whose every request slowed (a flood of them) answers them later: the
// attempts still waiting hold the median back until most have answered.
func (l *Learner) CohortCut(class int, settled bool) (time.Duration, bool) {
	h := &l.classes[class]
	if h.cut.Load() == 0 {
		return 0, false
	}
	scale := math.Float64frombits(h.ceiling.Load())
	if settled { // the learned cut over the median: last is the ceiling times it (or CutFloor, the cut then too)
		scale = min(scale, max(CutMin, scale*float64(h.cut.Load())/float64(h.last.Load())))
	}
	return h.cohortCut(1, scale)
}

// CohortAnswered counts an answer of the attempt of class that Sent placed
// at place.
func (l *Learner) CohortAnswered(class int, place int64) {
	h := &l.classes[class]
	h.cohortAnswers.Add(1)
	for {
		last := h.overtaking.Load()
		if place <= last || h.overtaking.CompareAndSwap(last, place) {
			return
		}
	}
}

// Overtaken reports whether an attempt of class sent after the one Sent
// placed at place has answered while it is out: a model answering its
// later requests is not slowed by a burst (a flood's first requests answer
// first), and the earlier one stalls.
func (l *Learner) Overtaken(class int, place int64) bool {
	return l.classes[class].overtaking.Load() > place
}

// AnswersCut returns CutMax times the lower median of class's answers
// alone, false with fewer than EarlyHedgeAfter: the early delay of an
// attempt that was overtaken (Overtaken), which the attempts in flight do
// not hold back.
func (l *Learner) AnswersCut(class int) (time.Duration, bool) {
	return l.classes[class].answersCut()
}

// CohortAnswers returns the answers CohortAnswered counted of class.
func (l *Learner) CohortAnswers(class int) int64 { return l.classes[class].cohortAnswers.Load() }

// cohortCut returns scale times the median of h's answers and of the
// attempts in flight sent before the class warmed up, those counted as
// slower than every answer; false with fewer than minAnswered answers, or
// while half of them or more are in flight.
func (h *histogram) cohortCut(minAnswered int64, scale float64) (time.Duration, bool) {
	return h.scaledMedian(minAnswered, h.pending.Load(), scale)
}

// answersCut is AnswersCut: cohortCut with no attempt counted in flight.
func (h *histogram) answersCut() (time.Duration, bool) {
	return h.scaledMedian(EarlyHedgeAfter, 0, CutMax)
}

// scaledMedian returns scale times the lower median of h's answers and of
// pending more, counted as slower than every answer (at least CutFloor);
// false with fewer than minAnswered answers, or while pending are half of
// them or more.
func (h *histogram) scaledMedian(minAnswered, pending int64, scale float64) (time.Duration, bool) {
	var answered int64
	for i := range h.counts[:Buckets-1] {
		answered += h.count(i)
	}
	if answered < minAnswered || 2*pending >= answered+pending {
		return 0, false
	}
	var seen int64
	for i := range h.counts[:Buckets-1] {
		if seen += h.count(i); 2*seen >= answered+pending {
			return max(CutFloor, time.Duration(scale*float64(Mid(i)))), true
		}
	}
	return 0, false // answers counted while this ran: look again later
}

// refresh recomputes the deadlines from the counts, and halves them when
// they hold more than maxSamples.
func (h *histogram) refresh() {
	h.mu.Lock()
	defer h.mu.Unlock()
	var own, counts [Buckets]int64
	var ownTotal, total int64
	for i := range h.counts {
		own[i] = h.counts[i].Load()
		ownTotal += own[i]
		counts[i] = own[i] + h.others[i].Load()
		total += counts[i]
	}
	if ownTotal > maxSamples {
		for i := range h.counts {
			h.counts[i].Add(-own[i] / 2)
		}
	}
	if total < Warmup {
		return
	}
	median, tail := -1, -1
	var seen int64
	for i, n := range counts {
		seen += n
		if median < 0 && 2*seen >= total {
			median = i
		}
		if float64(seen) >= HedgeQuantile*float64(total) {
			tail = i
			break
		}
	}
	answered := -1
	seen = 0
	for i, n := range counts[:Buckets-1] {
		seen += n
		if float64(seen) >= HedgeQuantile*float64(total-counts[Buckets-1]) {
			answered = i
			break
		}
	}
	if median == Buckets-1 && h.abandonedRun.Load() < refreshEvery && float64(total-counts[Buckets-1]) >= (1-HedgeQuantile)*float64(total) {
		median = slowestAnswer(counts) // most attempts hang, the rest answer: not a shift
	}
	mid := Mid(median)
	spread95, spread99 := answersSpread(counts)
	ceiling := time.Duration(spread99 * float64(mid))
	cut := max(CutFloor, min(ceiling, max(CutMin*mid, End(answered), time.Duration(spread95*float64(mid)))))
	first := h.cut.Load() == 0
	h.ceiling.Store(math.Float64bits(spread99))
	h.cut.Store(int64(cut))
	h.last.Store(int64(max(CutFloor, ceiling)))
	hedge := max(CutFloor, End(tail), time.Duration(HedgeSpread*float64(mid)))
	if tail == Buckets-1 && answered >= 0 {
		hedge = max(CutFloor, End(answered))
	}
	h.hedge.Store(int64(min(cut, hedge)))
	if first {
		close(h.learned) // under mu, after the deadlines: once, and they are there to read
	}
}

// count returns bucket i's count: this learner's and the others'.
func (h *histogram) count(i int) int64 { return h.counts[i].Load() + h.others[i].Load() }

// Count is a bucket's count of a class's record (Snapshot, SetOthers).
type Count struct {
	Class, Bucket int
	N             int64
}

// Snapshot returns the learner's own record (not SetOthers'), its
// non-empty buckets by class and bucket: what a fleet's replica shares.
func (l *Learner) Snapshot() []Count {
	var out []Count
	for c := range l.classes {
		for i := range l.classes[c].counts {
			if n := l.classes[c].counts[i].Load(); n > 0 {
				out = append(out, Count{c, i, n})
			}
		}
	}
	return out
}

// SetOthers replaces the other learners' records read with this one's (a
// fleet's other replicas learning the same model: their Snapshots, summed)
// and recomputes the deadlines from both, so that a learner with few
// answers of its own (a replica starting, or seeing a share of the
// traffic) cuts and hedges as one learner with all of them would. Counts
// out of range are ignored. Safe for concurrent use with the rest.
func (l *Learner) SetOthers(counts []Count) {
	next := make([][Buckets]int64, len(l.classes))
	for _, c := range counts {
		if c.Class >= 0 && c.Class < len(l.classes) && c.Bucket >= 0 && c.Bucket < Buckets && c.N > 0 {
			next[c.Class][c.Bucket] += c.N
		}
	}
	for c := range l.classes {
		h := &l.classes[c]
		changed := false
		var answers int64
		for i := range h.others {
			if h.others[i].Swap(next[c][i]) != next[c][i] {
				changed = true
			}
			if i < Buckets-1 {
				answers += h.count(i)
			}
		}
		if !changed {
			continue
		}
		if answers >= EarlyHedgeAfter {
			h.earlyOnce.Do(func() { close(h.early) })
		}
		h.refresh()
	}
}

// answersSpread returns how many times their median the slowest answer in
// twenty and in a hundred take, read off the answers' quartiles in counts
// (abandoned attempts left out) as a log-normal spread: (q75/q25)^(z/(2·z75))
// for z of 95% and of 99%. The quartiles move with the spread of the answers
// (their lengths) but hardly with a cut at their tail, which censors what it
// cuts: the end of 95% of the answers left can only fall, to twice the
// median, while the long answers past it are never recorded. Stalls waited
// out, fewer than a quarter of the answers, hardly move them either. The
// slowest in a hundred is within CutMax (answers of one length: the cut's
// own ceiling) and maxSpread; both are 1 and CutMax before Warmup answers.
func answersSpread(counts [Buckets]int64) (spread95, spread99 float64) {
	var n int64
	for _, c := range counts[:Buckets-1] {
		n += c
	}
	if n < Warmup {
		return 1, CutMax
	}
	q25, q75 := -1, -1
	var seen int64
	for i, c := range counts[:Buckets-1] {
		seen += c
		if q25 < 0 && 4*seen >= n {
			q25 = i
		}
		if 4*seen >= 3*n {
			q75 = i
			break
		}
	}
	iqr := float64(Mid(q75)) / float64(Mid(q25))
	return math.Pow(iqr, z95/(2*z75)), min(maxSpread, max(CutMax, math.Pow(iqr, z99/(2*z75))))
}

// Standard normal quantiles: of 75%, 95% and 99%.
const z75, z95, z99 = 0.6745, 1.6449, 2.3263

// slowestAnswer returns the bucket of the slowest answer in counts, -1
// when none.
func slowestAnswer(counts [Buckets]int64) int {
	for i := Buckets - 2; i >= 0; i-- {
		if counts[i] > 0 {
			return i
		}
	}
	return -1
}

// Bucket returns the bucket of d: four per doubling.
func Bucket(d time.Duration) int {
	ns := uint64(max(d, 0))
	o := bits.Len64(ns) - 1 // ns in [2^o, 2^(o+1))
	if o < minOctave {
		return 0
	}
	quarter := int(ns>>(o-2)) & 3 // the two bits after the leading one
	return min((o-minOctave)*4+quarter, Buckets-1)
}

// End returns the end of bucket i: every latency in it is shorter.
func End(i int) time.Duration {
	if i >= Buckets-1 {
		return math.MaxInt64 // the last bucket holds the abandoned attempts
	}
	o, quarter := minOctave+i/4, i%4
	return time.Duration(uint64(4+quarter+1) << (o - 2))
}

// Mid returns the middle of bucket i, within 12% of any latency in it.
func Mid(i int) time.Duration {
	o, quarter := minOctave+i/4, i%4
	return time.Duration(uint64(2*(4+quarter)+1) << (o - 3))
}
