package geminiguard

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/geminiguard/geminiguard/internal/latency"
)

// Hedged requests (The Tail at Scale, Dean & Barroso, CACM 2013; gRPC's gRFC
// A6): a generate attempt that has not answered by its model's hedge delay
// is raced, not thrown away (a stream's: not sent its first chunk, by the
// model's first-chunk times). Per model and size class of request
// (latency.go, learned by internal/latency), the delay is
//
//	hedge = min(cut, max(latency.CutFloor, end of the p95 bucket, latency.HedgeSpread × median))
//
// so an attempt is hedged once it is later than 95% of the model's answers
// and clearly later than its ordinary spread, and never after the point
// where it would have been cut. When stalls are too many for a p95 (more
// than 5% of the requests), the delay is the p95 of the answers alone,
// without the spread's floor: each stall costs a second request at the
// cut anyway, and a hedge sends it sooner and keeps the original. Before the
// model has the latency.Warmup answers of the class that teach its cut, but
// from latency.EarlyHedgeAfter on, the delay is latency.CutMax times their
// median, or the end of 99% of them as they spread once four have answered
// (a stall of one caller's first calls is raced rather than waited out;
// long thinking answers sooner, and long answers of a model whose answers
// spread wide are let finish), and only the cut of its cohort bounds
// the attempt once it is learned, as unhedged (cutOnceLearned), not the
// hedge's: a burst that slowed every request (a flood) is waited for, not
// cut in pairs. The hedge goes to the next model of the call's order that
// can take a request at once (not cooling down, not open, not throttled), or
// to the same model when that model answers its recent requests, stalls on
// at most 5% of them (the attempt hedged, late already, counted with the
// last seconds' requests: a stall of a model asked once a second is as
// likely a brownout's first as a rare one's), and learned to answer no
// slower than the next one (a rare stall that is a draw per request: a
// second request to the same model is the better bet, and its answer keeps
// the primary's quality; one that stalls more often would stall the hedge
// as often). A hedge that has not
// answered by its own learned cut is cut with its original, and the call
// goes on to the next model. A hedge that loses its race (the original
// answered first while it was out) says the model's late attempts are long
// answers, as long on any model, not stalls: once a model's hedges of a
// class lose (latency.Learner.Raced: five races or so, one for a model
// whose answers spread wide and which stalls on few of its requests, and
// fewer than one in eight won), its attempts are hedged and cut at the
// learned cut's ceiling (the end of 99% of its answers as they spread)
// until its hedges win again. The first answer wins; the other attempt is
// cancelled, joined before the call goes on, and its breaker permit handed
// back with an ignored outcome (its tokens were spent: the request left). A
// hedge pays tokens like any request and is capped by a Client-wide budget
// of hedgeRatio hedges per first attempt, over any hedgeTTL, plus
// hedgeMinPerSec: a storm of slow requests cannot exceed it. A hedge that
// answers after its original's learned cut took the cut's place (the cut
// would have sent that request): the cut budget pays for it, when it
// allows, and the hedge budget gets its credit back, so that the hedge
// budget counts the requests hedging adds to what cutting sends. When the
// hedge budget refuses, the request the cut would send at the learned cut
// is sent then as a hedge in the cut's place (inCutsPlace), paid by the cut
// budget as the cut would be, not the hedge's: the original is kept, and
// an answer that was only long, not stalled, still comes first instead of
// being written again from the start (a unary attempt's; a stream's is cut
// as before). When no model can take the hedge, or it is not admitted, the
// attempt is cut at the learned cut as before; so is the attempt of a call
// whose bulkhead has calls queued, which runs as many calls as its feature
// allows (a hedge would be a request beyond them). A model slow on every request (long
// thinking) has a slow median and a narrow spread: its requests end before
// their hedge delay, and are neither hedged nor cut. A stream hedges before
// its first chunk only: the first of the two streams to send one is the one
// the caller reads, the other is cancelled and settled as a unary loser is,
// but with an ignored outcome even when its first chunk came (a first chunk
// says nothing yet of the stream's outcome); once a chunk was yielded (a
// resume, a continuation hop) no request is hedged. In the fleet mode
// (WithSharedState) a replica hedges as one process does, with a budget of
// its own, except to a model with limits: those are leased through the
// shared state, which a hedge does not ask.

const (
	hedgeRatio     = 0.05 // hedges per first attempt, over hedgeTTL
	hedgeMinPerSec = 0.05 // hedges always allowed per second, on top: 3 a minute
	hedgeTTL       = time.Minute
)

