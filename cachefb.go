package geminiguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"google.golang.org/genai"
)

// AnswerCache stores recent good answers for WithAnswerCache, by a key the
// Client computes (see WithAnswerCache). It is an
// interface so that a store shared between processes can stand in for the
// in-memory NewAnswerCache: redisstore.NewAnswerCache keeps it on Redis,
// for every replica of a service. Its methods must be safe for concurrent
// use, and must return promptly whatever the store's health (the Client
// calls Put after each answered call and Get when every model failed):
// bound each round trip and honour ctx.
//
// Put stores resp under key; it must not keep resp nor any value resp points
// to (the caller owns and may change them): store a copy, e.g. its JSON. Put
// cannot fail: a store that cannot write drops the answer. Get returns the
// answer stored under key and true, or nil and false when there is none (or
// it expired, or the store cannot be read); the response it returns belongs
// to the caller, who may change it.
type AnswerCache interface {
	Get(ctx context.Context, key string) (*genai.GenerateContentResponse, bool)
	Put(ctx context.Context, key string, resp *genai.GenerateContentResponse)
}

// Defaults of NewAnswerCache.
const (
	defaultAnswerCacheSize = 1024
	defaultAnswerCacheTTL  = 10 * time.Minute
)

// NewAnswerCache returns an in-memory AnswerCache that holds at most size
// answers, forgetting the least recently used first, each for ttl after it
// was stored. size < 1 means 1024; ttl <= 0 means 10 minutes. It stores
// answers as JSON: Put copies, Get returns a response of the caller's own.
// The bound counts answers, not bytes. It starts no goroutine: an expired
// answer is dropped when it is next read, or evicted by newer ones.
func NewAnswerCache(size int, ttl time.Duration) AnswerCache {
	if size < 1 {
		size = defaultAnswerCacheSize
	}
	if ttl <= 0 {
		ttl = defaultAnswerCacheTTL
	}
	lru, _ := simplelru.NewLRU[string, memoryEntry](size, nil) // fails only for a size below 1
	return &memoryCache{lru: lru, ttl: ttl, asked: newAsked(askedPerAnswer * size)}
}

// memoryCache is NewAnswerCache's AnswerCache.
type memoryCache struct {
	mu    sync.Mutex
	lru   *simplelru.LRU[string, memoryEntry]
	ttl   time.Duration
	asked *asked // the requests it was asked (FrequentRequests)
}

// memoryEntry is one answer of a memoryCache: its JSON, until expires.
type memoryEntry struct {
	json    []byte
	expires time.Time
}

func (m *memoryCache) Get(_ context.Context, key string) (*genai.GenerateContentResponse, bool) {
	m.mu.Lock()
	a, ok := m.lru.Get(key)
	if ok && !time.Now().Before(a.expires) {
		m.lru.Remove(key)
		ok = false
	}
	m.mu.Unlock()
	if !ok {
		return nil, false
	}
	resp := new(genai.GenerateContentResponse)
	if json.Unmarshal(a.json, resp) != nil {
		return nil, false
	}
	return resp, true
}

func (m *memoryCache) Put(_ context.Context, key string, resp *genai.GenerateContentResponse) {
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	m.mu.Lock()
	m.lru.Add(key, memoryEntry{json: b, expires: time.Now().Add(m.ttl)})
	m.mu.Unlock()
}

// versionSuffix matches what modelFamily strips from a model name: a final
// "-latest" or three-digit version ("-001"), or "-preview" and all that
// follows it ("-preview-05-20").
var versionSuffix = regexp.MustCompile(`-(latest|[0-9]{3}|preview(-.*)?)$`)

// modelFamily returns the family of a model name, what WithAnswerCache keys
// answers by: the name without "models/" and without a version suffix (see
// versionSuffix), e.g. "models/gemini-2.0-flash-001" and
// "gemini-2.0-flash" are both "gemini-2.0-flash".
func modelFamily(model string) string {
	return versionSuffix.ReplaceAllString(strings.TrimPrefix(model, "models/"), "")
}

// answerKey returns the AnswerCache key of a GenerateContent request whose
// first choice is model (the cascade's primary when ""): its model family,
// ":", and the hex SHA-256 of the Client's project (projectOf: a hash of
// WithProject's id or of the key) and of the request's digest (the family,
// contents and config: requestDigest), so that Clients of different
// projects sharing a cache share no answers, and no key can be computed,
// nor an answer planted under it, from the request alone. ok is false when
// contents or config does not marshal to JSON: such a request is neither
// cached nor answered from the cache.
func (c *Client) answerKey(model string, contents []*genai.Content, config *genai.GenerateContentConfig) (key string, ok bool) {
	if strings.TrimPrefix(model, "models/") == "" {
		model = c.cascade[0]
	}
	family := modelFamily(model)
	d, ok := requestDigest(family, contents, config)
	if !ok {
		return "", false
	}
	h := sha256.New()
	h.Write([]byte("geminiguard answer\x00" + c.projectID + "\x00"))
	h.Write(d[:])
	return family + ":" + hex.EncodeToString(h.Sum(nil)), true
}

// requestCache is an AnswerCache that reads the request too
// (SemanticCache): the Client calls store and lookup in place of Put and
// Get, with itself for the requests they make.
type requestCache interface {
	store(ctx context.Context, c *Client, key string, req cacheRequest, resp *genai.GenerateContentResponse)
	lookup(ctx context.Context, c *Client, key string, req cacheRequest) (*genai.GenerateContentResponse, CacheHit, bool)
}

// cacheAnswer puts a model's answer to a unary GenerateContent call into the
// answer cache (WithAnswerCache); never a Fallback's answer.
func (c *Client) cacheAnswer(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig, resp *genai.GenerateContentResponse) {
	if resp == nil || IsFallback(resp) {
		return
	}
	if key, ok := c.answerKey(model, contents, config); ok {
		c.countAsked(ctx, key, model, contents, config)
		if rc, ok := c.cfg.answers.(requestCache); ok {
			rc.store(ctx, c, key, c.cacheRequest(model, contents, config), resp)
			return
		}
		c.cfg.answers.Put(ctx, key, resp)
	}
}

// cachedAnswer returns the answer cache's answer to a call whose every model
// failed and the entry that gave it, nil when it has none.
func (c *Client) cachedAnswer(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, CacheHit) {
	key, ok := c.answerKey(model, contents, config)
	if !ok {
		return nil, CacheHit{}
	}
	c.countAsked(ctx, key, model, contents, config)
	if rc, ok := c.cfg.answers.(requestCache); ok {
		resp, hit, ok := rc.lookup(ctx, c, key, c.cacheRequest(model, contents, config))
		if !ok || resp == nil {
			c.stats.cacheMisses.Add(1)
			return nil, CacheHit{}
		}
		c.stats.cacheHit(hit.Kind)
		return resp, hit
	}
	if resp, ok := c.cfg.answers.Get(ctx, key); ok && resp != nil {
		c.stats.cacheHit(CacheExact)
		return resp, CacheHit{Kind: CacheExact, Entry: key, Similarity: 1}
	}
	c.stats.cacheMisses.Add(1)
	return nil, CacheHit{}
}

// cacheRequest is the request of a GenerateContent call as a requestCache
// reads it.
func (c *Client) cacheRequest(model string, contents []*genai.Content, config *genai.GenerateContentConfig) cacheRequest {
	if strings.TrimPrefix(model, "models/") == "" {
		model = c.cascade[0]
	}
	return cacheRequest{family: modelFamily(model), contents: contents, config: config}
}
