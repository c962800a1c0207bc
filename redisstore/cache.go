package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
)

// Tunables of NewAnswerCache's cache, variables for tests.
var (
	// cacheTimeout bounds each round trip of the cache: a slow Redis costs
	// a call at most this.
	cacheTimeout = 30 * time.Millisecond
	// cacheQuiet is how long the cache leaves Redis alone after a round
	// trip failed or timed out: Get misses and Put drops at once.
	cacheQuiet = time.Second
)

// defaultCacheTTL is NewAnswerCache's TTL when given none, as
// geminiguard.NewAnswerCache's.
const defaultCacheTTL = 10 * time.Minute

// NewAnswerCache returns a geminiguard.AnswerCache (for
// geminiguard.WithAnswerCache) kept in rdb, so that every replica of a
// service answers from the answers any replica stored, when every model
// failed. It is a function of its own, not a Store method, because it needs
// no fleet mode: a Client without WithSharedState may use it. opts are the
// Store's (WithPrefix). The cache never closes rdb; it is safe for
// concurrent use.
//
// Each answer is the JSON of the response under prefix:cache:<key> (key is
// the Client's: a model family and a SHA-256 of the Client's project hash
// and the request, never a prompt nor an API key), expiring ttl after it
// was stored (SET PX); ttl <= 0 means 10 minutes. There is no size bound
// beyond Redis's own: give the server a maxmemory policy (allkeys-lru,
// volatile-ttl) if the cache may outgrow it. Answers are scoped by
// project (geminiguard.WithProject, else a hash of the API key): Clients of
// different projects that share rdb share no answers, and a key cannot be
// computed from a request without the project's hash.
//
// The cache is a last resort, so it never fails nor slows a call: Get is
// one GET and Put one SET, each bounded by 30 ms and by ctx; an error or a
// timeout makes Get miss and Put drop the answer, and the cache then
// leaves Redis alone for a second. Give rdb ContextTimeoutEnabled (see
// New); without it the cache still returns at its deadline, the command
// finishing in the background.
func NewAnswerCache(rdb redis.UniversalClient, ttl time.Duration, opts ...Option) geminiguard.AnswerCache {
	if ttl <= 0 {
		ttl = defaultCacheTTL
	}
	return &answerCache{s: New(rdb, opts...), ttl: ttl}
}

// answerCache is NewAnswerCache's cache.
type answerCache struct {
	s     *Store // rdb, prefix and how rdb treats contexts; none of its methods
	ttl   time.Duration
	quiet atomic.Int64 // unix nanoseconds until which Redis is left alone
}

func (a *answerCache) Get(ctx context.Context, key string) (*genai.GenerateContentResponse, bool) {
	var b []byte
	if !a.do(ctx, func(ctx context.Context) (err error) {
		b, err = a.s.rdb.Get(ctx, a.s.prefix+":cache:"+key).Bytes()
		return err
	}) {
		return nil, false
	}
	resp := new(genai.GenerateContentResponse)
	if json.Unmarshal(b, resp) != nil {
		return nil, false
	}
	return resp, true
}

func (a *answerCache) Put(ctx context.Context, key string, resp *genai.GenerateContentResponse) {
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	a.do(ctx, func(ctx context.Context) error {
		return a.s.rdb.Do(ctx, "SET", a.s.prefix+":cache:"+key, b, "PX", max(ceilMillis(a.ttl), 1)).Err()
	})
}

// do runs one round trip, bounded by cacheTimeout and ctx, unless Redis is
// being left alone; it reports whether the round trip succeeded. A failure
// that is not ctx's (nor a missing key) leaves Redis alone for cacheQuiet.
func (a *answerCache) do(ctx context.Context, fn func(context.Context) error) bool {
	if ctx.Err() != nil || time.Now().UnixNano() < a.quiet.Load() {
		return false
	}
	rctx, cancel := context.WithTimeout(ctx, cacheTimeout)
	defer cancel()
	_, err := await(rctx, a.s.watchesCtx, func() (struct{}, error) { return struct{}{}, fn(rctx) })
	switch {
	case err == nil:
		return true
	case errors.Is(err, redis.Nil), ctx.Err() != nil:
	default:
		a.quiet.Store(time.Now().Add(cacheQuiet).UnixNano())
	}
	return false
}
