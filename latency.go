package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/latency"
)

// Learned attempt deadlines: the latency defence. Per model and size class
// of request, the Client learns how long the model takes to answer (a
// unary answer, or a stream's first chunk: learned apart; the learning is
// internal/latency's), and bounds an attempt by its learned cut: the end
// of 95% of the model's answers, within twice and three times their
// median (three times for an attempt with no other model to go to), or,
// when the answers spread wider (their lengths do), up to the end of 99%
// of them as their quartiles read it, ten times the median at most
//
//	cut = max(latency.CutFloor, min(ceiling, max(CutMin × median, p95 of the answers, p95 the quartiles read)))
//
// when that is shorter than the attempt timeout: an attempt not answered
// by then is abandoned for the next model (or, with no other model, tried
// again), as a stalled request would only be waited out. The median and
// the answers' p95 are robust to the stalls themselves (a minority, cut
// and so never answered). Once a model's hedges lose their races (its
// late attempts answer first: long answers, not stalls; hedge.go), the
// cut is the ceiling. While a model's class has its first few hundred
// answers, the attempts still in flight count as at least as long as they
// have taken (the first answers are the fastest of what was sent):
// sentWhileYoung. A model that is slow on every request has a
// slow median, so its requests are not cut (40s answers: an 80s cut, past
// the 60s attempt timeout); a request that asks for more (a larger
// maxOutputTokens or thinking budget) is learned apart. An abandoned
// attempt counts as an answer later than any other. A model whose recent
// requests are abandoned or late more often than routeSlowCost of them
// gets less traffic (see route.go): that bounds what the cuts that send a
// call on to another model cost. The cuts with no other model to go to,
// which send the call back to the model that was slow, are capped like
// retries: over any 10s, at most cutRatio of first attempts (plus a
// floor) (Client.mayCut).

// cutRatio caps the cuts with no other model to go to: a latency shift,
// every request slower, raises the learned cut within 32 answers
// (internal/latency refreshes it); until then it costs at most this many
// more requests of the model that slowed. A cap of 0.25 made capacityDrop's
// adaptive bulkheads (one model, slower with every request in flight)
// answer fewer calls than a fixed one in about one run in five
// (BENCHMARKS.md).
const cutRatio = 0.1

const (
	cutMinPerSec   = 1 // cuts always allowed per second, on top of cutRatio (the retry budget's floor)
	sizeClasses    = 4
	latencyClasses = 2 * sizeClasses // unary answers, then streams' first chunks
)

// mayCut reports whether an attempt may be cut at its learned deadline at
// now: always when the cut sends the call on to another model (onward),
// for the latency throttle bounds what those cost (routeSlowCost a request
// sent to the model, route.go), else while the cut budget allows and the
// retry budget can pay for the attempt the cut leads to (a retry, or the
// call's next round): a cut it could not pay for would fail the call,
// where the attempt left alone may still answer (a long answer; a stall
// ends at the attempt timeout, as the call would have). With the cut
// budget alone, a model stalling on a quarter of its requests under 30
// calls a second had the stalls over the budget waited out (45s,
// TestCutsThatSendTheCallOnAreNotCappedByTheCutBudget).
func (c *Client) mayCut(onward bool, now time.Time) bool {
	return onward || c.cuts.allowsWithRetry(now)
}

// chargeCut records at now a cut made, or whose place a hedge took, on the
// cut budget unless it sent the call on to another model (mayCut), and
// reports whether the cut is paid: always when onward, else when the
// budget had the credit.
func (c *Client) chargeCut(onward bool, now time.Time) bool {
	return onward || c.cuts.withdraw(now)
}

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

// maxStretch bounds a call's stretch (call.stretch): CutMax³, 27 times the
// learned deadlines, past any answer's spread (the attempt timeout bounds
// what is left).
const maxStretch = 3

