package geminiguard

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/genai"
)

// sharing is what the Client keeps to share GenerateContent answers between
// calls: the calls in flight that identical calls join (WithDedup), those
// that calls with the same idempotency key join, and the answers stored per
// idempotency key (idempotency.go). The zero value is ready to use.
type sharing struct {
	inflight flights // by request digest (WithDedup)
	keyed    flights // by idempotency key
	once     sync.Once
	answers  *lru.Cache[string, storedAnswer] // by idempotency key; built on first use
}

// digest fingerprints a request: its model and the JSON of its contents and
// config. It is a SHA-256, so two requests with the same digest are the same
// request: answers never mix.
type digest [sha256.Size]byte

// requestDigest returns the digest of a GenerateContent request; ok is false
// when contents or config does not marshal to JSON (then the call is not
// shared). The genai types marshal their fields in a fixed order, so equal
// requests have equal digests; two requests that differ only in how the JSON
// spells them (a nil versus an empty slice, an absent versus a zero optional
// field) are distinct requests here.
func requestDigest(model string, contents []*genai.Content, config *genai.GenerateContentConfig) (d digest, ok bool) {
	h := sha256.New()
	enc := json.NewEncoder(h) // each value is self-delimiting JSON, one per line
	for _, v := range []any{strings.TrimPrefix(model, "models/"), contents, config} {
		if enc.Encode(v) != nil {
			return d, false
		}
	}
	h.Sum(d[:0])
	return d, true
}

// flight is one GenerateContent call in flight that other calls wait for.
// Its fields resp, err, rec and panicked are written by the call before
// done is closed, and only read after.
type flight struct {
	digest   digest        // of the request it answers
	done     chan struct{} // closed once the call has returned
	resp     *genai.GenerateContentResponse
	err      error
	rec      CallRecord
	panicked any // what the call panicked with; nil when it returned

	// stoppable: the call stops when its last waiter leaves (WithDedup).
	// Otherwise (an idempotency key's) a request it sent finishes even
	// then, so that a retry of the key finds its answer, but it starts no
	// new attempt for nobody: it stops at its next wait (idle).
	stoppable bool
	mu        sync.Mutex           // guards waiters, stop, waits, attempts, queued and inner
	waiters   map[*waiter]struct{} // the callers waiting for the call
	stop      context.CancelFunc   // cancels the call; nil until it started
	waits     time.Time            // the end of the wait (backoff, pause, token wait) the call is in, if now is before it
	attempts  []Attempt            // the call's attempts when that wait began
	queued    *bulkhead            // the bulkhead whose queue the call waits in (sharedQueue); nil when none
	inner     *flight              // the flight the call waits for (a key's call sharing a call of WithDedup); nil when none
}

// waiter is a caller waiting for a flight. gone receives the flight's
// attempts so far when the flight is about to wait (a backoff, a pause, a
// token wait), or is found waiting, past the waiter's deadline: alone, the
// caller would have given up on its models by then (flightOf.waiting).
type waiter struct {
	deadline time.Time // zero: none
	gone     chan []Attempt
	// of is the flight the waiting call runs for, when it is itself a
	// shared call (a key's call waiting for a call of WithDedup): the
	// flight's waits are of's waits too. Zero when it runs for none.
	of flightOf
}

// flightKey names a flight: the bulkhead of the call that started it
// (Client.flightKey) and what the calls share (the request digest, or the
// idempotency key). A flight belongs to its bulkhead: a call of another
// bulkhead never joins it, so that it never waits in, nor is refused by, a
// bulkhead not its own.
type flightKey struct {
	bulkhead, key string
}

// flightKey returns the flight key of r's call sharing key: its bulkhead is
// the name its context carries (InBulkhead), else "default" when the
// Client has that bulkhead, else "" (none).
func (c *Client) flightKey(r *generateRequest, key string) flightKey {
	name := r.bulkhead
	if !r.named && c.bulkheads[defaultBulkhead] != nil {
		name = defaultBulkhead
	}
	return flightKey{bulkhead: name, key: key}
}