// HedgePolicy configures hedged requests: a GenerateContent attempt that has
// not answered by its model's learned 95th-percentile answer time (and twice
// its median, unless the model stalls on more than 5% of its requests;
// while the model has fewer than ten answers of the request's size, from
// its second, three times their median, or more when they spread wider) is
// raced by a second
// request, to the next model of the cascade or to the same model, whichever
// is the better bet; the first answer wins and the other request is
// cancelled. A GenerateContentStream attempt is hedged alike before its
// first chunk, by its model's learned first-chunk times: the first stream to
// send a chunk is the one read, and once a chunk was yielded there is never
// a hedge. A model that is slow on every request is never hedged. It is a
// plain value.
type HedgePolicy struct {
	// On turns hedging on; it is on by default (WithHedging). Off, a late
	// attempt is only cut at its model's learned deadline (latency.go),
	// and the call goes on to the next model. On, an attempt answered
	// before its hedge delay (nearly all) costs an entry in a Client-wide
	// queue of hedge delays (one timer serves them all); one hedged adds
	// the hedge's goroutine, context and request.
	On bool
	// Budget is the most hedges per first attempt, over any minute, on
	// top of three a minute always allowed; in (0, 1]. A hedge answered
	// after its original would have been cut (its learned deadline) is
	// counted as the cut it replaced, within the cuts' own cap (10% of
	// first attempts plus one a second), not here. Once the budget is
	// spent, an attempt is not hedged before its learned deadline; at it,
	// the request its cut would send is sent as a hedge that keeps the
	// original (a unary call's), counted as the cut, not here (a call's
	// record says "in its cut's place" of it, not "hedge"). A model
	// whose hedges lose their races (its late answers are long, not
	// stalled) is hedged at the end of 99% of its answers instead, until
	// they win again.
	// Default: 0.05 (at most 5% more requests than cutting sends).
	Budget float64
}

// newHedgeBudget returns the hedge budget of p.
func newHedgeBudget(p HedgePolicy) *retryBudget {
	return newRetryBudget(p.Budget, hedgeMinPerSec, hedgeTTL)
}

// errHedgeLost marks an attempt cancelled because its hedge answered
// first, errHedgeOvertaken a hedge cancelled because the attempt it hedged
// answered first: a call's record (CallRecord.Attempts) tells the two
// requests of a race apart by them. errCutPlaceLost and
// errCutPlaceOvertaken mark the same of a race with the request sent at
// the attempt's learned deadline in its cut's place (mayTakeCutsPlace),
// which the cut's budget pays and not the hedge budget: the record tells
// it from a hedge.
var (
	errHedgeLost         = errors.New("geminiguard: attempt cancelled: its hedge answered first")
	errHedgeOvertaken    = errors.New("geminiguard: hedge cancelled: the attempt it hedged answered first")
	errCutPlaceLost      = errors.New("geminiguard: attempt cancelled: the request sent in its cut's place answered first")
	errCutPlaceOvertaken = errors.New("geminiguard: request sent in a cut's place cancelled: the attempt it would have cut answered first")
)

// hedgeAfter returns the delay after which the attempt of call to m that
// starts at start is hedged, false when it is not hedged: calls that do
// not learn answer times, streams once a chunk was yielded, hedging off, a
// delay that reaches the attempt's end (a stream's first-chunk deadline),
// or fewer than latency.EarlyHedgeAfter answers of the class.
func (call *call[R]) hedgeAfter(m *modelState, start, end time.Time) (time.Duration, bool) {
	c := call.c
	if !c.cfg.hedge.On || !call.learns || call.only || call.stream != nil && call.stream.yielded {
		return 0, false
	}
	d, ok := m.lat.Hedge(call.class, start, 0) // before the model learned its times, a scan of its answers
	d = call.stretch(m, d, false)
	switch {
	case !ok, !start.Add(d).Before(end):
		return 0, false
	case call.stream != nil && d >= c.cfg.firstChunk:
		return 0, false
	}
	return d, true
}

