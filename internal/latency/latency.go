// Package latency learns how long a model takes to answer, per class of
// request, and derives from it the two deadlines the chain acts on: the cut
// (an attempt not answered by then is abandoned) and the hedge delay (an
// attempt not answered by then is raced by a second request). It reads no
// clock: callers record durations they measured, and when. A learner may
// read other learners' records of the same model with its own (SetOthers:
// a fleet's replicas, each seeing a share of the traffic, learn as one
// would from all of it); each halves only its own.
package latency

import (
	"math"
	"math/bits"
	"slices"
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
// when they are more than half, it is the answers' own (a model that
// hangs on most of its requests and answers the rest keeps the cut its
// answers give: read as the slowest answer's, it cut hangs twice as late
// or more), unless the answers are fewer than 1 − HedgeQuantile of
// the record, or the latest refreshEvery attempts were all abandoned: every
// request slowed past the cut (a latency shift), and the cut is lifted,
// for the slower answers to teach the new one, for one attempt at a time
// (Probe, as a half-open breaker's probe tests a recovery; the others keep
// the cut the answers give, so that a model hanging on most requests and
// answering the rest at its usual time is not waited for ten times its
// slowest answer on every one): until one answers, its median is read as
// maxSpread times the slowest answer's (an answer later than that is a
// stall whatever the spread: stallBound), CutMax times more after every
// probe that waited its cut unanswered (as TCP backs off its
// retransmission timer: a shift of any size is learned within a few
// probes, and a model that stopped answering is not waited out to the
// attempt timeout); then, until the answers are half of the record again,
// the median is the slowest answer's, theirs. An attempt
// with no other model to go to (the last of its call) is cut at last: its
// cut only buys another request to the same model, which a model slowed
// on every request (a latency shift, not stalls) answers as late. A model
// that stalls on more than 5% of its requests (their p95 is a stall) is
// hedged once an attempt is later than 95% of its answers: each stall
// costs a second request at the cut anyway, and the hedge, which keeps the
// original, sends it sooner (the brownout family's p99 ≤ 2× the oracle's
// in 1.5 more points of the cells of each seed; BENCHMARKS.md). A model
// that does not (long thinking) keeps the spread's floor, and is not
// hedged into double cost. A class whose hedges lose their races (Raced:
// its late attempts answer before their hedges, long answers as long on
// any model; one race lost is enough for a class whose answers spread
// wide and which stalls on few of its requests) is hedged and cut at last,
// the ceiling, until they win again.
// While a class is young (fewer than youngRecords records), every attempt
// still in flight counts as at least as long as it has taken
// (SentWhileYoung; censoredBody): the median and the quartiles are the
// Kaplan-Meier estimates' when that makes them longer, for a class's
// first answers are its fastest, and the long ones still out would
// otherwise teach a cut and a hedge delay that throw them away.
//
// Before a class has Warmup answers it has no cut and no learned hedge
// delay; from EarlyHedgeAfter answers on, an attempt is hedged (never cut)
// at the early delay (one sent before there was one, with another model to
// go to, is cut at it: the caller's choice, WhenEarly)
//
//	early = max(CutFloor, ceiling × median of the answers and of the attempts in flight sent before them)
//
// (the lower median: of two answers, the faster; the ceiling is the end of
// 99% of the answers as their quartiles read it, CutMax to maxSpread, as
// the learned cut's, and CutMax before four answers, whose quartiles would
// be the fastest and the slowest, perhaps a stall waited out), so that a stall of a
// model that has answered only a call or two is raced rather than waited
// out. The attempts in flight are the answers not known yet: each counts
// as at least as long as it has taken so far (the median is the
// Kaplan-Meier estimate's, of answers censored by the present), so a burst
// that slowed every request, whose first answers are its fastest, holds
// the median back while most of it is out, and so do long answers of a
// model whose answers spread wide, sent with the ones that answered; an
// attempt sent a moment ago holds back no median. The median is not moved
// by stalls among up to half of the answers (their largest is: a stall
// waited out and answered would put it past the attempt timeout), and
// the ceiling leaves room for the spread of a model slow on every request,
// which is not hedged. While that median is not known (most of
// what was sent is out), an attempt that was sent before there was an
// early delay, with another model to go to, is cut once it is later than
// the answers seen so far let any answer be (StallCut: their median times
// the end of 99% of them, as their spread reads, CutMax to maxSpread
// times; with fewer than a quarter of the cohort answered, as late as the
// widest spread accepted lets the answers be, those seen its fastest; with
// a quarter to half, the end of 99% of the spread they read as the fastest
// share of the cohort, a truncated log-normal's):
// stalls that outnumber the answers are cut, long answers of a
// model whose first answers already spread wide are let finish. Once the
// attempts in flight past the slowest answer, overtaken by later ones that
// answered, fell silent (fellSilent: were they answers spread as widely as
// the learner accepts, more than silentAnswers of them would have come by
// now, and none did), what is left of the cohort stalls, whatever the
// spread the few answers read: StallCut and StallBound are then twice the
// slowest answer. The cut and the learned delay wait for Warmup answers: a
// quantile of fewer is too noisy for them (BENCHMARKS.md, Brownout
// family).
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
	// earlySpreadAfter is the answers from which the early delay reads
	// their spread: the quartiles of fewer are the fastest and the slowest
	// answer, perhaps a stall waited out.
	earlySpreadAfter = 4
	// The races of a class's attempts with their hedges (Raced) that it
	// remembers (each race weighs the earlier ones down by 1/raceMemory),
	// the lost races it needs before its hedges lose (raceEvidenceWide for
	// a class whose answers spread wide: wideLate), and the races its
	// hedges must win, one in raceWinEvery, not to.
	raceMemory       = 16
	raceEvidence     = 4
	raceEvidenceWide = 1
	raceWinEvery     = 8
	// youngRecords is the records (answers and abandoned attempts) until
	// which a class counts every attempt in flight (SentWhileYoung), for
	// the deadlines learned from its first answers to count the long ones
	// still out: past it, those are a small share of the record (64 and
	// 1024 gave the families the same figures: BENCHMARKS.md).
	youngRecords = 256
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
	wideLate      atomic.Bool           // the answers spread wider than CutMax medians at their 99th percentile, and the stalls are fewer than 1 − HedgeQuantile of the record (refresh)
	learned       chan struct{}         // closed by the refresh that first stores the deadlines
	early         chan struct{}         // closed by the EarlyHedgeAfter-th answer, own or others' (WhenEarly)
	earlyOnce     sync.Once             // closes early
	answers       atomic.Int64          // answers recorded (not Abandoned), up to EarlyHedgeAfter
	abandonedRun  atomic.Int64          // attempts abandoned in a row, reset by an answer (concurrent records may race: an estimate)
	answeredSent  atomic.Int64          // when the latest-sent attempt that answered was sent, in Unix nanoseconds: this learner's own (fellSilent)
	flight        flight                // attempts sent before the deadlines were learned, or while the class is young, still in flight (Sent, Ended)
	cohortAnswers atomic.Int64          // answers of those attempts (CohortAnswered)
	mu            sync.Mutex            // serialises refreshes
	shifted       bool                  // under mu: the cut was lifted (a latency shift) and the record is still mostly abandoned
	lift          atomic.Pointer[lift]  // while the cut is lifted: the lifted cuts, which one attempt at a time tests (Probe); nil otherwise
	probe         atomic.Int64          // when the attempt that holds the lifted cut (Probe) was sent, in Unix nanoseconds; 0: none holds it
	probeCut      atomic.Int64          // the cut Probe gave that attempt, in nanoseconds
	liftFailed    atomic.Int64          // the probes that waited their cut unanswered since the cut was lifted (ProbeEnded)
	probeNext     atomic.Int64          // no probe is sent before it, in Unix nanoseconds: the pause after one that waited its cut unanswered (ProbeEnded)
	races         races                 // the recent races of its attempts with their hedges (Raced)
}

