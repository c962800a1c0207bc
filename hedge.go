package geminiguard

import (
	"context"
	"errors"
	"time"

	"github.com/geminiguard/geminiguard/internal/latency"
)

// Hedged requests (The Tail at Scale, Dean & Barroso, CACM 2013; gRPC's
// gRFC A6): a generate attempt that has not answered by its model's hedge
// delay is raced, not thrown away (a stream's: not sent its first chunk, by
// the model's first-chunk times). Per model and size class of request
// (latency.go, learned by internal/latency), the delay is
//
//	hedge = min(cut, max(latency.CutFloor, end of the p95 bucket, latency.HedgeSpread × median))
//
// so an attempt is hedged once it is later than 95% of the model's answers
// and clearly later than its ordinary spread, and never after the point
// where it would have been cut: when stalls are too many for a p95 (more
// than 5% of the requests), the hedge takes the cut's place. The hedge goes
// to the next model of the call's order that can take a request at once
// (not cooling down, not open, not throttled), or to the same model when
// that model answers its recent requests, stalls on at most 5% of them,
// and learned to answer no slower than the next one (a rare stall that is
// a draw per request: a second request to the same model is the better
// bet, and its answer keeps the primary's quality; one that stalls more
// often would stall the hedge as often). A hedge that has not answered by
// its own learned cut is cut with its original, and the call goes on to
// the next model. The first answer wins; the other attempt is cancelled, joined
// before the call goes on, and its breaker permit handed back with an
// ignored outcome (its tokens were spent: the request left). A hedge pays
// tokens like any request and is capped by a Client-wide budget of
// hedgeRatio hedges per first attempt, over any hedgeTTL, plus
// hedgeMinPerSec: a storm of slow requests cannot exceed it. When the
// budget (or the lack of a model to take the hedge) refuses, the attempt
// is cut at the learned cut as before. A model slow on every request
// (long thinking) has a slow median and a narrow spread: its requests end
// before their hedge delay, and are neither hedged nor cut. A stream hedges
// before its first chunk only: the first of the two streams to send one is
// the one the caller reads, the other is cancelled and settled as a unary
// loser is, but with an ignored outcome even when its first chunk came (a
// first chunk says nothing yet of the stream's outcome); once a chunk was
// yielded (a resume, a continuation hop) no request is hedged. An attempt
// of the Client's fleet mode (WithSharedState) is not hedged: its admission
// goes through the shared state.

const (
	hedgeRatio     = 0.05 // hedges per first attempt, over hedgeTTL
	hedgeMinPerSec = 0.05 // hedges always allowed per second, on top: 3 a minute
	hedgeTTL       = time.Minute
)

// HedgePolicy configures hedged requests: a GenerateContent attempt that
// has not answered by its model's learned 95th-percentile answer time (and
// twice its median) is raced by a second request, to the next model of the
// cascade or to the same model, whichever is the better bet; the first
// answer wins and the other request is cancelled. A GenerateContentStream
// attempt is hedged alike before its first chunk, by its model's learned
// first-chunk times: the first stream to send a chunk is the one read, and
// once a chunk was yielded there is never a hedge. A model that is slow on
// every request is never hedged. It is a plain value.
type HedgePolicy struct {
	// On turns hedging on. Off, a late attempt is only cut at its model's
	// learned deadline (latency.go), and the call goes on to the next
	// model: on the brownout family the two score alike (BENCHMARKS.md),
	// and a hedged attempt allocates about 8 times more (a goroutine, a
	// channel, a timer), so the cut alone is the default.
	On bool
	// Budget is the most hedges per first attempt, over any minute, on
	// top of three a minute always allowed; in (0, 1].
	// Default: 0.05 (at most 5% more requests).
	Budget float64
}

// newHedgeBudget returns the hedge budget of p.
func newHedgeBudget(p HedgePolicy) *retryBudget {
	return newRetryBudget(p.Budget, hedgeMinPerSec, hedgeTTL)
}

// errHedgeLost marks an attempt cancelled because its hedge answered first.
var errHedgeLost = errors.New("geminiguard: attempt cancelled: its hedge answered first")

// hedgeAfter returns the delay after which the attempt of call to m that
// starts at start is hedged, false when it is not hedged: calls that do
// not learn answer times, streams once a chunk was yielded, the fleet mode,
// hedging off, a delay that reaches the attempt's end (a stream's
// first-chunk deadline), or answer times the model has not learned yet for
// the class.
func (call *call[R]) hedgeAfter(m *modelState, start, end time.Time) (time.Duration, bool) {
	c := call.c
	if !call.learns || call.stream != nil && call.stream.yielded {
		return 0, false
	}
	d, ok := m.lat.Hedge(call.class)
	switch {
	case !ok, call.only || c.fleet != nil || !c.cfg.hedge.On || !start.Add(d).Before(end):
		return 0, false
	case call.stream != nil && d >= c.cfg.firstChunk:
		return 0, false
	}
	return d, true
}