// hedgeTarget returns the model a hedge of call's attempt to m goes to,
// nil when none can take it now: the next model of the call's order that
// is neither cooling down, open nor throttled, or m itself when m is not
// throttled, at most 1 − latency.HedgeQuantile of its requests were slow
// (over the throttle's window, which must hold routeMinRequests sent, as
// the throttle's rules need: two requests, both answered, are no proof that
// a model does not stall; and over its last span or two: a window of
// healthy answers counts a brownout's first stalls only once they are
// many, and the attempt hedged, late already, counts as one: the bet needs
// twenty requests of the last seconds, the attempt's one of them), and its
// learned cut is no longer than that model's (or there is no such model),
// at now.
func (call *call[R]) hedgeTarget(m *modelState, now time.Time) *modelState {
	ready := func(x *modelState) bool {
		p, _, _ := x.routes[call.endpoint].rejectProbability(now, x.lat.LiftUnanswered(call.class))
		return p == 0 && x.cooling(now) == nil && x.breakers[call.endpoint].state(now) == StateClosed
	}
	var next *modelState
	after := false
	for _, x := range call.order() {
		if after && ready(x) {
			next = x
			break
		}
		after = after || x == m
	}
	if !ready(m) {
		return next
	}
	if next == nil {
		return m
	}
	if r, _, slow, held := m.routes[call.endpoint].throttleTotals(now); r-held < routeMinRequests || float64(slow) > (1-latency.HedgeQuantile)*float64(r-held) {
		return next // a second request to m stalls as often, or its window is too small to tell: a bet for the median, not the tail
	}
	if sent, slow := m.routes[call.endpoint].recent(now); float64(slow+1) > (1-latency.HedgeQuantile)*float64(sent+1) {
		return next // the same, of the last seconds and the attempt hedged: a brownout's first stalls
	}
	if mm, ok := m.lat.Cut(call.class, false); ok {
		if nm, ok := next.lat.Cut(call.class, false); !ok || mm <= nm { // cuts are medians scaled by their spreads
			return m
		}
	}
	return next
}

// admitHedge takes what a hedge to m needs at now, without waiting: the
// limiter's grant, when it is free now, and a closed breaker's permit. It
// fills h (zero) and reports true, or reports false leaving h holding
// nothing. It runs off the call's goroutine (hedgeRun) and writes none of
// the call's fields: the input tokens, when the call has not estimated them
// yet, are estimated (never counted, WithExactTokenCount or not) into
// *estimate; the project budget's steering is asked as of the attempt's
// start (call.now).
func (call *call[R]) admitHedge(ctx context.Context, m *modelState, h *admission, now time.Time, estimate *int) bool {
	if next, _ := call.overBudget(ctx, m); next != stepGo {
		return false
	}
	if call.c.fleet != nil && m.lim.enforces() {
		return false // a fleet's quota is leased through the shared state, which a hedge does not ask
	}
	if call.endpoint.metered() && m.lim.enforces() {
		tokens := 0
		if m.lim.limitsTokens() {
			if tokens = call.tokens; tokens < 0 {
				tokens = estimateTokens(call.contents, call.user)
				*estimate = tokens
			}
		}
		g, wait, err := m.lim.reserve(now, tokens, call.deadline)
		if err != nil {
			return false
		}
		if wait > 0 {
			g.cancel()
			return false
		}
		h.grant = g
	}
	br := m.breakers[call.endpoint]
	p, tr, err := br.allow(now)
	if err != nil || p.Probe() { // a probe's slot is for a call of its own
		if err == nil {
			br.done(p, now, outcomeIgnore)
		}
		h.unreserve(m)
		return false
	}
	h.m, h.br, h.permit, h.endpoint, h.opened, h.ctx = m, br, p, call.endpoint, tr, ctx
	return true
}

// raced is the outcome of one request of a hedged attempt.
type raced[R any] struct {
	resp     R
	err      error
	end      time.Time
	timedOut bool // its own deadline (the attempt timeout) ended it
	hedge    bool // the hedge's, not the original's
	// inCutsPlace: the hedge was sent in the original's cut's place
	// (mayTakeCutsPlace), both requests' records say so (loser)
	inCutsPlace bool
	panics      bool // the request panicked with panicV
	panicV      any
	// session is the stream the request opened (streams only), until it
	// is handed to the call or closed (release).
	session *streamSession
}

// release closes the stream r opened, if any and not handed to the call.
// r may be nil.
func (r *raced[R]) release() {
	if r != nil && r.session != nil {
		r.session.close()
		r.session = nil
	}
}