// races is a class's record of the races of its attempts with their
// hedges (Raced): the races each side won, weighed down by raceMemory at
// each race, so that the latest raceMemory or so count.
type races struct {
	mu        sync.Mutex
	won, lost float64 // by the hedge, by the attempt
	// hedgesLose is set while the hedges lose (Raced): read without mu;
	// lostWide while they would for a class whose answers spread wide
	// (raceEvidenceWide).
	hedgesLose, lostWide atomic.Bool
}

// hedgesLose reports whether the class's hedges lose their races (Raced):
// raceEvidence lost races, or raceEvidenceWide while its answers spread
// wide and its stalls are few (wideLate), and fewer than one in
// raceWinEvery won.
func (h *histogram) hedgesLose() bool {
	return h.races.hedgesLose.Load() || h.wideLate.Load() && h.races.lostWide.Load()
}

// flight is the attempts of a class sent before it warmed up, or while it
// was young, and still in flight (Sent, SentWhileYoung, Ended), by when
// each was sent: the cohort's median and the learned deadlines count each
// as at least as long as it has taken so far.
type flight struct {
	mu     sync.Mutex
	starts []time.Time // when each was sent, ascending (Sent keeps them so)
	places []int64     // each one's place in the order sent, ascending
	cold   []bool      // each one's: sent before the class warmed up (Sent), not while young (SentWhileYoung)
	sent   int64       // the places given
	// others is the other learners' attempts in flight (SetOthersInFlight:
	// a fleet's other replicas'), by when each was sent, ascending: at
	// risk as this learner's own are, but never self, nor judged silent.
	others []time.Time
	// answered is closed at the next answer while the class warms up
	// (WhenAnswered), nil while no one waits for it.
	answered chan struct{}
}

// wake closes the channel WhenAnswered returned, if any.
func (f *flight) wake() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answered != nil {
		close(f.answered)
		f.answered = nil
	}
}

// older returns how many of the attempts in flight were sent at or
// before t. f.mu is held.
func (f *flight) older(t time.Time) int64 { return sentBy(f.starts, t) }

// atRisk returns how many attempts in flight, this learner's and the
// others', were sent at or before t. f.mu is held.
func (f *flight) atRisk(t time.Time) int64 { return sentBy(f.starts, t) + sentBy(f.others, t) }

// sentBy returns how many of starts (ascending) are at or before t.
func sentBy(starts []time.Time, t time.Time) int64 {
	n, _ := slices.BinarySearchFunc(starts, t, func(s, t time.Time) int {
		if s.After(t) {
			return 1
		}
		return -1
	})
	return int64(n)
}

// Record counts an answer of class that took d (Abandoned for an attempt
// abandoned unanswered), which came at now: the attempts still in flight
// (Sent) are as long as they have taken by then.
func (l *Learner) Record(class int, d time.Duration, now time.Time) {
	h := &l.classes[class]
	h.counts[Bucket(d)].Add(1)
	if d == Abandoned {
		h.abandonedRun.Add(1)
	} else if h.abandonedRun.Load() != 0 {
		h.abandonedRun.Store(0)
	}
	if d != Abandoned {
		h.answeredSince(now.Add(-d))
	}
	if d != Abandoned && h.answers.Load() < EarlyHedgeAfter && h.answers.Add(1) == EarlyHedgeAfter {
		h.earlyOnce.Do(func() { close(h.early) })
	}
	if d != Abandoned && h.cut.Load() == 0 {
		h.flight.wake()
	}
	if n := h.records.Add(1); n <= 2*refreshEvery || n%refreshEvery == 0 || d != Abandoned && h.lift.Load() != nil {
		h.refresh(now) // at each answer while it warms up or its cut is lifted, then now and then
	}
}