// flights are the calls in flight, by key. Safe for concurrent use; the zero
// value is empty.
//
// It is golang.org/x/sync/singleflight's DoChan, written out for what
// DoChan lacks: the joining call needs the request digest of the call in
// flight (a reused idempotency key), to know whether it started the call
// (its CallRecord), to leave it when its own deadline comes first, a call
// no caller waits for any more must stop (WithDedup), and a panic of the
// call (the SDK's, a hook's, the Fallback's) must reach the callers waiting
// for it, where DoChan's goroutine re-panics and ends the process.
type flights struct {
	mu sync.Mutex // guards m
	m  map[flightKey]*flight
}

// flightCtx is the context key of the flight a call runs for: a flightOf.
type flightCtx struct{}

// flightOf is a flight, its key and the flights it is in.
type flightOf struct {
	fs  *flights
	key flightKey
	f   *flight
}

// join returns the flight of key with w waiting for it, or starts one, with
// w its first waiter, that runs send on a goroutine of its own, on ctx's
// values (its bulkhead, its trace) without its cancellation nor its
// deadline, bounded by the call timeout instead; lead is true when it
// started it. A stoppable flight's call is cancelled when its last waiter
// leaves (leave). Once send returns (or panics), the flight leaves fs and
// its done closes: calls that join later start a new one. A w that joins
// a call in a wait past w's deadline is told at once, as if the call had
// just begun it; so are the waiters of the flight w's call runs for.
func (c *Client) join(ctx context.Context, fs *flights, key flightKey, d digest, w *waiter, stoppable bool, send func(context.Context, *flight) (*genai.GenerateContentResponse, error)) (f *flight, lead bool) {
	f, lead, until, attempts := c.joinLocked(ctx, fs, key, d, w, stoppable, send)
	if of := w.of.f; of != nil {
		of.mu.Lock()
		of.inner = f
		of.mu.Unlock()
		if !until.IsZero() {
			w.of.waiting(until, attempts)
		}
	}
	return f, lead
}

// joinLocked is join under fs.mu. For a w that joined a call in a wait, it
// also returns the end of the wait and the call's attempts then, having told
// w when its deadline comes first.
func (c *Client) joinLocked(ctx context.Context, fs *flights, key flightKey, d digest, w *waiter, stoppable bool, send func(context.Context, *flight) (*genai.GenerateContentResponse, error)) (f *flight, lead bool, until time.Time, attempts []Attempt) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f = fs.m[key]; f != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.waiters[w] = struct{}{}
		if time.Now().Before(f.waits) {
			until, attempts = f.waits, f.attempts
			w.tell(until, attempts)
		}
		return f, false, until, attempts
	}
	f = &flight{digest: d, done: make(chan struct{}), waiters: map[*waiter]struct{}{w: {}}, stoppable: stoppable}
	if fs.m == nil {
		fs.m = make(map[flightKey]*flight)
	}
	fs.m[key] = f
	go func() {
		defer func() {
			f.panicked = recover()
			fs.forget(key, f)
			close(f.done)
		}()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.callTimeout)
		defer cancel()
		f.mu.Lock()
		f.stop = cancel
		if stoppable && len(f.waiters) == 0 {
			cancel() // every waiter left before the call started
		}
		f.mu.Unlock()
		// The flight keeps its own CallRecord, never the caller's: the
		// caller may leave before the call ends.
		f.resp, f.err = send(context.WithValue(RecordCall(ctx, &f.rec), flightCtx{}, flightOf{fs, key, f}), f)
	}()
	return f, true, time.Time{}, nil
}

// forget removes f, the flight of key, from fs, if it is still there.
func (fs *flights) forget(key flightKey, f *flight) {
	fs.mu.Lock()
	if fs.m[key] == f {
		delete(fs.m, key)
	}
	fs.mu.Unlock()
}