// hedgeRun is what a hedged attempt shares with its Client's hedgeClock. The
// original request is sent on the call's goroutine; the clock's runs (run),
// each on a goroutine of its own, do the rest once the hedge delay passed:
// decide, admit and send the hedge (the first run, which is the hedge's
// goroutine), cut the original at its learned cut when no hedge could be
// sent or the hedge failed, cut both at the hedge's learned cut. A run
// touches none of the call's fields but those fixed for the attempt (read
// only: the call's goroutine writes none while its original is out) and the
// hedge's own, here; the Client's breakers, limiters and budgets are safe
// for concurrent use. The call's goroutine joins every run before it reads
// what they wrote. A hedgeRun goes back to hedgeRuns once joined: an attempt
// answered before its hedge delay allocates nothing of its own.
type hedgeRun struct {
	mu   sync.Mutex
	cond sync.Cond // on mu: a run ended
	hedgeState

	// Under the clock's mu (hedgeClock).
	due  time.Time // when the scheduled run is due
	slot int       // its index in the clock's queue; -1: none scheduled
}

// hedgeState is a hedgeRun's state of one attempt, zeroed for the next.
type hedgeState struct {
	// Set before the run is scheduled, read only after.
	job     hedgeJob // the call
	c       *Client
	ctx     context.Context // the call's
	m       *modelState     // the original's
	start   time.Time       // the original's
	learned time.Duration   // the original's learned cut, 0 when none
	onward  bool            // the cut sends the call on to another model: the cut budget does not pay it (Client.mayCut)
	early   bool            // the original was sent before m learned its cut: cutOnceLearned bounds it, not the hedge's cut
	place   int64           // then, its place among the attempts sent before (latency.Learner.Sent)
	ocancel context.CancelFunc
	clock   *hedgeClock // the Client's: it starts the runs

	// Under mu.
	runs     int       // runs scheduled or under way
	origDone bool      // the original returned: no run does anything more
	decided  bool      // the hedge delay passed: the hedge was sent or refused
	cutAt    time.Time // when set, the original is cut then
	pairAt   time.Time // when set, both requests are cut then unless one returned
	cut      time.Duration
	cutting  bool // the cut bounds the original
	// inCutsPlace: the hedge budget refused the hedge, which is sent at
	// the original's learned cut instead of the cut (mayTakeCutsPlace).
	inCutsPlace bool
	hcut        time.Duration      // the hedge's learned cut, when it was cut with its original (pairAt)
	hcancel     context.CancelFunc // the hedge's, once sent
	done        bool               // the hedge returned

	// The hedge's, written by its run, read by the call's goroutine once
	// it joined the runs.
	h      admission
	hstart time.Time
	tokens int // the input token estimate the hedge took, -1 when none
	hedge  raced[any]
}

// hedgeJob sends the hedge of a hedgeRun: implemented by *call[R].
type hedgeJob interface {
	sendHedge(hr *hedgeRun, now time.Time)
}

// hedgeRuns holds the hedgeRuns of attempts that returned. They hold no
// timer or channel (a testing/synctest bubble may not use another's): the
// Client's hedgeClock schedules their runs.
var hedgeRuns = sync.Pool{New: func() any { return newHedgeRun() }}

// newHedgeRun returns a hedgeRun with nothing scheduled, its cond on its mu.
func newHedgeRun() *hedgeRun {
	hr := &hedgeRun{slot: -1}
	hr.cond.L = &hr.mu
	return hr
}

// run is one run of hr's, started by its clock.
func (hr *hedgeRun) run() {
	defer func() {
		hr.mu.Lock()
		hr.runs--
		hr.cond.Broadcast()
		hr.mu.Unlock()
	}()
	now := time.Now()
	hr.mu.Lock()
	hedge := !hr.origDone && !hr.decided
	hr.decided = true
	switch {
	case hedge || hr.origDone:
	case !hr.cutAt.IsZero() && !now.Before(hr.cutAt): // no hedge, or a failed one: the original's learned cut
		hr.cutAt = time.Time{}
		hr.ocancel()
	case !hr.pairAt.IsZero() && !hr.done && !now.Before(hr.pairAt): // a hedge that stalls too is cut with its original
		hr.pairAt = time.Time{}
		if hr.c.mayCut(hr.onward, now) {
			hr.cut, hr.cutting = now.Sub(hr.start), true
			hr.hcut = now.Sub(hr.hstart)
			hr.ocancel()
			hr.hcancel()
		}
	}
	hr.mu.Unlock()
	if hedge {
		hr.job.sendHedge(hr, now)
	}
}

// arm schedules a run of hr's at at, in place of one scheduled. hr.mu is
// held.
func (hr *hedgeRun) arm(at time.Time) {
	if hr.clock.schedule(hr, at) {
		hr.runs++
	}
}