// Probe gives an attempt of class sent at start the lifted cut, when the
// class's cut is lifted (a latency shift: every request slowed past it)
// and no other attempt holds it, and reports whether it did; the attempt
// must then hand it back with ProbeEnded when it ends, even on a panic.
// One attempt at a time tests the lift, as a half-open breaker's probe
// tests a recovery: were the shift real, its answer teaches the new cut
// (an answer recorded while the cut is lifted refreshes it), and the other
// attempts keep the cut the answers give, so a model that hangs on most of
// its requests and answers the rest at its usual time is not waited for
// ten times its slowest answer on every request. The lifted cut is the
// cut were the median maxSpread times the slowest answer's (last: the cut
// of an attempt with nowhere else to go), CutMax times longer for each
// probe since the lift that waited its cut with nothing sent after it
// answered (a shift of any size is learned within a few probes, as TCP
// backs off its retransmission timer), as long as it stays within within,
// the room the attempt has before its own deadline: a probe is not held
// to the attempt timeout while a shorter one fits. After a probe that
// waited its cut unanswered, none is sent for a pause (ProbeEnded). A
// probe hedged may teach nothing: a hedge answering first ends it before
// its lifted cut (the chain hedges none while the model answers nothing).
func (l *Learner) Probe(class int, start time.Time, last bool, within time.Duration) (time.Duration, bool) {
	h := &l.classes[class]
	lf := h.lift.Load()
	if lf == nil || start.UnixNano() < h.probeNext.Load() || !h.probe.CompareAndSwap(0, start.UnixNano()) {
		return 0, false
	}
	d := lf.cut
	if last || h.hedgesLose() {
		d = lf.last
	}
	for range h.liftFailed.Load() {
		if d*CutMax >= within {
			break
		}
		d *= CutMax
	}
	h.probeCut.Store(int64(d))
	return d, true
}

// LiftUnanswered reports whether the cut of class is lifted and a probe
// has waited the lifted cut unanswered since (Probe, ProbeEnded): what
// slows the model is no shift the lift has taught yet, and an answer of a
// request still out is no likelier than the probe's was.
func (l *Learner) LiftUnanswered(class int) bool {
	h := &l.classes[class]
	return h.lift.Load() != nil && h.liftFailed.Load() > 0
}

// ProbeEnded hands back, at now, the lifted cut Probe gave the attempt of
// class sent at start. A probe that waited its cut while nothing sent at or
// after start answered makes the next one's CutMax times longer, and no
// probe is sent for as long as it waited, CutMax times longer for each
// such probe before it since the lift, up to probePauseMax (a model that
// stopped answering is probed ever more rarely, as gRPC backs off its
// reconnections: every probe is a call that waits its cut); one that
// answered, failed sooner or lost its race to a hedge does neither.
func (l *Learner) ProbeEnded(class int, start, now time.Time) {
	h := &l.classes[class]
	if waited := time.Duration(h.probeCut.Load()); now.Sub(start) >= waited && h.answeredSent.Load() < start.UnixNano() {
		pause := min(waited, probePauseMax)
		for n := h.liftFailed.Add(1) - 1; n > 0 && pause < probePauseMax; n-- { // a day's outage need not walk its every probe
			pause = min(pause*CutMax, probePauseMax)
		}
		h.probeNext.Store(now.Add(pause).UnixNano())
	}
	h.probe.CompareAndSwap(start.UnixNano(), 0)
}

// probePauseMax bounds the pause between two probes of a lifted cut
// (ProbeEnded): gRPC's connection backoff's MaxDelay, 120s. A model that
// answers again at its usual time is seen sooner, by the attempts that keep
// the cut its answers give.
const probePauseMax = 2 * time.Minute

// Hedge returns the learned hedge delay of an attempt of class: until the
// class has warmed up, the early one at now (its cohort's cut, as
// CohortCut's), false before it has EarlyHedgeAfter answers or while the
// median of its answers and of its cohort in flight is not known yet. self
// is the place Sent gave the attempt that asks, not counted in flight (its
// own time is what the delay judges), 0 for one not sent yet; so for
// CohortCut and StallCut.
func (l *Learner) Hedge(class int, now time.Time, self int64) (time.Duration, bool) {
	h := &l.classes[class]
	if d := h.hedge.Load(); d > 0 {
		if h.hedgesLose() {
			d = h.last.Load()
		}
		return time.Duration(d), true
	}
	counts, n := h.answerCounts()
	if n < EarlyHedgeAfter {
		return 0, false
	}
	median, ok := h.cohortQuantile(&counts, n, now, 0.5, self)
	scale := float64(CutMax)
	if n >= earlySpreadAfter {
		_, scale = spreadOf(&counts, n)
	}
	return max(CutFloor, time.Duration(scale*float64(median))), ok
}

// EarlyDeadline returns Hedge's delay of an attempt of class at now
// (known: the median it scales is known) or, while the median of its
// cohort is not known, StallCut's; ok is false when neither is there. self
// is as Hedge's.
func (l *Learner) EarlyDeadline(class int, now time.Time, self int64) (d time.Duration, known, ok bool) {
	if d, known = l.Hedge(class, now, self); known {
		return d, true, true
	}
	d, ok = l.StallCut(class, now, self)
	return d, false, ok
}

// Cut returns the learned deadline of an attempt of class, false until the
// class has warmed up; last: the attempt has no other model to go to.
// While the class's hedges lose (Raced), it is the last one's.
func (l *Learner) Cut(class int, last bool) (time.Duration, bool) {
	h := &l.classes[class]
	c := h.cut.Load()
	if last || h.hedgesLose() {
		c = h.last.Load()
	}
	return time.Duration(c), c > 0
}