// leave ends w's wait for f, the flight of key in fs: the last waiter of a
// flight still running stops its call when it is stoppable, or waits
// between two attempts or in its bulkhead's queue, having sent nothing yet
// (flight.stoppable). A stopped flight leaves fs at once, so that a call
// joining after it starts a new one rather than meet the cancellation.
func (fs *flights) leave(key flightKey, f *flight, w *waiter) {
	queued := f.queuedIn() != nil // read first: it locks the flights f waits for
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.waiters, w)
	if len(f.waiters) == 0 && (f.stoppable || queued || time.Now().Before(f.waits)) {
		fs.stopLocked(key, f)
	}
}

// queuedIn returns the bulkhead in whose queue f's call waits, itself or
// through the flight it waits for (flight.inner); nil when it waits in
// none.
func (f *flight) queuedIn() *bulkhead {
	for f != nil {
		f.mu.Lock()
		b, inner := f.queued, f.inner
		f.mu.Unlock()
		if b != nil {
			return b
		}
		f = inner
	}
	return nil
}

// stopLocked removes f, the flight of key, from fs and cancels its call.
// Called with fs.mu and f.mu held.
func (fs *flights) stopLocked(key flightKey, f *flight) {
	if fs.m[key] == f {
		delete(fs.m, key)
	}
	if f.stop != nil {
		f.stop()
	}
}

// sharedSleep tells the waiters of the flight that ctx runs for (none when
// it runs for none) that its call is about to wait until until, having
// made attempts (flightOf.waiting). call.sleep calls it before every wait
// of a call.
func sharedSleep(ctx context.Context, until time.Time, attempts []Attempt) {
	if fl, _ := ctx.Value(flightCtx{}).(flightOf); fl.f != nil {
		fl.waiting(until, slices.Clone(attempts))
	}
}

// waiting records that fl's call waits until until, having made attempts
// (which fl keeps: the caller gives up its slice), and tells the waiters
// whose deadline comes first: they stop waiting for it. A flight no caller
// waits for stops there. A waiter whose call is itself a shared call (a
// key's, waiting for a call of WithDedup) waits as long: its flight's
// waiters are told in turn.
func (fl flightOf) waiting(until time.Time, attempts []Attempt) {
	var outer []flightOf
	func() {
		fl.fs.mu.Lock()
		defer fl.fs.mu.Unlock()
		f := fl.f
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.waiters) == 0 {
			fl.fs.stopLocked(fl.key, f)
			return
		}
		f.waits, f.attempts = until, attempts
		for w := range f.waiters {
			w.tell(until, attempts)
			if w.of.f != nil {
				outer = append(outer, w.of)
			}
		}
	}()
	for _, o := range outer { // after unlocking: a flight's lock is never held while another's is taken
		o.waiting(until, attempts)
	}
}

// tell gives w the attempts of its flight, about to wait until until,
// when w's deadline comes first; at most once.
func (w *waiter) tell(until time.Time, attempts []Attempt) {
	if w.deadline.IsZero() || until.Before(w.deadline) {
		return
	}
	select {
	case w.gone <- attempts:
	default: // told already
	}
}

// sharedQueue records that the call of the flight ctx runs for, if any,
// waits in b's queue (nil: no longer): a waiter whose deadline passes
// meanwhile is refused as b would refuse it (await). A flight no caller
// waits for stops there. bulkhead.enter calls it around its queue's wait.
func sharedQueue(ctx context.Context, b *bulkhead) {
	fl, _ := ctx.Value(flightCtx{}).(flightOf)
	f := fl.f
	if f == nil {
		return
	}
	fl.fs.mu.Lock()
	defer fl.fs.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queued = b
	if b != nil && len(f.waiters) == 0 {
		fl.fs.stopLocked(fl.key, f)
	}
}

// newWaiter returns the waiter of the call of ctx.
func newWaiter(ctx context.Context) *waiter {
	w := &waiter{gone: make(chan []Attempt, 1)}
	w.deadline, _ = ctx.Deadline()
	w.of, _ = ctx.Value(flightCtx{}).(flightOf)
	return w
}