// cutFrom bounds the original by its learned cut from now on, as without
// hedging, when it may be cut (Client.mayCut): at once when its time has
// come. An original hedged at the early delay, with another model to go
// to, is cut now: its early delay has passed, and no hedge races it (none
// was sent, or it failed), while nothing may answer to teach its model the
// cut (one caller). hr.mu is held.
func (hr *hedgeRun) cutFrom(now time.Time) {
	switch d := hr.start.Add(hr.learned).Sub(now); {
	case hr.early && hr.onward: // past the early delay, with no hedge out: cut now, for the next model
		hr.cut, hr.cutting = now.Sub(hr.start), true
		hr.ocancel()
	case hr.learned == 0 || !hr.c.mayCut(hr.onward, now):
		hr.cut = 0
	case d > 0:
		hr.cut, hr.cutting, hr.cutAt = hr.learned, true, now.Add(d)
		hr.arm(hr.cutAt)
	default:
		hr.cut, hr.cutting = hr.learned, true
		hr.ocancel()
	}
}

// join ends hr's runs once the original returned: none scheduled is run,
// the hedge is cancelled when cancel says so (the original answered, or
// panicked), and every run under way is waited for; it reports whether
// one was.
func (hr *hedgeRun) join(cancel bool) (waited bool) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	hr.origDone = true
	if hr.clock.unschedule(hr) {
		hr.runs--
	}
	if cancel && hr.hcancel != nil {
		hr.hcancel()
	}
	for hr.runs > 0 {
		waited = true
		hr.cond.Wait()
	}
	return waited
}

// sendHedge is the first run of hr's, once the hedge delay passed at
// now: it sends the hedge when hedgeFor admits one, records its outcome in
// hr, a panic included (for the call's goroutine to raise), and cancels
// the original when the hedge answered, or cuts it at its learned cut when
// the hedge failed while it was still out.
func (call *call[R]) sendHedge(hr *hedgeRun, now time.Time) {
	r := &hr.hedge
	r.hedge, r.panics = true, true
	defer func() {
		if !r.panics {
			return
		}
		v := recover()
		hr.mu.Lock()
		r.panicV, r.end, hr.done = v, time.Now(), true
		hr.ocancel()
		hr.mu.Unlock()
	}()
	hm, hctx := call.hedgeFor(hr, now)
	if hm == nil {
		r.panics = false
		return
	}
	defer hr.hcancel()
	call.c.stateChanged(hr.ctx, hm.name, call.endpoint, hr.h.opened)
	sctx := hctx
	if call.stream != nil {
		sctx = withSessionSlot(hctx, &r.session)
	}
	resp, err := call.send(sctx, call, hm)
	end := time.Now()
	hr.mu.Lock()
	defer hr.mu.Unlock()
	r.resp, r.err, r.end, r.panics, hr.done = resp, err, end, false, true
	r.timedOut = errors.Is(hctx.Err(), context.DeadlineExceeded)
	hr.hedgeEnded(err, end)
}

// hedgeEnded acts on the hedge's return at end with err, hr.mu held: an
// answer cancels the original (the first answer wins); a failure while the
// original is still out cuts the original as if no hedge had been sent
// (cutFrom). A hedge cut with its original (run's pair cut: cutting) cuts
// nothing more: the original's cut is the pair's, whichever of the two
// cancelled requests returns first (cut again, from its own learned cut,
// the original would read as not cut, and its cancellation as the call's
// error).
func (hr *hedgeRun) hedgeEnded(err error, end time.Time) {
	switch {
	case err == nil: // the first answer wins
		hr.ocancel()
	case !hr.origDone && !hr.cutting: // the original still stalls
		hr.cutFrom(end)
	}
}