// Raced records the outcome of a race between an attempt of class and its
// hedge, sent once the attempt was late: won, the hedge answered first
// while the attempt was out; else the attempt answered first while the
// hedge was out (a race one side lost by failing says nothing of the
// other's time, and is not recorded). While the class's hedges lose (they
// lost raceEvidence races or more of those it remembers, or
// raceEvidenceWide while its answers spread wider than CutMax medians at
// their 99th percentile and fewer than 1 − HedgeQuantile of its record
// was abandoned: the late attempts of such a model are mostly its long
// answers, and one race lost says so; and won fewer than one in
// raceWinEvery), its attempts past the hedge delay are long
// answers, as long on any model (an answer's time is its output's length),
// not stalls that a second request would answer sooner: its hedge delay and
// its cut are the learned cut's ceiling (Cut's last: the end of 99% of the
// answers as they spread, CutMax to maxSpread times their median), for
// fewer hedges and cuts, each of which keeps the record. Hedges that win
// again (stalls) bring back the learned ones.
func (l *Learner) Raced(class int, won bool) {
	r := &l.classes[class].races
	r.mu.Lock()
	defer r.mu.Unlock()
	r.won *= 1 - 1.0/raceMemory
	r.lost *= 1 - 1.0/raceMemory
	if won {
		r.won++
	} else {
		r.lost++
	}
	losing := raceWinEvery*r.won < r.won+r.lost
	r.hedgesLose.Store(r.lost >= raceEvidence && losing)
	r.lostWide.Store(r.lost >= raceEvidenceWide && losing)
}

// HedgesLose reports whether class's hedges lose their races (Raced):
// its hedge delay and its cut are then the learned cut's ceiling.
func (l *Learner) HedgesLose(class int) bool {
	return l.classes[class].hedgesLose()
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

// SentWhileYoung counts an attempt of class sent at start as Sent does
// while the class is young (it has recorded fewer than youngRecords
// answers and abandoned attempts), so that the deadlines learned from its
// first answers count it as at least as long as it has taken (refresh);
// it returns 0, counting nothing, once the class is not.
func (l *Learner) SentWhileYoung(class int, start time.Time) int64 {
	if l.classes[class].records.Load() >= youngRecords {
		return 0
	}
	return l.classes[class].flight.add(start, false)
}

// Sent counts an attempt of class sent at start, before the class warmed
// up, in flight until Ended: CohortCut, the early Hedge and the learned
// deadlines (refresh) count it as at least as long as it has taken so
// far. It returns the attempt's place in the order those were sent, from
// 1, for Ended. A start earlier than the previous attempt's is counted as
// that one's (concurrent senders read their clocks a moment apart).
func (l *Learner) Sent(class int, start time.Time) int64 {
	return l.classes[class].flight.add(start, true)
}

// add counts an attempt sent at start in flight, cold when sent before
// the class warmed up, and returns its place (Sent).
func (f *flight) add(start time.Time, cold bool) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.starts); n > 0 && start.Before(f.starts[n-1]) {
		start = f.starts[n-1]
	}
	f.sent++
	f.starts = append(f.starts, start)
	f.places = append(f.places, f.sent)
	f.cold = append(f.cold, cold)
	return f.sent
}

// Ended counts the end of the attempt of class that Sent placed at place.
func (l *Learner) Ended(class int, place int64) {
	f := &l.classes[class].flight
	f.mu.Lock()
	defer f.mu.Unlock()
	if i, ok := slices.BinarySearch(f.places, place); ok {
		f.starts = slices.Delete(f.starts, i, i+1)
		f.places = slices.Delete(f.places, i, i+1)
		f.cold = slices.Delete(f.cold, i, i+1)
	}
}

// CohortCut returns the cut at now of an attempt of class sent before the
// class warmed up: the learned cut's ceiling (CutMax times, or more for
// answers that spread wider: answersSpread) times the median of the
// answers and of the attempts still in flight that were sent before
// (Sent), each of those counted as at least as long as it has taken so
// far; false until the class has warmed up, or while that median is not
// known yet. With settled (the caller saw none of those attempts answer
// for a while: what is left stalls), the median is scaled as the learned
// cut scales the answers' median (CutMin to the ceiling) instead.
// The first answers of a burst of requests are its fastest, and a model
// whose every request slowed (a flood of them) answers them later: the
// attempts still waiting hold the median back until most have answered.
func (l *Learner) CohortCut(class int, now time.Time, self int64, settled bool) (time.Duration, bool) {
	h := &l.classes[class]
	if h.cut.Load() == 0 {
		return 0, false
	}
	scale := math.Float64frombits(h.ceiling.Load())
	if settled { // the learned cut over the median: last is the ceiling times it (or CutFloor, the cut then too)
		scale = min(scale, max(CutMin, scale*float64(h.cut.Load())/float64(h.last.Load())))
	}
	counts, n := h.answerCounts()
	median, ok := h.cohortQuantile(&counts, n, now, 0.5, self)
	return max(CutFloor, time.Duration(scale*float64(median))), ok
}

// StallCut returns the time past which an attempt of class is later than
// the answers seen so far let any answer be, and stalls. It is the early
// delay of an attempt while the median of its cohort is not known at now
// (most of it is out: stalls that outnumber the answers, a flood, or long
// answers), which the attempts in flight do not hold back. It reports
// false with fewer than EarlyHedgeAfter answers. The first answers of a
// cohort mostly out are its fastest, and their median and spread say
// little of the rest (the long answers of a model whose answers spread
// wide): while fewer than a quarter of the cohort's attempts answered, it
// is stallBound's, the end of the widest spread the learner accepts from
// answers that few and that fast; while fewer than half did,
// truncatedStallCut's, the end of 99% of the spread the answers read as the
// fastest share of the cohort; else (the cohort's median is known) the
// lower median of the answers alone, scaled by the end of 99% of them as
// their quartiles read it (spreadOf: CutMax to maxSpread times). Once the
// attempts in flight past the slowest answer fell silent (fellSilent), it
// is twice the slowest answer: what is left stalls.
func (l *Learner) StallCut(class int, now time.Time, self int64) (time.Duration, bool) {
	h := &l.classes[class]
	r, ok := h.cohortRead(now, self)
	switch {
	case !ok:
		return 0, false
	case h.fellSilent(&r, now):
		return silentCut(r.slowest), true
	case r.answered < fewAnswered:
		return stallBound(r.slowest, r.answered, r.n), true
	case r.answered < 0.5:
		return truncatedStallCut(&r.counts, r.n, r.slowest, r.answered), true
	}
	_, ceiling := spreadOf(&r.counts, r.n)
	return max(CutFloor, time.Duration(ceiling*float64(Mid(answersMedian(&r.counts, r.n))))), true
}