// stretch returns the learned deadline d (a cut, a hedge delay) of the
// call's attempt to m (alone: with no other model to go to), stretched
// CutMax times for each of the call's attempts cut before, up to
// maxStretch of them, but for m's first cut unless alone. An attempt cut
// at its learned deadline took longer than 95% of its model's answers
// (and at least twice their median): the model's stall, or a long answer.
// The length of an answer is the call's (its output), the same on any
// model: each model's attempt would be cut in turn, and the call fail with
// the answer never let finish. So, as TCP backs off its retransmission
// timer, each cut gives the call's later attempts that much more time. A
// stall is one model's: the call's next attempt to the model that stalled
// once is cut as soon as any (a stall again is as likely as the first),
// unless no other model can answer it, where only the wait can.
func (call *call[R]) stretch(m *modelState, d time.Duration, alone bool) time.Duration {
	if len(call.cutOn) == 0 {
		return d
	}
	n, own := 0, 0
	for _, x := range call.cutOn {
		if x == m {
			own++
		} else {
			n++
		}
	}
	if alone {
		n += own
	} else {
		n += max(own-1, 0)
	}
	for range min(n, maxStretch) {
		d *= latency.CutMax
	}
	return d
}

// cutError marks an attempt abandoned at its learned deadline: a slow
// answer, not a failed model. Classify reads it as ClassTimeout,
// retryable, not counted by the breaker. It matches
// context.DeadlineExceeded, as an attempt's own timeout does, and never
// context.Canceled: the cut cancelled the request, the caller did not, and
// a call failed by cuts must not read as cancelled by its caller to the
// usual errors.Is(err, context.Canceled) check.
type cutError struct {
	err   error
	after time.Duration
}

func (e *cutError) Error() string {
	return fmt.Sprintf("geminiguard: attempt abandoned after %v, its model's learned deadline (later than 95%% of its answers): %v", e.after, e.err)
}

// Is reports context.DeadlineExceeded: the attempt passed a deadline.
func (e *cutError) Is(target error) bool { return target == context.DeadlineExceeded }

// Unwrap returns the attempt's error, but none when that is the cut's own
// cancellation of the request.
func (e *cutError) Unwrap() error {
	if errors.Is(e.err, context.Canceled) {
		return nil
	}
	return e.err
}

// lateCut watches an attempt sent before its model had learned the answer
// times of the call's class (cutOnceLearned). Not safe for concurrent use:
// the attempt's goroutine starts and ends it.
type lateCut struct {
	stop, done chan struct{}
	cut        time.Duration // the cut that ended the attempt; written before done closes
	onward     bool          // the attempt has another model to go to: its cut sends the call on
	lat        *latency.Learner
	class      int
	place      int64 // its place among the attempts sent before the cut was learned (latency.Learner.Sent)
	// stopShare, in a fleet (nil otherwise), cancels the watch's share of
	// the model's record under way (cutWatch.tick) when the watch stops.
	stopShare context.CancelFunc
}

// answered counts the watched attempt's answer among its cohort's
// (latency.Learner.CohortAnswered): the cohort is still answering.
func (lc *lateCut) answered() { lc.lat.CohortAnswered(lc.class) }