// hedgeFor admits the hedge of hr's original at now and returns its model
// and context, nil when there is no hedge: the original returned, its
// hedge delay grew meanwhile (postponed: the hedge is scheduled again),
// no model
// can take the hedge (hedgeTarget), the call's bulkhead has calls queued
// (bulkheadQueues), or the hedge budget or the admission refused it; the
// original is then cut at its learned cut (cutFrom). An admitted hedge is
// withdrawn from the budget, counted as its model's request and, when its
// model learned its cut and the original's did before it was sent (not
// hedged at the early delay), armed to be cut with its original then
// (pairAt).
func (call *call[R]) hedgeFor(hr *hedgeRun, now time.Time) (*modelState, context.Context) {
	c := call.c
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.origDone {
		return nil, nil
	}
	if call.postponed(hr, now) {
		return nil, nil
	}
	hm := call.hedgeTarget(hr.m, now)
	budgeted := hr.inCutsPlace || c.hedges.allows(now)
	if !budgeted && hm != nil && call.stream == nil && hr.mayTakeCutsPlace(now) {
		if at := hr.start.Add(hr.learned); now.Before(at) {
			hr.inCutsPlace, hr.decided = true, false
			hr.arm(at)
			return nil, nil
		}
		hr.inCutsPlace, budgeted = true, true
	}
	if hm == nil || c.bulkheadQueues(hr.ctx) || !budgeted || !call.admitHedge(hr.ctx, hm, &hr.h, now, &hr.tokens) {
		hr.cutFrom(now) // no hedge: cut as without hedging (at once when the hedge delay was the cut)
		return nil, nil
	}
	if !hr.inCutsPlace {
		c.hedges.withdraw(now)
	}
	hr.h.sent, hr.hstart, hr.cut = true, now, 0
	hend := now.Add(hm.timeout)
	if call.deadline.Before(hend) {
		hend = call.deadline
	}
	hctx, hcancel := context.WithDeadline(hr.ctx, hend)
	hr.hcancel = hcancel
	if d, ok := hm.lat.Cut(call.class, false); ok && !hr.early {
		if at := now.Add(call.stretch(hm, d, false)); at.Before(hend) {
			hr.pairAt = at
			hr.arm(at)
		}
	}
	hm.counters.requests.Add(1)
	return hm, hctx
}

// mayTakeCutsPlace reports whether the hedge of hr's original, which the
// hedge budget refused at now, may be sent at the original's learned cut in
// the cut's place (inCutsPlace): the cut would send a request to another
// model then anyway, and sent as a hedge that request keeps the original,
// whose answer may still come first (a long answer of a model whose
// answers spread wide, which a cut throws away to be written again from
// the start). The hedge budget does not pay for it; the cut's does, as for
// a cut (Client.chargeCut), and the retry budget not at all (the call is
// not sent on). Not when the original has no learned cut, the cut budget
// would refuse its cut (one with no other model to go to), or it was
// hedged at the early delay. hr.mu is held.
func (hr *hedgeRun) mayTakeCutsPlace(now time.Time) bool {
	return !hr.early && hr.learned > 0 && (hr.onward || hr.c.cuts.allows(now))
}

// postponed reads again, at now, the hedge delay of hr's original, which it
// was hedged at, and when it grew meanwhile schedules the hedge again, at
// the delay read now or, without one, the stall cut
// (latency.Learner.StallCut: most of the cohort is out) or a
// latency.CutFloor on, and reports true. hr.mu is held. An early delay (the
// original was sent before its model learned its answer times) counts the
// attempts of its cohort still out as long as they have taken, so a delay
// read when they had just been sent may have grown, or the median it scales
// be no longer known (most of the cohort is out: long answers). A learned
// one is read again only once the model's hedges lose their races
// (latency.Learner.HedgesLose): it is then the cut's ceiling, and the
// attempts of a burst of long answers, whose delays were read before the
// first of its races was lost, wait for it too. (Read again otherwise, a
// delay that grew as the model's answers were learned held back the hedges
// of stalls in brownouts, and the cuts that took their place spent the
// retry budget: one call in 400 failed in two cells of 600.)
func (call *call[R]) postponed(hr *hedgeRun, now time.Time) bool {
	if !hr.early && !hr.m.lat.HedgesLose(call.class) {
		return false
	}
	at := now.Add(latency.CutFloor)
	if d, known, ok := hr.m.lat.EarlyDeadline(call.class, now, hr.place); ok {
		due := hr.start.Add(call.stretch(hr.m, d, false))
		if !now.Before(due) {
			return false
		}
		if known || due.Before(at) {
			at = due
		}
	}
	hr.decided = false
	hr.arm(at)
	return true
}

