package geminiguard

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Routing by recent success: client-side adaptive throttling (Google SRE
// book, "Handling Overload"), over the requests sent. Per model and
// endpoint, the Client counts over the last routeWindow the requests it
// sent, the accepts (answers) and the requests it kept back. A call that
// has another model to go to skips this one, without sending, with
// probability
//
//	max(0, 1 − routeK·q)
//
// where q is the rate at which the model answered the requests sent, at
// the upper end of what the window's count says (answerRateBound), on the
// call's first try of it (the call comes back to it in its next round
// when the models it went to instead fail too), so the traffic a model
// gets tracks what it can serve: one that answers a quarter of its
// requests or more keeps all of its traffic (each failure still moves
// that call on to the next model at once, so its answers are kept), one
// that answers a tenth keeps 40% to 60% of it (the more, the fewer
// requests the window holds), and one that answers
// nothing gets a few requests a window, until its breaker opens, or, once
// it is silent (it hangs, which no breaker counts: rejectProbability), a
// trickle by the book's own rule. Below
// routeMinRequests in the window (kept ones included) the window reaches
// further back, up to routeQuietWindow (a quiet Client), and below it there
// nothing is throttled. The book's rule is (requests − K·accepts)/(requests + 1),
// the rate read as it is, and it counts the requests kept back
// as requests not accepted, to push an overloaded backend's clients
// towards rejecting everything; counted here, each call the throttle kept
// back made the next likelier to be kept, and a model answering a third of
// its requests, whose window of a dozen happened to hold two answers,
// kept losing calls for minutes after (a window's worth of skipped calls
// is needed to dilute them): one user with such a primary got 0.6× the
// oracle's share of its answers. The breaker is for the dead model (see
// BreakerSettings.DeadAfter); this is for the degraded one. A breaker that
// closes on a model whose window holds no answer but its probe's starts
// the window again: its failures are the spell the breaker already took
// the model out for, and counting them again would hold back a model that
// answers most of its requests (a start-up spell that every first request
// fell in). And the throttle, like the breaker's dead rule, waits for the
// answers of the requests sent while the model was unheard (it never
// answered, or answered nothing for DeadAfter: the Client's start, a burst
// after a quiet spell): a model's failures come back before its slower
// answers, so until those are in the window counts the failures of
// requests whose contemporaries' answers are on their way (but not for a
// silent model: throttled).

// routeK is the SRE book's K: a model is throttled only once fewer than
// 1/routeK of its requests are answered. The book's 2 protects an
// overloaded backend; 4 keeps more of a degraded primary's answers, each
// failure costing one request to the next model (storm503: 56% of answers
// from the primary against 48% with 2, for 1.33 requests per call). With
// 6 (a throttle that reads less into a small window's noise), storm503's
// share fell to 55.3% against 58.2% (its target: 54.8%), and the brownout
// family's targets moved within a point or two either way.
const routeK = 4

// routeMinRequests is how many requests the window must hold before a
// model is throttled: a few failures of a quiet Client say little.
const routeMinRequests = 10

// routeSlowCost is the latency rule's bound: a model whose attempts are
// abandoned at their learned deadline (each sending the call on to
// another model: one more request) keeps the traffic whose abandoned
// attempts cost at most this many extra requests per request sent to it.
// A model that stalls on a share s of its requests keeps all of its
// traffic up to about s = routeSlowCost, at 1 + s requests a call: an
// oracle sends it the calls that do not stall, and a client that kept
// 0.9× the oracle's share of the answers must send it nearly every call.
// The brownout family draws stalls up to 30% of the requests, and what is
// counted slow runs above the stalls (answers later than the cut, the
// originals a hedge beat): at 0.2 its cells whose stalls reach 20–30% lost
// their primary's answers to the throttle (share ≥ 0.9× the oracle's in
// 85.0/83.5/87.5% of the cells of seeds 1/2/3, against 90.0/89.0/91.0 at
// 0.3), and with the cut budget paying for hedges that take a cut's place
// 0.3 fell to 90.0/91.0/89.5, 0.35 keeps 91.0/92.0/90.0 and 0.4
// 91.0/92.0/91.0. The price is fewer cells at ≤ 1.3 requests a call
// (69.0/71.0/71.0 at 0.2, 67.5/68.5/68.5 at 0.35: BENCHMARKS.md, Brownout
// family).
const routeSlowCost = 0.35

// routeWindow is the span requests and accepts are counted over, in
// routeBuckets slices.
const (
	routeWindow  = 30 * time.Second
	routeBuckets = 10
	routeSpan    = routeWindow / routeBuckets
)

// routeQuietWindow is how far back the throttle reads a quiet Client's
// requests (throttleTotals): when the last routeWindow holds fewer than
// routeMinRequests, it reads the spans before it, back to the one that
// makes routeMinRequests, up to this. Read over routeWindow alone, a
// Client sending fewer than a request every three seconds was never
// throttled: one user calling every 20 seconds, whose primary stalled on
// every request, paid a second request on every call for as long as it
// lasted. Ten requests in five minutes hold a client calling more often
// than every 30 seconds (TestThrottleActsAlikeAtEveryCallRate); the spans
// kept cost 40 bytes each.
const (
	routeQuietWindow = 5 * time.Minute
	routeRing        = int64(routeQuietWindow / routeSpan) // spans kept
)

// availability counts a model endpoint's requests and accepts over the last
// routeWindow (a quiet Client's over up to routeQuietWindow) in a ring of
// buckets, with atomic counters: recording is two
// atomic operations, and a bucket is cleared, under mu, by the first record
// of a new span. A record racing with that clearing may be lost or land in
// the new span: the counts are a routing estimate, not an audit. The
// window's totals of the spans before the current one are cached (past),
// until the next span or a record in one of those spans; a record of a past
// span racing with the caching may be missed by the cache until then. In a
// fleet (WithSharedState), the window also counts the other replicas'
// spans as they last shared them (setOthers), so that a replica seeing a
// share of the traffic throttles as one process seeing all of it would.
// Safe for concurrent use; create with newAvailability.
type availability struct {
	origin  time.Time // spans count from it
	mu      sync.Mutex
	buckets [routeRing]availabilityBucket
	past    atomic.Pointer[pastSpans] // nil until totals caches them
	pastGen atomic.Uint64             // bumped by a record of a span before past's current
	// others are the other replicas' spans (setOthers), nil until a
	// fleet's replica shares them; those before the epoch othersFrom are
	// not counted (recovered starts the window again for them too).
	others     atomic.Pointer[[]spanCounts]
	othersFrom atomic.Int64
	// closedSince reports whether the model's breaker is closed and since
	// when (nil: no breaker): a quiet Client's window reaches no further
	// back (throttleTotals). Set once, before use.
	closedSince func() (time.Time, bool)
}

// spanCounts are one span's counts: the span's epoch in the window that
// holds them, and its start.
type spanCounts struct {
	epoch                         int64
	start                         time.Time
	requests, accepts, slow, held int64
}

// counts returns the span's four counts in the order a fleet's record
// keeps them (throttleClass+0…3): requests, accepts, slow, held.
func (x *spanCounts) counts() [4]*int64 {
	return [4]*int64{&x.requests, &x.accepts, &x.slow, &x.held}
}

type availabilityBucket struct {
	epoch                         atomic.Int64 // the span it counts, +1 (0: never used)
	requests, accepts, slow, held atomic.Int64 // held: the requests the throttle kept back
}

// pastSpans are the window's totals of the spans before the current span
// (epoch), as of pastGen's gen: immutable once cached.
type pastSpans struct {
	epoch, requests, accepts, slow, held int64
	gen                                  uint64
}

func newAvailability() *availability {
	return &availability{origin: time.Now()}
}

// bucket returns the bucket of now, cleared if it held an older span, and
// its epoch.
func (a *availability) bucket(now time.Time) (*availabilityBucket, int64) {
	e := int64(now.Sub(a.origin)/routeSpan) + 1
	if e < 1 {
		e = 1 // a time before the origin counts in the first span
	}
	b := &a.buckets[e%routeRing]
	if b.epoch.Load() != e {
		a.mu.Lock()
		if b.epoch.Load() < e {
			b.reset()
			b.epoch.Store(e)
		}
		a.mu.Unlock()
	}
	return b, e
}

// Requests are counted when their outcome is known, so that a model whose
// answers take longer than the window is not judged on requests still in
// flight: an answer (answered), a failure that says the model is unwell
// (failed), an attempt abandoned at its learned deadline (slowed), a
// request the throttle kept back (kept: counted apart, so that the rules
// read the requests sent, and towards routeMinRequests). Outcomes that say
// nothing of the model (the caller cancelled, a quota answer) are not
// counted.

func (a *availability) answered(now time.Time) {
	b, e := a.bucket(now)
	b.requests.Add(1)
	b.accepts.Add(1)
	a.recorded(e)
}

func (a *availability) failed(now time.Time) {
	b, e := a.bucket(now)
	b.requests.Add(1)
	a.recorded(e)
}

func (a *availability) kept(now time.Time) {
	b, e := a.bucket(now)
	b.requests.Add(1)
	b.held.Add(1)
	a.recorded(e)
}

func (a *availability) slowed(now time.Time) {
	b, e := a.bucket(now)
	b.requests.Add(1)
	b.slow.Add(1)
	a.recorded(e)
}

// recovered is told at now that the model's breaker closed on the answers
// of its probes (already counted). When the window holds no other answer,
// its failures are the spell that opened the breaker, which the probes say
// is over: the window starts again from those answers, the other replicas'
// spans from the next.
func (a *availability) recovered(now time.Time, probes int) {
	if _, acc, _, _ := a.totals(now); acc > int64(probes) {
		return
	}
	a.mu.Lock()
	for i := range a.buckets {
		a.buckets[i].reset()
	}
	a.mu.Unlock()
	a.pastGen.Add(1)
	b, e := a.bucket(now)
	a.othersFrom.Store(e + 1)
	b.requests.Add(int64(probes))
	b.accepts.Add(int64(probes))
	a.recorded(e)
}

// reset zeroes the bucket's counts; callers hold the availability's mu.
func (b *availabilityBucket) reset() {
	b.requests.Store(0)
	b.accepts.Store(0)
	b.slow.Store(0)
	b.held.Store(0)
}

// recorded drops the cached totals of the past spans once a record, now
// counted, landed in one of them (span e).
func (a *availability) recorded(e int64) {
	if p := a.past.Load(); p != nil && e < p.epoch {
		a.pastGen.Add(1)
	}
}

// totals returns the requests, accepts, abandoned attempts and requests
// kept back of the window that ends at now: those of the current span,
// those of the spans before it, cached, and the other replicas'.
func (a *availability) totals(now time.Time) (requests, accepts, slow, held int64) {
	b, e := a.bucket(now)
	p := a.past.Load()
	if p == nil || p.epoch != e || p.gen != a.pastGen.Load() {
		p = a.cachePast(e)
	}
	requests, accepts, slow, held = p.requests, p.accepts, p.slow, p.held
	if b.epoch.Load() == e {
		requests += b.requests.Load()
		accepts += b.accepts.Load()
		slow += b.slow.Load()
		held += b.held.Load()
	}
	for _, x := range a.othersWindow(e) {
		requests += x.requests
		accepts += x.accepts
		slow += x.slow
		held += x.held
	}
	return requests, accepts, slow, held
}

// throttleTotals returns the totals the throttle reads at now: the
// window's (totals), and when they hold fewer than routeMinRequests, this
// Client's own spans before the window, newest first, until they do or
// routeQuietWindow is reached: a quiet Client's last requests. Only while
// the model's breaker is closed, and not the spans begun before it closed:
// what came before is the spell the breaker took the model out for, and a
// breaker not closed decides who goes to the model (its probes, or every
// call of a wave meeting the model together after a long silence). (The
// other replicas' spans, which a fleet shares for the window, are not
// read further back.)
func (a *availability) throttleTotals(now time.Time) (requests, accepts, slow, held int64) {
	requests, accepts, slow, held = a.totals(now)
	if requests >= routeMinRequests {
		return requests, accepts, slow, held
	}
	_, e := a.bucket(now)
	from := e - routeRing + 1
	if a.closedSince != nil {
		t, closed := a.closedSince()
		if !closed {
			return requests, accepts, slow, held
		}
		if !t.IsZero() {
			from = max(from, int64((t.Sub(a.origin)+routeSpan-1)/routeSpan)+1) // the first span begun at t or later
		}
	}
	for x := e - routeBuckets; x >= max(1, from) && requests < routeMinRequests; x-- {
		if b := &a.buckets[x%routeRing]; b.epoch.Load() == x {
			requests += b.requests.Load()
			accepts += b.accepts.Load()
			slow += b.slow.Load()
			held += b.held.Load()
		}
	}
	return requests, accepts, slow, held
}

// othersWindow returns the other replicas' spans (setOthers) that the
// window of span e counts: a window's worth up to the latest of them (none
// later than e), none older than two windows. A replica shares its
// spans on its round trips for the model, a few seconds apart or more when
// it sees a share of the traffic: its latest spans are as old as its last
// round trip, and a window that ended at e would miss the older ones.
func (a *availability) othersWindow(e int64) []spanCounts {
	o := a.others.Load()
	if o == nil || len(*o) == 0 {
		return nil
	}
	spans := *o // sorted by epoch
	hi := len(spans)
	for hi > 0 && spans[hi-1].epoch > e {
		hi--
	}
	if hi == 0 {
		return nil
	}
	from := max(spans[hi-1].epoch-routeBuckets+1, e-2*routeBuckets+1, a.othersFrom.Load())
	lo := hi
	for lo > 0 && spans[lo-1].epoch >= from {
		lo--
	}
	return spans[lo:hi]
}

// recent returns the requests sent (not kept back) and the slow ones of
// the span of now and the span before it, the other replicas' included:
// the last routeSpan or two, in which a brownout's first stalls are not
// yet diluted by the window.
func (a *availability) recent(now time.Time) (sent, slow int64) {
	_, e := a.bucket(now)
	for _, x := range [2]int64{e, e - 1} {
		if b := &a.buckets[x%routeRing]; x > 0 && b.epoch.Load() == x {
			sent += b.requests.Load() - b.held.Load()
			slow += b.slow.Load()
		}
	}
	for _, x := range a.othersWindow(e) {
		if x.epoch >= e-1 {
			sent += x.requests - x.held
			slow += x.slow
		}
	}
	return sent, slow
}

// spans returns the window's spans at now that hold a request, with their
// starts, for a fleet's other replicas (setOthers).
func (a *availability) spans(now time.Time) []spanCounts {
	_, e := a.bucket(now)
	var out []spanCounts
	for i := range a.buckets {
		b := &a.buckets[i]
		if be := b.epoch.Load(); be > e-routeBuckets && be <= e && b.requests.Load() > 0 {
			out = append(out, spanCounts{epoch: be, start: a.origin.Add(time.Duration(be-1) * routeSpan),
				requests: b.requests.Load(), accepts: b.accepts.Load(), slow: b.slow.Load(), held: b.held.Load()})
		}
	}
	return out
}

// setOthers replaces the other replicas' spans with spans, each counted in
// the span of this window nearest its start (replicas' spans begin at
// their own origins). It takes spans over.
func (a *availability) setOthers(spans []spanCounts) {
	for i := range spans {
		spans[i].epoch = int64(math.Round(float64(spans[i].start.Sub(a.origin))/float64(routeSpan))) + 1
	}
	slices.SortFunc(spans, func(x, y spanCounts) int { return cmp.Compare(x.epoch, y.epoch) })
	a.others.Store(&spans)
}

// cachePast sums the window's spans before span e, caches and returns them.
func (a *availability) cachePast(e int64) *pastSpans {
	p := &pastSpans{epoch: e, gen: a.pastGen.Load()} // the gen first: a record bumping it after is not missed
	for i := range a.buckets {
		b := &a.buckets[i]
		if be := b.epoch.Load(); be > e-routeBuckets && be < e {
			p.requests += b.requests.Load()
			p.accepts += b.accepts.Load()
			p.slow += b.slow.Load()
			p.held += b.held.Load()
		}
	}
	a.past.Store(p)
	return p
}

// rejectProbability returns the chance that a request at now is throttled,
// from the window's requests before it (throttleTotals: a quiet Client's
// reach further back): 0 below routeMinRequests. It is the
// larger of the failure rule 1 − routeK·answerRateBound(sent, accepts)
// and the latency rule
//
//	1 − routeSlowCost·sent/slow
//
// over the requests sent (not kept back) and those of them abandoned at
// their learned deadline or answered after it (slow): a model more of
// whose requests are slow than routeSlowCost keeps the traffic whose slow
// requests cost routeSlowCost extra requests per request sent. A stall
// costs the call the cut's wait and a request to another model; a failure
// (fast) costs the request only, and is the failure rule's, which keeps a
// degraded model's answers however many it fails.
//
// A silent model (its lifted cut tested and waited out unanswered:
// latency.Learner.LiftUnanswered) that answered none of the window's
// requests is throttled by the SRE book's rule over every request the
// calls asked of it, sent or kept back: asked ÷ (asked + 1). Nothing
// says it answers at all, and the rules above, read over the requests
// sent, keep sending it a share of the calls however long it is silent
// (ten users paid 1.20 requests a call for ten minutes, one user 1.39,
// each request the cut's wait). Its lifted cut's probe
// (latency.Learner.Probe) and the book's trickle find it answering again.
// It also returns the window's requests sent and accepts, for the record.
func (a *availability) rejectProbability(now time.Time, silent bool) (p float64, sent, accepts int64) {
	r, acc, slow, held := a.throttleTotals(now)
	sent = r - held
	switch {
	case r < routeMinRequests:
		return 0, sent, acc
	case silent && acc == 0:
		return float64(r) / float64(r+1), sent, acc
	}
	p = max(0, 1-routeK*answerRateBound(sent, acc))
	if slow > 0 {
		p = max(p, 1-routeSlowCost*float64(sent)/float64(slow))
	}
	return p, sent, acc
}

// unanswered reports whether the throttle's window at now (throttleTotals)
// holds requests and no answer.
func (a *availability) unanswered(now time.Time) bool {
	r, acc, _, _ := a.throttleTotals(now)
	return r > 0 && acc == 0
}

// answerRateBound returns the upper end of the one-sigma interval of the
// rate at which a model answered, from the accepts among the requests sent:
// Laplace's estimate (accepts+1)/(sent+2) plus its standard deviation. A
// window of a dozen requests from a model that answers a third of them
// holds two answers or fewer one time in five; read as the rate itself,
// that throttled it. With the bound, the throttle acts on a rate it is
// sure of: at a hundred requests or more, about the rate.
func answerRateBound(sent, accepts int64) float64 {
	q := answerRate(sent, accepts)
	return q + math.Sqrt(q*(1-q)/float64(sent+2))
}

// answerRate returns Laplace's estimate of the rate at which a model
// answered, from the accepts among the requests sent: (accepts+1)/(sent+2),
// one half for a model not tried.
func answerRate(sent, accepts int64) float64 {
	return float64(accepts+1) / float64(sent+2)
}

// throttledError says why a model was skipped without a request: it has
// answered too few of its recent requests. It matches ErrCircuitOpen.
type throttledError struct {
	Model              string
	Requests, Accepted int64
}

func (e *throttledError) Error() string {
	return fmt.Sprintf("geminiguard: model %s skipped: it answered %d of its last %d requests (adaptive throttling)", e.Model, e.Accepted, e.Requests)
}

// Is reports ErrCircuitOpen.
func (e *throttledError) Is(target error) bool { return target == ErrCircuitOpen }

// throttled reports whether the call skips m now (when it has another
// model to go to, with the probability above), with the error to record.
// While a request sent when m was unheard is still in flight, its answer
// may be on its way, later than its contemporaries' failures, and nothing
// is throttled; unless the cut lifted for m's slowness was tested and
// waited out unanswered (latency.Learner.LiftUnanswered): no answer is on
// its way that the lift could not have waited for. (Before, a model that
// stopped answering kept a request in flight for as long as calls came,
// each sent while it was unheard, and was never throttled: ten users paid
// 2.0 requests a call for ten minutes, each waiting the cut.)
func (call *call[R]) throttled(m *modelState) (bool, error) {
	av, now := m.routes[call.endpoint], call.now
	silent := m.lat.LiftUnanswered(call.class)
	p, sent, acc := av.rejectProbability(now, silent)
	if p == 0 || !call.hasNext(m) || call.c.jitter.float64() >= p || !silent && m.breakers[call.endpoint].awaiting(now) {
		return false, nil
	}
	av.kept(now)
	return true, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel},
		Err: &throttledError{Model: m.name, Requests: sent, Accepted: acc}}
}
