package geminiguard

import (
	"context"
	"crypto/sha256"
	"encoding/json"
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
// Its fields other than digest and done are written by the call before done
// is closed, and only read after.
type flight struct {
	digest   digest        // of the request it answers
	done     chan struct{} // closed once the call has returned
	resp     *genai.GenerateContentResponse
	err      error
	rec      CallRecord
	panicked any // what the call panicked with; nil when it returned
}

// flightKey names a flight: the bulkhead of the call that started it
// (Client.flightKey) and what the calls share (the request digest, or the
// idempotency key). A flight belongs to its bulkhead: a call of another
// bulkhead never joins it, so that it never waits in, nor is refused by, a
// bulkhead not its own.
type flightKey struct {
	bulkhead, key string
}

// flightKey returns the flight key of the call of ctx sharing key: its
// bulkhead is the name its context carries (WithBulkheadName), else
// "default" when the Client has that bulkhead, else "" (none).
func (c *Client) flightKey(ctx context.Context, key string) flightKey {
	name, named := ctx.Value(bulkheadKey{}).(string)
	if !named && c.bulkheads[defaultBulkhead] != nil {
		name = defaultBulkhead
	}
	return flightKey{bulkhead: name, key: key}
}

// flights are the calls in flight, by key. Safe for concurrent use; the zero
// value is empty.
//
// It is golang.org/x/sync/singleflight's DoChan, written out for three
// things DoChan lacks: the joining call needs the request digest of the call
// in flight (a reused idempotency key), to know whether it started the call
// (its CallRecord), and a panic of the call (the SDK's, a hook's, the
// Fallback's) must reach the callers waiting for it, where DoChan's
// goroutine re-panics and ends the process.
type flights struct {
	mu sync.Mutex // guards m
	m  map[flightKey]*flight
}

// join returns the flight of key, or starts one that runs run on a goroutine
// of its own; lead is true when it started it. Once run returns (or panics),
// the flight leaves fs and its done closes: calls that join later start a
// new one.
func (fs *flights) join(key flightKey, d digest, run func(*flight)) (f *flight, lead bool) {
	fs.mu.Lock()
	if f = fs.m[key]; f != nil {
		fs.mu.Unlock()
		return f, false
	}
	f = &flight{digest: d, done: make(chan struct{})}
	if fs.m == nil {
		fs.m = make(map[flightKey]*flight)
	}
	fs.m[key] = f
	fs.mu.Unlock()
	go func() {
		defer func() {
			f.panicked = recover()
			fs.mu.Lock()
			delete(fs.m, key)
			fs.mu.Unlock()
			close(f.done)
		}()
		run(f)
	}()
	return f, true
}

// generateShared answers a GenerateContent call that may share its answer:
// one with an idempotency key (WithIdempotencyKey), or any call under
// WithDedup. A request without a digest is sent on its own.
func (c *Client) generateShared(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	start := time.Now()
	d, ok := requestDigest(model, contents, config)
	if !ok {
		return c.generate(ctx, model, contents, config)
	}
	if key := idempotencyKeyFrom(ctx); key != "" {
		return c.generateIdempotent(ctx, start, key, d, model, contents, config)
	}
	return c.generateDeduplicated(ctx, start, d, model, contents, config)
}

// generateDeduplicated joins the call in flight for the same request, or
// starts it.
func (c *Client) generateDeduplicated(ctx context.Context, start time.Time, d digest, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	f, lead := c.shared.inflight.join(c.flightKey(ctx, string(d[:])), d, c.detached(ctx, func(ctx context.Context) (*genai.GenerateContentResponse, error) {
		return c.generate(ctx, model, contents, config)
	}))
	return await(ctx, start, f, lead, func(rec *CallRecord) { rec.Deduplicated = true })
}

// detached returns the run of a flight started by the call of ctx: send,
// on a context that keeps ctx's values (its bulkhead, its trace) but not its
// cancellation nor its deadline, bounded by the call timeout instead, so
// that the callers waiting for it do not depend on the one that started it.
// The flight keeps its own CallRecord, never the caller's: the caller may
// have left before the call ends.
func (c *Client) detached(ctx context.Context, send func(context.Context) (*genai.GenerateContentResponse, error)) func(*flight) {
	return func(f *flight) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.callTimeout)
		defer cancel()
		f.resp, f.err = send(WithCallRecord(ctx, &f.rec))
	}
}

// await waits for f, or for the end of ctx (then it returns ctx's error and
// leaves f running, and the caller's CallRecord holds only the wait), and
// returns f's answer: a copy of its response of its
// own, or its error (the same value for every caller). The caller's
// CallRecord is f's when lead; otherwise it names the model that answered
// and whether the Fallback did, with no attempts, tokens nor cost (the call
// sent nothing), and mark sets its flag. A panic of f's call goes on in the
// caller.
func await(ctx context.Context, start time.Time, f *flight, lead bool, mark func(*CallRecord)) (*genai.GenerateContentResponse, error) {
	rec := callRecordFrom(ctx)
	select {
	case <-f.done:
	case <-ctx.Done():
		if rec != nil {
			*rec = CallRecord{Latency: time.Since(start), CostKnown: true}
			if !lead {
				mark(rec)
			}
		}
		return nil, ctx.Err()
	}
	if f.panicked != nil {
		panic(f.panicked)
	}
	if rec != nil {
		if lead {
			*rec = f.rec
			rec.Attempts = slices.Clone(f.rec.Attempts)
		} else {
			*rec = CallRecord{Model: f.rec.Model, Fallback: f.rec.Fallback, Latency: time.Since(start), CostKnown: true}
			mark(rec)
		}
	}
	if f.err != nil {
		return nil, f.err
	}
	return copyResponse(f.resp), nil
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