// hedged runs the admitted attempt a, which starts at call.now and ends by end,
// and races it with a hedge sent after the delay after; cut, above 0, is the
// learned cut, which bounds the attempt when no hedge could be sent (onward as
// boundingCut says); an attempt hedged at the early delay, sent before m
// learned its cut, is cut at its cohort's cut once m learns it
// (cutOnceLearned), or, with another model to go to, once no hedge races it
// (cutFrom), never with its hedge. It returns as attempt does. The original
// request is sent on the call's goroutine and, until the delay passes, nothing
// else runs: the delay is an entry in the Client's hedgeClock. The first answer
// wins and cancels the other request. When the hedge's answer wins, *a becomes
// the hedge's admission (for try to settle with the answer) and the original is
// settled and recorded here; a hedge that lost or failed is settled and
// recorded here too. For a stream, the original's stream is left where an
// unhedged attempt leaves it, the hedge's replaces it when the hedge wins, and
// the loser's is closed. The hedge is joined before hedged returns, on every
// path: a panic in either request (the hedge's raised here, once joined)
// cancels the other, waits for it and closes what streams they opened.
func (call *call[R]) hedged(ctx context.Context, a *admission, end time.Time, after, cut time.Duration, onward bool) (R, Verdict, time.Duration, error) {
	m, start := a.m, call.now
	var octx context.Context
	var ocancel context.CancelFunc
	if d, ok := ctx.Deadline(); ok && !end.Before(d) {
		octx, ocancel = context.WithCancel(ctx) // the caller's deadline bounds the attempt: no timer of its own
	} else {
		octx, ocancel = context.WithDeadline(ctx, end)
	}
	hr := hedgeRuns.Get().(*hedgeRun)
	early := call.learning(m, end.Sub(start)) // hedged at the early delay
	if early {
		onward = call.hasNext(m) // cut at the early delay when no hedge races it (cutFrom)
	}
	var late *lateCut
	var place int64
	if early { // cut once m learns its cut, as unhedged
		late = call.cutOnceLearned(m, start, end.Sub(start), false, ocancel) // hedged at the early delay, not cut
		place = late.place
	}
	hr.hedgeState = hedgeState{job: call, c: call.c, clock: call.c.hedgeClock, ctx: ctx, m: m, start: start, learned: cut, onward: onward, early: early, place: place, ocancel: ocancel, tokens: -1}
	hr.runs = 1 // nothing else holds hr before it is scheduled
	hr.clock.schedule(hr, start.Add(after))
	joined := false
	defer func() {
		if late != nil {
			late.end() // joined on a panic of the SDK too
		}
		if !joined {
			hr.join(true) // a panic of the original's request: the hedge is cancelled and waited for
		}
		ocancel()
		hr.hedge.release() // a stream not handed to the call
		hr.h.abandon()     // a panic came before the hedge was settled
		hr.hedgeState = hedgeState{}
		hedgeRuns.Put(hr)
	}()
	young := call.sentWhileYoung(m, start, early)
	defer young.end() // on a panic of the SDK too
	m.counters.requests.Add(1)
	a.sent = true
	resp, err := call.send(octx, call, m)
	young.end() // before its answer is learned (ended, loser)
	var lc time.Duration
	if late != nil {
		if lc = late.end(); err == nil {
			late.answered()
		}
	}
	call.shareEnd(m, start, late != nil)
	orig := raced[R]{resp: resp, err: err, end: time.Now(), timedOut: errors.Is(octx.Err(), context.DeadlineExceeded)}
	waited := hr.join(err == nil) // the first answer wins: the hedge, if any, is cancelled
	joined = true
	call.now = orig.end
	if waited {
		call.now = time.Now()
	}
	if call.tokens < 0 && hr.tokens >= 0 {
		call.tokens = hr.tokens // for try to reconcile the hedge's grant
	}
	if hr.hedge.panics {
		if call.stream != nil && call.stream.session != nil { // the original's, which answered
			call.stream.session.close()
			call.stream.session = nil
		}
		panic(hr.hedge.panicV)
	}
	cut, onward = lc, false // cutOnceLearned's, of a hedged attempt: the cut budget's
	if hr.cutting {
		cut, onward = hr.cut, hr.onward
	}
	timedOut := orig.timedOut && ctx.Err() == nil
	if !hr.h.sent {
		return call.ended(ctx, m, start, orig.end, cut, onward, timedOut, resp, err)
	}
	hresp, _ := hr.hedge.resp.(R)
	hedge := raced[R]{resp: hresp, err: hr.hedge.err, end: hr.hedge.end, timedOut: hr.hedge.timedOut, hedge: true, inCutsPlace: hr.inCutsPlace, session: hr.hedge.session}
	orig.inCutsPlace = hr.inCutsPlace
	hr.hedge.session = nil
	defer hedge.release()
	hstart := hr.hstart
	call.raced(m, &orig, &hedge)
	if err != nil && hedge.err == nil { // the hedge's answer wins
		if hr.learned > 0 && hedge.end.Sub(start) >= hr.learned && call.c.chargeCut(hr.onward, hedge.end) && !hr.inCutsPlace {
			call.c.hedges.refund(hedge.end) // the original outlived its cut: the hedge took the cut's place, and the cut pays
		}
		call.loser(ctx, a, &orig, start, 0)
		*a, hr.h = hr.h, admission{}
		call.opened(&hedge)
		resp, v, _, err := call.ended(ctx, a.m, hstart, hedge.end, 0, false, false, hedge.resp, nil)
		return resp, v, hedge.end.Sub(hstart), err
	}
	call.loser(ctx, &hr.h, &hedge, hstart, hr.hcut)
	return call.ended(ctx, m, start, orig.end, cut, onward, timedOut, resp, err)
}