// cutOnceLearned bounds an attempt to m sent at start, with room before its
// own deadline, that was sent before m had learned the answer times of the
// call's class: once the answers of other calls teach them, the attempt is
// cut at its cohort's cut from start (latency.Learner.CohortCut: the
// learned cut's ceiling times the median of the answers and of the attempts
// still in flight sent before them, each of those as long as it has taken
// so far; once none of those answered over a look, a quarter of a median
// apart, what is left of the cohort stalls, and the median is scaled as the
// learned cut scales the answers', twice for answers alike), at once when
// that has passed, by cancel. So a stall sent in a Client's first moments
// (a burst of callers at start-up) is cut like any later one rather than
// waited out, while a burst that slowed every request (a flood, whose
// answers keep coming), or a model slow on every request (long thinking),
// is waited for. An attempt with another model to go to (onward: the cut
// sends the call on, Client.mayCut) is cut sooner, at the early delay once
// m has EarlyHedgeAfter answers (latency.Learner.Hedge: the early hedge's,
// which an attempt sent before it was known could not take), or, while the
// median of its cohort is not known (stalls that outnumber the answers, a
// flood, or long answers still out), once it is later than the answers seen
// let any answer be (latency.Learner.StallCut: with fewer than a quarter of
// the cohort answered, as late as the widest spread the learner accepts
// lets them be, the answers seen its fastest); one with nowhere else to go
// only within the cut budget. It starts a goroutine, which end joins.
func (call *call[R]) cutOnceLearned(m *modelState, start time.Time, room time.Duration, onward bool, cancel context.CancelFunc) *lateCut {
	lc := &lateCut{stop: make(chan struct{}), done: make(chan struct{}), lat: m.lat, class: call.class, onward: onward}
	w := cutWatch{lc: lc, c: call.c, m: m, start: start, room: room, cancel: cancel, stretch: call.stretch(m, 1, !onward)}
	var early <-chan struct{} // nil (never ready) unless onward
	if onward {
		early = m.lat.WhenEarly(lc.class)
	}
	lc.place = m.lat.Sent(lc.class, start)
	if call.c.fleet != nil {
		w.shareCtx, lc.stopShare = context.WithCancel(context.Background())
	}
	go func() {
		defer close(lc.done)
		defer m.lat.Ended(lc.class, lc.place)
		if w.shareCtx != nil {
			t := time.NewTicker(shareLatencyEvery)
			defer t.Stop()
			w.tick = t.C
		}
		if w.early(early) {
			w.cohort()
		}
	}()
	return lc
}

// cutWatch is what cutOnceLearned's goroutine watches: the attempt lc
// watches, sent at start with room before its own deadline, cut by cancel.
type cutWatch struct {
	lc     *lateCut
	c      *Client
	start  time.Time
	room   time.Duration
	cancel context.CancelFunc
	// stretch multiplies the cuts it learns: the call's (call.stretch of 1).
	stretch time.Duration
	// In a fleet, tick (nil otherwise: never) is when to share m's record
	// with the other replicas and read theirs (share), under shareCtx.
	m        *modelState
	tick     <-chan time.Time
	shareCtx context.Context
}

// early cuts the attempt at the early delay, looked at again after a
// quarter of it (it grows as the cohort answers) or at the next answer,
// from when early is closed until the class learns its cut; while the
// cohort's median is not known (most of it is out), at the stall cut
// (latency.Learner.StallCut). It reports whether the watch goes on (the
// cut is learned).
func (w *cutWatch) early(early <-chan struct{}) bool {
	lat, class, learned := w.lc.lat, w.lc.class, w.lc.lat.WhenLearned(w.lc.class)
	for !lat.Learned(class) {
		select {
		case <-w.lc.stop:
			return false
		case <-learned:
			continue
		case <-w.tick:
			w.share()
			continue
		case <-early:
		}
		answered := lat.WhenAnswered(class) // before the look: an answer meanwhile wakes the next
		wait := latency.CutFloor            // the cohort's median not known yet: look again soon
		now := time.Now()
		if d, known, ok := lat.EarlyDeadline(class, now, w.lc.place); ok {
			if d *= w.stretch; known {
				wait = max(latency.CutFloor, d/(4*latency.CutMax))
			}
			if d < w.room { // else its own deadline comes first, unless a later look's is sooner
				left, done := w.due(d)
				if done {
					return false
				}
				wait = min(wait, left)
			}
		}
		if !w.sleep(wait, learned, answered) {
			return false
		}
	}
	return true
}