// cohortAnswers is what the stall cuts read of a class at a moment: its
// answers (counts, n of them), the bucket of the slowest, and the share of
// the cohort that answered as the Kaplan-Meier estimate reads it
// (cohortSurvival).
type cohortAnswers struct {
	counts   [Buckets]int64
	n        int64
	slowest  int
	answered float64
}

// cohortRead returns h's cohortAnswers at now, self as StallCut's; false
// with fewer than EarlyHedgeAfter answers.
func (h *histogram) cohortRead(now time.Time, self int64) (r cohortAnswers, ok bool) {
	if r.counts, r.n = h.answerCounts(); r.n < EarlyHedgeAfter {
		return r, false
	}
	var surviving float64
	r.slowest, surviving = h.cohortSurvival(&r.counts, r.n, now, 1, self)
	r.answered = 1 - surviving
	return r, true
}

// truncatedStallCut is StallCut's while a quarter to half of the cohort
// answered: answered is the share that did (of the n answers in counts,
// the slowest in bucket slowest). Those answers are the fastest share of
// what was sent, and the spread of their logarithms is a log-normal's cut
// short at that share's quantile (a truncated normal's standard deviation,
// the share read lower by n ÷ (n+1) as stallBound's): the cohort's spread σ
// is theirs over it, its median the slowest answer's time over the share's
// quantile, and the cut the end of 99% of it, CutMax to maxSpread medians.
// The answers' own median and spread read the fastest third of a model
// whose answers spread wide as a narrow model of that median: three times
// it cut the long answers still out (the wide family's long thinking).
func truncatedStallCut(counts *[Buckets]int64, n int64, slowest int, answered float64) time.Duration {
	var sum, sumSq float64 // of the answers' logarithms
	for i, c := range counts[:Buckets-1] {
		if c > 0 {
			x := math.Log(float64(Mid(i)))
			sum += float64(c) * x
			sumSq += float64(c) * x * x
		}
	}
	mean := sum / float64(n)
	sd := math.Sqrt(max(0, sumSq/float64(n)-mean*mean))
	p := cohortShare(answered, n)
	z := normalQuantile(p)
	lambda := math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) / p // the density at z over p
	sigma := sd / math.Sqrt(1-z*lambda-lambda*lambda)     // over the truncated normal's standard deviation
	median := float64(Mid(slowest)) * math.Exp(-sigma*z)
	return max(CutFloor, time.Duration(min(maxSpread, max(CutMax, math.Exp(z99*sigma)))*median))
}

// CohortDeadline returns CohortCut's cut of an attempt of class at now
// (known: the cohort's median it scales is known) or, while that median is
// not known, StallBound's; ok is false when neither is there. self and
// settled are as CohortCut's.
func (l *Learner) CohortDeadline(class int, now time.Time, self int64, settled bool) (d time.Duration, known, ok bool) {
	if d, known = l.CohortCut(class, now, self, settled); known {
		return d, true, true
	}
	d, ok = l.StallBound(class, now, self)
	return d, false, ok
}

// StallBound returns the bound past which an attempt of class stalls
// whatever the spread of the answers at now, false with fewer than
// EarlyHedgeAfter answers: stallBound's, of the share of the cohort (its
// attempts in flight, each as long as it has taken so far, and the
// answers; self as StallCut's) that answered, as the Kaplan-Meier estimate
// reads it, and of the slowest answer; truncatedStallCut's, as StallCut's,
// once a quarter of the cohort answered when more than 1 − HedgeQuantile of
// the class's record was abandoned (the model stalls: a flood, whose first
// answers are its fastest, has none abandoned yet). It is CohortCut's
// stand-in while the median of the cohort is not known: a model that hangs
// on most of its requests learns its cut from the few it answers and its
// hangs cut, and the hangs sent before that, waiting for a median, would
// be waited out. Once the attempts in flight past the slowest answer fell
// silent (fellSilent), it is twice the slowest answer, as StallCut's.
func (l *Learner) StallBound(class int, now time.Time, self int64) (time.Duration, bool) {
	h := &l.classes[class]
	r, ok := h.cohortRead(now, self)
	switch {
	case !ok:
		return 0, false
	case h.fellSilent(&r, now):
		return silentCut(r.slowest), true
	}
	if abandoned := h.count(Buckets - 1); r.answered >= fewAnswered && float64(abandoned) > (1-HedgeQuantile)*float64(r.n+abandoned) {
		return truncatedStallCut(&r.counts, r.n, r.slowest, r.answered), true
	}
	return stallBound(r.slowest, r.answered, r.n), true
}

// stallBound is StallCut's while fewer than a quarter of the cohort
// answered, and StallBound's: answered is the share that did (of n answers,
// the slowest in bucket slowest). It is the end of 99% of the answers if
// they spread as widely as a learned cut lets them (maxSpread medians: σ =
// ln maxSpread ÷ z99) and the answers seen were the fastest answered share
// of them, read lower by n ÷ (n+1), for few answers are a rough share, and
// as a quarter at least (fewAnswered): fewer answered says that more of
// what was sent stalls, not that the answers spread wider, which would let
// a model's stalls wait the longer the more it stalls (read as their
// share, two answers in 0.3s gave 11s with ten attempts out, 19s with
// thirty). So two answers in 0.3s with ten or thirty attempts out, 6.5s;
// two in 4.3s and 5s with seven long answers out, 1m45s, past the attempt
// timeout. A model that hangs on
// most requests after answering a few is cut well before the attempt
// timeout (or before it learns its cut, which its answers alone never
// teach), while answers that spread wide are let finish.
func stallBound(slowest int, answered float64, n int64) time.Duration {
	z := normalQuantile(max(cohortShare(answered, n), fewAnswered))
	median := float64(End(slowest)) * math.Exp(-widestSigma*z) // z < 0: the median is past the slowest answer
	return max(CutFloor, time.Duration(maxSpread*median))
}

