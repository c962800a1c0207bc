package geminiguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
)

// idempotencyKeys bounds how many answers a Client stores for idempotency
// keys: past it, the least recently used is forgotten first.
const idempotencyKeys = 4096

// defaultIdempotencyTTL is how long an answer stays stored by default.
const defaultIdempotencyTTL = 10 * time.Minute

type idempotencyKey struct{}

// Idempotent returns a context that makes GenerateContent, called
// with it, answer at most once per key: a call with a key whose call
// already succeeded (within WithIdempotencyTTL) gets that call's answer
// again without sending anything, and one whose call is still in flight
// in the same bulkhead (InBulkhead) waits for it; a call of another
// bulkhead sends its own, so that no feature waits in, or is refused by,
// another's bulkhead. So a caller that retries after its own timeout, or after
// losing the answer, does not pay twice. key "" means no key.
//
// Such an answer (a replay) is a copy of the stored response's top-level
// struct: the values it points to (Candidates, ...) are shared with the
// first answer and every other replay, so treat them as read-only. The
// replay's CallRecord has Replayed set, the model that answered, and no
// attempts, tokens nor cost; it is not counted in Stats nor in metrics.
//
// The call of a key keeps the values of its caller's context (its
// bulkhead, its trace), not its cancellation nor its deadline, within the
// call timeout of WithTimeouts; a caller waits for it as under WithDedup
// (never longer than it would alone: its deadline coming first, it gets
// the answer cache's answer, the Fallback's or a typed error). A request
// the call sent finishes even when no caller waits any more, so that a
// retry can find its answer; but a call no caller waits for starts no new
// attempt: it stops at its next wait (a backoff, a pause, its bulkhead's
// queue). Only answers from a model
// are stored: neither errors nor the Fallback's answer, so a retry after a
// failure tries again.
//
// A key is bound to its request (model, contents and config, compared by a
// SHA-256 of their JSON): a call with a key stored or in flight for a
// different request fails, sending nothing, with an error that Classify
// reads as ClassBadRequest. Keys are kept in memory, per Client, for the
// 4096 most recently used keys; with WithSharedState on a store that keeps
// answers (a [fleet.AnswerStore]: redisstore's, [fleet.NewMemoryState]'s), a key's answer
// is also kept there, for the project, so that the key replayed on any
// replica gets it (sending nothing) and reused for a different request
// fails on any replica. Only stored answers are shared: a replay on another
// replica while the first call is still in flight sends its own call. The
// store costs a call with a key a round trip before it sends (when this
// Client has no answer for the key) and one after a model answered, each
// bounded like every call to the store; a store that fails or is slow is
// skipped, the key then kept by this Client alone. Streams
// (GenerateContentStream) ignore the key.
func Idempotent(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, idempotencyKey{}, key)
}

func idempotencyKeyFrom(ctx context.Context) string {
	key, _ := ctx.Value(idempotencyKey{}).(string)
	return key
}

// storedAnswer is a model's answer to the request of an idempotency key.
type storedAnswer struct {
	digest  digest
	resp    *genai.GenerateContentResponse
	model   string    // the model that answered (CallRecord.Model)
	expires time.Time // replays end then
}

// errKeyReused is returned for a call whose idempotency key belongs to a
// different request.
func errKeyReused() error {
	return &requestError{
		where: "the idempotency key (Idempotent)",
		what:  "was reused for a different request (model, contents or config)",
		fix:   "give each distinct request its own key, and reuse a key only to retry the same request",
	}
}

// stored returns the Client's idempotency answers, building them on first
// use.
func (c *Client) stored() *lru.Cache[string, storedAnswer] {
	c.shared.once.Do(func() {
		c.shared.answers, _ = lru.New[string, storedAnswer](idempotencyKeys) // fails only for a size below 1
	})
	return c.shared.answers
}