// hedgeTarget returns the model a hedge of call's attempt to m goes to,
// nil when none can take it now: the next model of the call's order that
// is neither cooling down, open nor throttled, or m itself when m is not
// throttled, at most 1 − latency.HedgeQuantile of its recent requests were
// slow, and its learned cut is no longer than that model's (or there is no
// such model).
func (call *call[R]) hedgeTarget(m *modelState) *modelState {
	now := call.now
	ready := func(x *modelState) bool {
		p, _, _ := x.routes[call.endpoint].rejectProbability(now)
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
	if r, _, slow, held := m.routes[call.endpoint].totals(now); float64(slow) > (1-latency.HedgeQuantile)*float64(r-held) {
		return next // a second request to m stalls as often: a bet for the median, not the tail
	}
	if mm, ok := m.lat.Cut(call.class, false); ok {
		if nm, ok := next.lat.Cut(call.class, false); !ok || mm <= nm { // cuts are medians scaled by their spreads
			return m
		}
	}
	return next
}

// admitHedge takes what a hedge to m needs, without waiting: the limiter's
// grant, when it is free now, and a closed breaker's permit. It fills h
// (zero) and reports true, or reports false leaving h holding nothing.
func (call *call[R]) admitHedge(ctx context.Context, m *modelState, h *admission) bool {
	if next, _ := call.overBudget(ctx, m); next != stepGo {
		return false
	}
	if call.endpoint.metered() && m.lim.enforces() {
		tokens := call.inputTokens(ctx, m)
		g, wait, err := m.lim.reserve(call.now, tokens, call.deadline)
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
	p, tr, err := br.allow(call.now)
	if err != nil || p.Probe() { // a probe's slot is for a call of its own
		if err == nil {
			br.done(p, call.now, outcomeIgnore)
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
	panics   bool // the request panicked with panicV
	panicV   any
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

// race sends one request of a hedged attempt to m under ctx and reports its
// outcome on out, a panic included, for the call's goroutine to raise. A
// stream's request leaves the stream it opened in its outcome.
func (call *call[R]) race(ctx context.Context, m *modelState, hedge bool, out chan<- raced[R]) {
	r := raced[R]{hedge: hedge, panics: true}
	defer func() {
		if r.panics {
			r.panicV = recover()
		}
		r.end = time.Now()
		r.timedOut = errors.Is(ctx.Err(), context.DeadlineExceeded)
		out <- r
	}()
	sctx := ctx
	if call.stream != nil {
		sctx = withSessionSlot(ctx, &r.session)
	}
	r.resp, r.err = call.send(sctx, call, m)
	r.panics = false
}

// hedged runs the admitted attempt a, which starts at call.now and ends by
// end, and races it with a hedge sent after the delay after; cut, above 0,
// is the learned cut, which bounds the attempt when no hedge could be sent.
// It returns as attempt does. The first answer wins and cancels the other
// request. When the hedge's answer wins, *a becomes the hedge's admission
// (for try to settle with the answer) and the original is settled and
// recorded here; a hedge that lost or failed is settled and recorded here
// too. For a stream, the winner's open stream becomes the call's and the
// loser's is closed. Both requests are joined before hedged returns, on
// every path: a panic in either (raised here, once both are joined) or in
// the call's goroutine cancels them, waits for them and closes what
// streams they opened.
func (call *call[R]) hedged(ctx context.Context, a *admission, end time.Time, after, cut time.Duration) (R, Verdict, time.Duration, error) {
	c, m, start := call.c, a.m, call.now
	out := make(chan raced[R], 2)
	octx, ocancel := context.WithDeadline(ctx, end)
	hbase, hcancel := context.WithCancel(ctx) // the hedge's, once sent
	inflight := 0
	var h admission // the hedge's
	var orig, hedge *raced[R]
	defer func() {
		ocancel()
		hcancel()
		for ; inflight > 0; inflight-- {
			r := <-out // joined: no request outlives the call
			r.release()
		}
		orig.release() // streams not handed to the call
		hedge.release()
		h.abandon() // a panic came before the hedge was settled
	}()
	send := func(ctx context.Context, x *modelState, hedge bool) {
		x.counters.requests.Add(1)
		inflight++
		go call.race(ctx, x, hedge, out)
	}
	a.sent = true
	send(octx, m, false)
	timer := time.NewTimer(after)
	defer timer.Stop()
	var cutC <-chan time.Time  // armed when no hedge could be sent, or the hedge failed
	var pairC <-chan time.Time // armed when the hedge is sent: its own learned cut
	cutting := false           // the cut bounds the original
	learned := cut
	// cutAt bounds the original by the learned cut from now on, as without
	// hedging, when the cut budget allows: at once when its time has come.
	cutAt := func(now time.Time) {
		switch d := start.Add(learned).Sub(now); {
		case learned == 0 || !c.cuts.allows(now):
			cut = 0
		case d > 0:
			cut, cutC, cutting = learned, time.After(d), true
		default:
			cut, cutting = learned, true
			ocancel()
		}
	}
	var hstart time.Time
	var panicked *raced[R]
	for inflight > 0 {
		select {
		case r := <-out:
			inflight--
			switch {
			case r.panics:
				panicked = &r
				ocancel()
				hcancel()
			case r.hedge:
				hedge = &r
				if r.err != nil && orig == nil { // the original still stalls: cut it as if no hedge had been sent
					call.now = time.Now()
					cutAt(call.now)
				}
			default:
				orig = &r
			}
			if r.err == nil && !r.panics { // the first answer wins
				ocancel()
				hcancel()
			}
		case <-timer.C:
			call.now = time.Now()
			if orig != nil || panicked != nil {
				continue
			}
			hm := call.hedgeTarget(m)
			if hm == nil || !c.hedges.allows(call.now) || !call.admitHedge(ctx, hm, &h) {
				cutAt(call.now) // no hedge: cut as without hedging (at once when the hedge delay was the cut)
				continue
			}
			c.hedges.withdraw(call.now)
			c.stateChanged(ctx, hm.name, call.endpoint, h.opened)
			h.sent, hstart, cut = true, call.now, 0
			hend := hstart.Add(hm.timeout)
			if call.deadline.Before(hend) {
				hend = call.deadline
			}
			hctx, hstop := context.WithDeadline(hbase, hend)
			defer hstop()
			send(hctx, hm, true)
			if d, ok := hm.lat.Cut(call.class, false); ok && hstart.Add(d).Before(hend) {
				pairC = time.After(d) // a hedge that stalls too is cut with its original
			}
		case <-cutC:
			ocancel()
		case <-pairC:
			if call.now = time.Now(); orig == nil && hedge == nil && c.cuts.allows(call.now) {
				cut, cutting = call.now.Sub(start), true
				ocancel()
				hcancel()
			}
		}
	}
	if panicked != nil {
		panic(panicked.panicV)
	}
	if !cutting {
		cut = 0
	}
	call.now = time.Now()
	switch {
	case hedge == nil:
	case orig.err != nil && hedge.err == nil: // the hedge's answer wins
		call.loser(ctx, a, orig, start)
		*a, h = h, admission{}
		call.opened(hedge)
		resp, v, _, err := call.ended(ctx, a.m, hstart, hedge.end, 0, false, hedge.resp, nil)
		return resp, v, hedge.end.Sub(hstart), err
	default:
		call.loser(ctx, &h, hedge, hstart)
	}
	call.opened(orig)
	return call.ended(ctx, m, start, orig.end, cut, orig.timedOut && ctx.Err() == nil, orig.resp, orig.err)
}

// opened hands the stream the winning request r opened, if any, to the
// call (streams only).
func (call *call[R]) opened(r *raced[R]) {
	if call.stream != nil && r.session != nil {
		call.stream.session, r.session = r.session, nil
	}
}

// loser settles and records the request r of a hedged attempt whose other
// request's outcome is the attempt's: cancelled because the other answered
// first (its permit handed back with an ignored outcome; an original also
// counts as an abandoned attempt in its model's latencies), or failed on
// its own (settled with its failure, whose verdict reaches past the call).
// A stream it opened, its first chunk late, is closed.
func (call *call[R]) loser(ctx context.Context, a *admission, r *raced[R], start time.Time) {
	c, m, elapsed := call.c, a.m, r.end.Sub(start)
	r.release()
	call.account(m, r.resp, r.end)
	if r.err == nil || (errors.Is(r.err, context.Canceled) && ctx.Err() == nil) {
		if r.err == nil && call.stream == nil {
			c.settle(a, r.end, nil, Verdict{}) // answered too, a moment late
		} else { // cancelled, or a stream whose outcome its first chunk does not tell
			a.lose(r.end)
		}
		if !r.hedge {
			m.lat.Record(call.class, latency.Abandoned) // later than any answer
			m.routes[call.endpoint].slowed(r.end)
		}
		call.fail(m.name, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassTimeout, Scope: ScopeModel}, Err: errHedgeLost}, 0, elapsed)
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