// Slowest returns the end of the bucket of class's slowest answer, of this
// learner's and the others' (SetOthers); false with none.
func (l *Learner) Slowest(class int) (time.Duration, bool) {
	h := &l.classes[class]
	for i := Buckets - 2; i >= 0; i-- {
		if h.count(i) > 0 {
			return End(i), true
		}
	}
	return 0, false
}

// WhenAnswered returns a channel closed at the next answer of class
// recorded while the class warms up (then never): a look at the cohort's
// median, which only answers make known, can wait for it.
func (l *Learner) WhenAnswered(class int) <-chan struct{} {
	f := &l.classes[class].flight
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answered == nil {
		f.answered = make(chan struct{})
	}
	return f.answered
}

// CohortAnswered counts an answer of an attempt of class counted by Sent.
func (l *Learner) CohortAnswered(class int) { l.classes[class].cohortAnswers.Add(1) }

// CohortAnswers returns the answers CohortAnswered counted of class.
func (l *Learner) CohortAnswers(class int) int64 { return l.classes[class].cohortAnswers.Load() }

// answerCounts returns h's counts (its own and the others') and how many
// answers they hold (abandoned attempts left out).
func (h *histogram) answerCounts() (counts [Buckets]int64, n int64) {
	for i := range counts[:Buckets-1] {
		counts[i] = h.count(i)
		n += counts[i]
	}
	return counts, n
}

// cohortQuantile returns the lower q-quantile (the median for 0.5), at
// now, of the n answers in counts and of h's attempts in flight counted by
// Sent, each of those censored at how long it has taken so far: the
// Kaplan-Meier estimate's, an attempt in flight at risk in each bucket it
// has reached, read at the bucket's middle. Abandoned attempts, stalls
// cut, do not move it, and neither does the attempt Sent placed at self.
// It reports false while the quantile is not known yet (the answers before
// it are fewer than q of those that were at risk).
func (h *histogram) cohortQuantile(counts *[Buckets]int64, n int64, now time.Time, q float64, self int64) (time.Duration, bool) {
	i, surviving := h.cohortSurvival(counts, n, now, q, self)
	if i < 0 || surviving > 1-q {
		return 0, false
	}
	return Mid(i), true
}

// cohortSurvival walks the Kaplan-Meier estimate of cohortQuantile up to
// its q-quantile: it returns the quantile's bucket and the share of the
// cohort later than it or, when the quantile is not known, the bucket of
// the slowest answer and the share later than that (above 1 − q); -1 and
// 1 with no answers.
func (h *histogram) cohortSurvival(counts *[Buckets]int64, n int64, now time.Time, q float64, self int64) (bucket int, surviving float64) {
	bucket, surviving = -1, 1
	if n == 0 {
		return bucket, surviving
	}
	f := &h.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	var selfStart time.Time // the asking attempt's, not counted
	if i, ok := slices.BinarySearch(f.places, self); ok {
		selfStart = f.starts[i]
	}
	from, later := time.Duration(0), n // from: the bucket's start; later: the answers from it on
	for i, c := range counts[:Buckets-1] {
		if c > 0 {
			t := now.Add(-from)
			atRisk := later + f.atRisk(t)
			if !selfStart.IsZero() && !selfStart.After(t) {
				atRisk--
			}
			bucket = i
			if surviving *= 1 - float64(c)/float64(atRisk); surviving <= 1-q {
				return bucket, surviving
			}
		}
		later -= c
		from = End(i)
	}
	return bucket, surviving
}