// generateIdempotent answers a call with an idempotency key: from the
// stored answer of the key, from its call in flight, or from a new call
// whose answer is stored.
func (c *Client) generateIdempotent(ctx context.Context, key string, r *generateRequest) (*genai.GenerateContentResponse, error) {
	start, d := r.start, r.digest
	answers := c.stored()
	if a, ok := answers.Get(key); ok {
		switch {
		case !time.Now().Before(a.expires):
			// Expired: the call below is a new one, whose answer replaces
			// it (not removed here: a concurrent call may have stored it).
		case a.digest != d:
			return nil, errKeyReused()
		default:
			if rec := callRecordFrom(ctx); rec != nil {
				*rec = CallRecord{Model: a.model, Latency: time.Since(start), CostKnown: true, Replayed: true}
			}
			return copyResponse(a.resp), nil
		}
	}
	fk, w := c.flightKey(r, key), newWaiter(ctx)
	rest := *r // the flight's own: r stays on the caller's stack
	f, lead := c.join(ctx, &c.shared.keyed, fk, d, w, false, func(ctx context.Context, _ *flight) (*genai.GenerateContentResponse, error) {
		if a, ok := c.loadAnswer(ctx, key); ok {
			// Another replica's answer (WithSharedState): kept here too.
			if a.digest != d {
				return nil, errKeyReused()
			}
			answers.Add(key, a)
			*callRecordFrom(ctx) = CallRecord{Model: a.model, Latency: time.Since(start), CostKnown: true, Replayed: true}
			return a.resp, nil
		}
		rest.start = time.Now()
		resp, err := c.unary(ctx, &rest, wrapDedupe)
		if err == nil && !IsFallback(resp) {
			// Stored before the flight ends: a call after it finds the answer.
			a := storedAnswer{digest: d, resp: resp, model: callRecordFrom(ctx).Model, expires: time.Now().Add(c.cfg.idempotencyTTL)}
			answers.Add(key, a)
			c.storeAnswer(ctx, key, a)
		}
		return resp, err
	})
	defer c.shared.keyed.leave(fk, f, w)
	if f.digest != d {
		return nil, errKeyReused()
	}
	return c.await(ctx, f, w, lead, func(rec *CallRecord) { rec.Replayed = true }, r)
}

// wireAnswer is a storedAnswer as an AnswerStore keeps it.
type wireAnswer struct {
	Digest   []byte                         `json:"d"`
	Model    string                         `json:"m"`
	Expires  int64                          `json:"x"` // unix milliseconds
	Response *genai.GenerateContentResponse `json:"r"`
}

// answerStore returns the fleet's AnswerStore, nil when the Client has no
// shared state or its state keeps no answers.
func (c *Client) answerStore() fleet.AnswerStore {
	if c.fleet == nil {
		return nil
	}
	s, _ := c.fleet.store.(fleet.AnswerStore)
	return s
}

// storeKey returns the key under which an AnswerStore keeps the answer of
// an idempotency key: a hex SHA-256 of it, so that no caller's key reaches
// the store.
func storeKey(key string) string {
	h := sha256.Sum256([]byte("geminiguard idempotency\x00" + key))
	return hex.EncodeToString(h[:])
}

// storeAnswer keeps a in the fleet's AnswerStore, if any; a failure only
// leaves a with this Client.
func (c *Client) storeAnswer(ctx context.Context, key string, a storedAnswer) {
	s := c.answerStore()
	if s == nil {
		return
	}
	b, err := json.Marshal(wireAnswer{Digest: a.digest[:], Model: a.model, Expires: a.expires.UnixMilli(), Response: a.resp})
	if err != nil {
		return
	}
	c.fleet.call(ctx, c, func(ctx context.Context) error {
		return s.StoreAnswer(ctx, c.fleet.project, storeKey(key), b, c.cfg.idempotencyTTL)
	})
}

// loadAnswer returns the answer the fleet's AnswerStore keeps for key, if
// any and not expired; false when there is none, or no store, or the store
// failed.
func (c *Client) loadAnswer(ctx context.Context, key string) (storedAnswer, bool) {
	s := c.answerStore()
	if s == nil {
		return storedAnswer{}, false
	}
	var b []byte
	if !c.fleet.call(ctx, c, func(ctx context.Context) (err error) {
		b, err = s.LoadAnswer(ctx, c.fleet.project, storeKey(key))
		return err
	}) || b == nil {
		return storedAnswer{}, false
	}
	var w wireAnswer
	if json.Unmarshal(b, &w) != nil || len(w.Digest) != len(digest{}) || w.Response == nil {
		return storedAnswer{}, false
	}
	a := storedAnswer{resp: w.Response, model: w.Model, expires: time.UnixMilli(w.Expires)}
	copy(a.digest[:], w.Digest)
	if !time.Now().Before(a.expires) {
		return storedAnswer{}, false
	}
	return a, true
}