// generateDeduplicated joins the call in flight for the same request, or
// starts it; the call stops when no caller waits for it any more.
func (c *Client) generateDeduplicated(ctx context.Context, r *generateRequest) (*genai.GenerateContentResponse, error) {
	key, w := c.flightKey(r, string(r.digest[:])), newWaiter(ctx)
	rest := *r // the flight's own: r stays on the caller's stack
	f, lead := c.join(ctx, &c.shared.inflight, key, r.digest, w, true, func(ctx context.Context, _ *flight) (*genai.GenerateContentResponse, error) {
		return c.unary(ctx, &rest, wrapBulkhead)
	})
	defer c.shared.inflight.leave(key, f, w)
	return c.await(ctx, f, w, lead, func(rec *CallRecord) { rec.Deduplicated = true }, r)
}

// await waits for f and returns its answer: a copy of its response of its
// own, or its error (the same value for every caller). The caller's
// CallRecord is f's when lead; otherwise it names the model that answered
// and whether the Fallback did, with no attempts, tokens nor cost (the call
// sent nothing), and mark sets its flag. A panic of f's call goes on in the
// caller.
//
// A caller does not wait for f past what it would have waited alone, and
// gets what it would have got alone: when f's call waits, or is about to,
// past the caller's deadline (flightOf.waiting), the caller ends at once as
// a call alone whose models all failed would (giveUp); when its deadline
// passes while f's call waits in its bulkhead's queue (the caller's
// bulkhead: flightKey), the bulkhead refuses it (ErrBulkheadFull); when its
// context ends otherwise, it returns the context's error. Refused or
// ended, its CallRecord holds only the wait.
func (c *Client) await(ctx context.Context, f *flight, w *waiter, lead bool, mark func(*CallRecord), r *generateRequest) (*genai.GenerateContentResponse, error) {
	rec := callRecordFrom(ctx)
	select {
	case <-f.done:
	case attempts := <-w.gone:
		return c.giveUp(ctx, attempts, r)
	case <-ctx.Done():
		select {
		case attempts := <-w.gone: // told before its context ended
			return c.giveUp(ctx, attempts, r)
		default:
		}
		if rec != nil {
			*rec = CallRecord{Latency: time.Since(r.start), CostKnown: true}
			if !lead {
				mark(rec)
			}
		}
		err := ctx.Err()
		if b := f.queuedIn(); b != nil && errors.Is(err, context.DeadlineExceeded) {
			return nil, b.refuseAtDeadline(err)
		}
		return nil, err
	}
	if f.panicked != nil {
		panic(f.panicked)
	}
	if rec != nil {
		if lead {
			*rec = f.rec
			rec.Attempts = slices.Clone(f.rec.Attempts)
		} else {
			*rec = CallRecord{Model: f.rec.Model, Fallback: f.rec.Fallback, Latency: time.Since(r.start), CostKnown: true}
			mark(rec)
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return copyResponse(f.resp), nil
}

// giveUp ends a call that stopped waiting for its shared call, which made
// attempts, as the call alone would have ended once every model failed:
// with the answer cache's answer (WithAnswerCache), the Fallback's, or a
// *CascadeError holding the shared call's attempts so far. It is counted
// in Stats as a call of its own.
func (c *Client) giveUp(ctx context.Context, attempts []Attempt, r *generateRequest) (*genai.GenerateContentResponse, error) {
	call := c.newGenerateCall(ctx, r.model, r.contents, r.config)
	call.start = r.start
	call.attempts = append(call.attempts, attempts...)
	c.stats.calls.Add(1)
	defer call.recordUnfinished()
	return call.finish(ctx, nil, nil, nil)
}

// copyResponse returns a copy of resp's top-level struct: a caller that sets
// its fields (ModelVersion, ...) does not change another caller's. The
// values it points to (Candidates, UsageMetadata, ...) are shared.
func copyResponse(resp *genai.GenerateContentResponse) *genai.GenerateContentResponse {
	if resp == nil {
		return nil
	}
	cp := *resp
	return &cp
}