// refresh recomputes the deadlines from the counts and the attempts in
// flight at now, and halves the counts when they hold more than maxSamples.
func (h *histogram) refresh(now time.Time) {
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
	if h.abandonedRun.Load() >= refreshEvery {
		forgot := h.forgetAnswers(&own, &counts)
		ownTotal -= forgot
		total -= forgot
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
	lifted := false
	switch answers := total - counts[Buckets-1]; {
	case median < Buckets-1:
		h.shifted = false
	case h.abandonedRun.Load() >= refreshEvery || float64(answers) < (1-HedgeQuantile)*float64(total):
		median, lifted = h.lifted(counts), true // every request slowed past the cut
	case h.shifted:
		median = slowestAnswer(counts) // the answers since the lift, the slowest, teach the new cut
	default:
		median = answersMedian(&counts, answers) // most attempts hang, the rest answer: not a shift
	}
	spread95, spread99 := answersSpread(counts)
	censored, q25, q75 := h.censoredBody(&counts, now)
	if !lifted && median < Buckets-1 && censored > median { // the record's median is an abandoned attempt's: it would lift the cut back to none
		median = censored
	}
	if q25 >= 0 && q75 >= 0 && total-counts[Buckets-1] >= Warmup {
		s95, s99 := spreadOfQuartiles(q25, q75)
		spread95, spread99 = max(spread95, s95), max(spread99, s99)
	}
	mid := Mid(median)
	cut, ceiling := cutsOf(mid, spread95, spread99, answered)
	switch {
	case !lifted || median == Buckets-1: // nothing to test, or no answer to scale
		h.lift.Store(nil)
	default:
		lc, ll := cutsOf(time.Duration(min(maxSpread*float64(mid), float64(Mid(Buckets-1)))), spread95, spread99, answered)
		if h.lift.Load() == nil {
			h.liftFailed.Store(0)
			h.probeNext.Store(0)
		}
		h.lift.Store(&lift{cut: lc, last: max(CutFloor, ll)})
	}
	first := h.cut.Load() == 0
	h.ceiling.Store(math.Float64bits(spread99))
	h.cut.Store(int64(cut))
	h.last.Store(int64(max(CutFloor, ceiling)))
	hedge := max(CutFloor, End(tail), time.Duration(HedgeSpread*float64(mid)))
	if tail == Buckets-1 && answered >= 0 && (!h.shifted || lifted) { // a shift learned (shifted, no longer lifted): the end of 95% of the answers is the old ones', not its own
		hedge = max(CutFloor, End(answered))
	}
	h.hedge.Store(int64(min(cut, hedge)))
	h.wideLate.Store(tail < Buckets-1 && spread99 > CutMax)
	if first {
		close(h.learned) // under mu, after the deadlines: once, and they are there to read
	}
}

// forgetAnswers halves this learner's own answers in the record (own, read
// into counts) until they are fewer than its abandoned attempts, once
// refreshEvery attempts in a row were abandoned: every request slowed past
// the cut, and the answers of before, however many the record holds, are
// history (without it, a model that stopped answering after 512 answers
// was cut 512 more times before its cut was lifted: a minute of forty
// users' calls). A model that hangs on most of its requests and answers
// the rest, whose runs of 32 are rare, has a record mostly abandoned
// already. It returns how many it forgot. h.mu is held.
func (h *histogram) forgetAnswers(own, counts *[Buckets]int64) (forgot int64) {
	var answers int64
	for _, n := range own[:Buckets-1] {
		answers += n
	}
	for answers > 0 && answers >= own[Buckets-1] {
		var halved int64
		for i := range Buckets - 1 {
			half := own[i] / 2
			h.counts[i].Add(-half)
			own[i] -= half
			counts[i] -= half
			halved += half
		}
		if halved == 0 { // single answers, which halving keeps
			break
		}
		answers -= halved
		forgot += halved
	}
	return forgot
}

// lifted returns the median of a class whose cut is lifted (refresh), every
// request slowed past it: the slowest answer's bucket in counts; Buckets-1
// when there is no answer. h.mu is held.
func (h *histogram) lifted(counts [Buckets]int64) (median int) {
	h.shifted = true
	if slowest := slowestAnswer(counts); slowest >= 0 {
		return slowest
	}
	return Buckets - 1
}

// lift is a class's lifted cuts (refresh): its cut and the cut of an
// attempt with nowhere else to go, were the median maxSpread times the
// slowest answer's.
type lift struct{ cut, last time.Duration }

// cutsOf returns the cut of a class whose median answer takes mid, whose
// answers end within spread95 and spread99 times it (answersSpread) and
// 95% of whose answers came by the end of bucket answered (-1: none), and
// its ceiling, the cut of an attempt with nowhere else to go: twice to
// three times the median, later when the answers spread wider (refresh).
func cutsOf(mid time.Duration, spread95, spread99 float64, answered int) (cut, ceiling time.Duration) {
	ceiling = time.Duration(spread99 * float64(mid))
	return max(CutFloor, min(ceiling, max(CutMin*mid, End(answered), time.Duration(spread95*float64(mid))))), ceiling
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
// traffic) cuts and hedges as one learner with all of them would; now is
// as Record's. Counts out of range are ignored. Safe for concurrent use
// with the rest.
func (l *Learner) SetOthers(counts []Count, now time.Time) {
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
		h.refresh(now)
	}
}

// Flight is N attempts of a class sent at Start and still in flight
// (InFlight, SetOthersInFlight).
type Flight struct {
	Class int
	Start time.Time
	N     int64
}

// InFlight returns the learner's own attempts in flight sent before their
// class warmed up (Sent), by class and start: what a fleet's replica
// shares with its record (Snapshot), for the others' deadlines to count
// its long attempts still out as at least as long as they have taken (the
// first answers of a cohort are its fastest, and the fleet's first
// deadlines are learned from them).
func (l *Learner) InFlight() []Flight {
	var out []Flight
	for c := range l.classes {
		f := &l.classes[c].flight
		f.mu.Lock()
		for i, s := range f.starts {
			if !f.cold[i] {
				continue
			}
			if n := len(out); n > 0 && out[n-1].Class == c && out[n-1].Start.Equal(s) {
				out[n-1].N++
			} else {
				out = append(out, Flight{Class: c, Start: s, N: 1})
			}
		}
		f.mu.Unlock()
	}
	return out
}

// SetOthersInFlight replaces the other learners' attempts in flight (a
// fleet's other replicas': their InFlight, summed) that this learner's
// deadlines count with its own: each as at least as long as it has taken
// so far. Flights out of range are ignored. Safe for concurrent use with
// the rest.
func (l *Learner) SetOthersInFlight(flights []Flight) {
	next := make([][]time.Time, len(l.classes))
	for _, x := range flights {
		if x.Class >= 0 && x.Class < len(l.classes) && x.N > 0 {
			for range min(x.N, maxSamples) {
				next[x.Class] = append(next[x.Class], x.Start)
			}
		}
	}
	for c := range l.classes {
		slices.SortFunc(next[c], time.Time.Compare)
		f := &l.classes[c].flight
		f.mu.Lock()
		f.others = next[c]
		f.mu.Unlock()
	}
}

// OthersInFlight reports whether the other learners had attempts of class
// in flight sent before it warmed up, as SetOthersInFlight last gave them.
func (l *Learner) OthersInFlight(class int) bool {
	f := &l.classes[class].flight
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.others) > 0
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
	return spreadOf(&counts, n)
}

// spreadOf is answersSpread of the n answers in counts (at least one),
// however few.
func spreadOf(counts *[Buckets]int64, n int64) (spread95, spread99 float64) {
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
	return spreadOfQuartiles(q25, q75)
}