// raced records on m, the original's model, the race of the original orig
// with its hedge (latency.Learner.Raced) when one answered while the other
// was still out: the hedge won when it answered no later than the original
// ended (cancelled by that answer), lost when the original answered no
// later than the hedge ended.
func (call *call[R]) raced(m *modelState, orig, hedge *raced[R]) {
	switch {
	case hedge.err == nil && orig.err != nil && !orig.end.Before(hedge.end):
		m.lat.Raced(call.class, true)
	case orig.err == nil && hedge.err != nil && !hedge.end.Before(orig.end):
		m.lat.Raced(call.class, false)
	}
}

// opened hands the stream the winning request r opened, if any, to the
// call (streams only).
func (call *call[R]) opened(r *raced[R]) {
	if call.stream != nil && r.session != nil {
		call.stream.session, r.session = r.session, nil
	}
}

// loser settles and records the request r of a hedged attempt whose other
// request's outcome is the attempt's: cut at its learned deadline cut (a
// hedge that stalled too, cut with its original: an abandoned attempt of
// its model, as ended records one), cancelled because the other answered
// first (its permit handed back with an ignored outcome; an original also
// counts as an abandoned attempt in its model's latencies), or failed on
// its own (settled with its failure, whose verdict reaches past the call).
// A stream it opened, its first chunk late, is closed.
func (call *call[R]) loser(ctx context.Context, a *admission, r *raced[R], start time.Time, cut time.Duration) {
	c, m, elapsed := call.c, a.m, r.end.Sub(start)
	r.release()
	call.account(m, r.resp, r.end)
	if cut > 0 && r.err != nil && ctx.Err() == nil && elapsed >= cut {
		err := &cutError{err: r.err, after: cut}
		call.cutOn = append(call.cutOn, m)
		m.lat.Record(call.class, latency.Abandoned, r.end)
		m.routes[call.endpoint].slowed(r.end)
		v := m.classify(err)
		c.settle(a, r.end, err, v)
		call.fail(m.name, &ModelError{Model: m.name, Verdict: v, Err: err}, 0, elapsed)
		return
	}
	if r.err == nil || (errors.Is(r.err, context.Canceled) && ctx.Err() == nil) {
		if r.err == nil && call.stream == nil {
			c.settle(a, r.end, nil, Verdict{}) // answered too, a moment late
		} else { // cancelled, or a stream whose outcome its first chunk does not tell
			a.lose(r.end)
		}
		lost := errHedgeOvertaken
		if r.inCutsPlace {
			lost = errCutPlaceOvertaken
		}
		if !r.hedge {
			m.lat.Record(call.class, latency.Abandoned, r.end) // later than any answer
			m.routes[call.endpoint].slowed(r.end)
			lost = errHedgeLost
			if r.inCutsPlace {
				lost = errCutPlaceLost
			}
		}
		call.fail(m.name, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassTimeout, Scope: ScopeModel}, Err: lost}, 0, elapsed)
		return
	}
	err := r.err
	if r.timedOut && ctx.Err() == nil {
		err = &attemptTimeoutError{err: err}
	}
	v := m.classify(err)
	c.settle(a, r.end, err, v)
	c.applyVerdict(ctx, m, v, r.end)
	call.fail(m.name, &ModelError{Model: m.name, Verdict: v, Err: err}, 0, elapsed)
}

// lose settles an admission whose request was cancelled because another
// request of its call answered first: its permit (a probe's slot included)
// is handed back with an ignored outcome; its grant was spent, the request
// having left. It does nothing once the admission is settled.
func (a *admission) lose(now time.Time) {
	if a.settled || a.br == nil {
		return
	}
	a.settled = true
	a.br.done(a.permit, now, outcomeIgnore)
}