// cohort cuts the attempt at its cohort's cut (latency.Learner.CohortCut),
// looked at again after a quarter of a median (or at the cut): once none
// of the cohort answered over a look, what is left of it stalls (answers,
// not ends: a cut at the same instant as a look is no answer, so every
// look of one instant agrees). While the cohort's median is not known, at
// the bound past which it stalls whatever the answers' spread
// (latency.Learner.StallBound): a flood's first answers, its fastest, do
// not cut the rest, while stalls that fell silent past the slowest answer
// are cut at twice it.
func (w *cutWatch) cohort() {
	lat, class := w.lc.lat, w.lc.class
	prev := int64(-1)
	for {
		look, _ := lat.Cut(class, true)
		look /= 4 * latency.CutMax
		answers := lat.CohortAnswers(class)
		settled := prev >= 0 && answers == prev
		prev = answers
		wait := look
		now := time.Now()
		if d, known, ok := lat.CohortDeadline(class, now, w.lc.place, settled); ok {
			if d *= w.stretch; d >= w.room && settled && known { // its own deadline comes first
				return
			}
			left, done := w.due(d)
			if done {
				return
			}
			wait = min(wait, left)
		}
		if !w.sleep(wait, nil, nil) {
			return
		}
	}
}

// due returns how long is left until the attempt's cut d; once none is, it
// cuts the attempt when it may be cut (Client.mayCut) and reports done.
func (w *cutWatch) due(d time.Duration) (left time.Duration, done bool) {
	if left = time.Until(w.start.Add(d)); left > 0 {
		return left, false
	}
	if w.c.mayCut(w.lc.onward, time.Now()) {
		w.lc.cut = d
		w.cancel()
	}
	return 0, true
}

// sleep waits d, or until wake or wake2 is closed (nil: never) or the
// next tick (which shares the model's record with the fleet), and reports
// false when the watch was stopped meanwhile.
func (w *cutWatch) sleep(d time.Duration, wake, wake2 <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.lc.stop:
		return false
	case <-t.C:
	case <-wake:
	case <-wake2:
	case <-w.tick:
		w.share()
	}
	return true
}

// share shares the watched attempt's model's record with the fleet and
// reads the other replicas' (Client.shareRecord), shareLatencyEvery since
// the last round trip that did. When the class is still not learned and
// the attempt has waited past twice the slowest answer this replica knows
// of (past two reads of the fleet's record while it knows none), where
// what is left of a cohort stalls (latency.Learner.StallCut's silent
// cut), it asks the fleet for the records the other replicas have not
// shared (Client.wantRecord). Each ask costs every replica a round trip
// and brings its pending outcomes to the fleet: asked at each look while
// the class was not learned, fleet429 paid a wave of them at its start
// (1.033 round trips a call, 1.012 without), and asked past the slowest
// answer known, a fleet of four knowing few answers asked often, its
// flaky primary's failures then reported at once (the brownout family's
// cell 1000144: 0.82 → 0.64 of the oracle's primary share).
func (w *cutWatch) share() {
	w.c.shareRecord(w.shareCtx, w.m, false)
	lat, class, now := w.lc.lat, w.lc.class, time.Now()
	if lat.Learned(class) {
		return
	}
	bound := 2 * shareLatencyEvery
	if slowest, ok := lat.Slowest(class); ok {
		bound = 2 * slowest
	}
	if now.Sub(w.start) > bound {
		w.c.wantRecord(w.shareCtx, w.m, now)
	}
}

// learning reports whether an attempt to m with room before its own
// deadline is sent before m learned the answer times of the call's class
// (and so is cut once it does: cutOnceLearned).
func (call *call[R]) learning(m *modelState, room time.Duration) bool {
	return call.learns && !m.lat.Learned(call.class) && room > latency.CutFloor
}

// end stops the watch, once it has, and returns the cut that ended the
// attempt: 0 when none did.
func (lc *lateCut) end() time.Duration {
	if lc.stop != nil {
		close(lc.stop)
		if lc.stopShare != nil {
			lc.stopShare()
		}
		<-lc.done
		lc.stop = nil
	}
	return lc.cut
}