// spreadOfQuartiles is spreadOf of answers whose quartiles are in buckets
// q25 and q75.
func spreadOfQuartiles(q25, q75 int) (spread95, spread99 float64) {
	iqr := float64(Mid(q75)) / float64(Mid(q25))
	return math.Pow(iqr, z95/(2*z75)), min(maxSpread, max(CutMax, math.Pow(iqr, z99/(2*z75))))
}

// censoredBody returns the median of the record in counts (the abandoned
// attempts counted as slower than every answer) and the quartiles of its
// answers, with the attempts in flight at now (Sent) counted as at least
// as long as they have taken so far: the Kaplan-Meier estimates, as
// cohortQuantile's; -1 for one not known yet, and all three -1 when no
// attempt is in flight (the record's own are exact). A class's first
// answers are its fastest: while the long ones are still out, the record
// alone reads the answers shorter and narrower than they are, and so the
// cut and the hedge delay it teaches (a model thinking 10 to 50s whose
// first answers, 7 to 25s, taught a cut of 40s).
func (h *histogram) censoredBody(counts *[Buckets]int64, now time.Time) (median, q25, q75 int) {
	f := &h.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	median, q25, q75 = -1, -1, -1
	if len(f.starts) == 0 && len(f.others) == 0 {
		return median, q25, q75 // the record's own are exact
	}
	var later int64 // the answers from the bucket on
	for _, c := range counts[:Buckets-1] {
		later += c
	}
	abandoned := counts[Buckets-1]
	all, answers := 1.0, 1.0 // the share of the record, and of the answers, later than the bucket
	from := time.Duration(0)
	for i, c := range counts[:Buckets-1] {
		if c > 0 {
			out := f.atRisk(now.Add(-from))
			all *= 1 - float64(c)/float64(later+abandoned+out)
			answers *= 1 - float64(c)/float64(later+out)
			if median < 0 && all <= 0.5 {
				median = i
			}
			if q25 < 0 && answers <= 0.75 {
				q25 = i
			}
			if q75 < 0 && answers <= 0.25 {
				q75 = i
			}
		}
		later -= c
		from = End(i)
	}
	return median, q25, q75
}

// Standard normal quantiles: of 75%, 95% and 99%.
const z75, z95, z99 = 0.6745, 1.6449, 2.3263

// widestSigma is the widest spread of answers the learner accepts: the
// log-normal's σ whose 99th percentile is maxSpread medians (stallBound,
// fellSilent).
var widestSigma = math.Log(maxSpread) / z99

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

// fewAnswered is the share of a cohort answered under which the stall cut
// is stallBound's, the widest spread's (StallCut, StallBound).
const fewAnswered = 0.25

// silentAnswers is how many answers the attempts in flight past the
// slowest answer must have been due, none of them come, for their silence
// to say they stall (fellSilent): Poisson's chance of none of 4.6 is 1%.
const silentAnswers = 4.6

// fellSilent reports whether the attempts of h's cohort in flight past the
// slowest answer of r (read at now, r.answered of the cohort answered),
// and overtaken (sent before an attempt that answered), stall: were they
// answers of one log-normal with those, spread as widely as the learner
// accepts (maxSpread medians at its 99th percentile: the slowest answer's
// share of it is the cohort's answered share), more than silentAnswers of
// them would have answered since they passed the slowest, and none did.
// Long answers of a model whose answers spread wide keep coming past the
// first answers, whose spread says little of the rest while they are
// few; a model that hangs on a share of its requests answers the others,
// sent later, and the hangs fall silent. A burst that slowed every
// request (a flood) is not overtaken: what was sent after its first
// answers is as slow. Each attempt counts the chance that it would have
// answered by now, given that it had not by the slowest answer.
func (h *histogram) fellSilent(r *cohortAnswers, now time.Time) bool {
	p := cohortShare(r.answered, r.n)
	if p <= 0 || p >= 1 {
		return false
	}
	zp, slowest := normalQuantile(p), End(r.slowest)
	f := &h.flight
	f.mu.Lock()
	defer f.mu.Unlock()
	// Judged: the attempts past the slowest answer, sent before an attempt
	// that answered.
	judged := now.Add(-slowest)
	if overtaken := time.Unix(0, h.answeredSent.Load()-1); overtaken.Before(judged) {
		judged = overtaken
	}
	var due float64
	for _, start := range f.starts[:f.older(judged)] {
		z := zp + math.Log(float64(now.Sub(start))/float64(slowest))/widestSigma
		due += (normalCDF(z) - p) / (1 - p)
	}
	return due > silentAnswers
}

// answeredSince records that an attempt sent at sent answered: the
// attempts sent before it and still out were overtaken (fellSilent).
func (h *histogram) answeredSince(sent time.Time) {
	at := sent.UnixNano()
	for {
		prev := h.answeredSent.Load()
		if at <= prev || h.answeredSent.CompareAndSwap(prev, at) {
			return
		}
	}
}

// silentCut is the stall cut of a cohort whose attempts past its slowest
// answer, in bucket slowest, fell silent (fellSilent): twice that answer.
func silentCut(slowest int) time.Duration {
	return max(CutFloor, CutMin*End(slowest))
}

// normalCDF returns the standard normal distribution function at z.
func normalCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// cohortShare returns the share of a cohort that answered (answered, of n
// answers) read lower by n ÷ (n+1), for few answers are a rough share: the
// answers seen are the fastest that share of what was sent (stallBound,
// truncatedStallCut, each with its normalQuantile).
func cohortShare(answered float64, n int64) float64 {
	return answered * float64(n) / float64(n+1)
}

// normalQuantile returns the standard normal quantile of p.
func normalQuantile(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }

// answersMedian returns the bucket of the lower median of the n answers
// in counts (at least one).
func answersMedian(counts *[Buckets]int64, n int64) int {
	var seen int64
	for i, c := range counts[:Buckets-1] {
		if seen += c; 2*seen >= n {
			return i
		}
	}
	return Buckets - 2 // not reached: the n answers are in counts
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
