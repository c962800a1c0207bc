package geminiguard

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
)

// CacheKind says how an answer cache matched a request (CacheHit.Kind).
type CacheKind string

// The kinds of CacheHit.
const (
	CacheExact    CacheKind = "exact"    // the same request: family, contents and config
	CacheTemplate CacheKind = "template" // the same template of the text (SemanticCacheConfig.Template), family and config
	CacheSemantic CacheKind = "semantic" // a text whose embedding is at least the threshold similar, same family and config
)

// CacheHit is the answer cache's entry that answered a call whose every
// model failed (CallRecord.Cache): how it matched, the entry's key (the
// exact key of the request that filled it, see WithAnswerCache), and the
// cosine similarity of the two texts' embeddings (1 for exact and template
// matches). Its zero value means no cache answered.
type CacheHit struct {
	Kind       CacheKind
	Entry      string
	Similarity float64
}

// Defaults of NewSemanticCache.
const defaultSemanticThreshold = 0.95

// SemanticCacheConfig configures NewSemanticCache. Zero fields mean the
// default written next to them.
type SemanticCacheConfig struct {
	// EmbeddingModel embeds the requests' text, e.g. "gemini-embedding-001",
	// through the Client's own chain (EmbedContent: its limits, breaker and
	// retries). Empty: no semantic matching, only exact and template ones.
	EmbeddingModel string
	// Dimensions is the embeddings' outputDimensionality; 0 is the model's
	// default. Fewer dimensions make a lookup cheaper (see SemanticCache).
	Dimensions int32
	// Threshold is the least cosine similarity served, in (0, 1].
	// Default 0.95.
	Threshold float64
	// Size bounds the entries (least recently used forgotten first);
	// default 1024. TTL is each entry's life after it was stored; default
	// 10 minutes.
	Size int
	TTL  time.Duration
	// Template, when set, maps a request's text to its template (say,
	// "Tell me about product {X}" for "Tell me about product 42"): a
	// request whose template is an entry's answers from it, under the same
	// family and config. The answer is then the one given for another value
	// of the slot: use it where that beats an error. It must be safe for
	// concurrent use and quick.
	Template func(text string) string
}

// SemanticCache is an AnswerCache (for WithAnswerCache) that also answers a
// request worded differently from one it holds: by its template, when
// SemanticCacheConfig.Template is set, or by the cosine similarity of the
// embeddings of the two texts. When every model of a call failed, it
// matches exact first (the same key as NewAnswerCache's), then template,
// then semantic (the most similar entry at or above the threshold), always
// among the entries of the same model family and config as the call. Only
// requests whose contents are all text are matched by template or
// similarity; the text is every content's role and text, in order, so a
// chat's history is part of it.
//
// Used through WithAnswerCache, the Client fills it with answers as the
// exact cache (whole answers only: no Fallback's, blocked, empty or cut
// short one) and embeds each answered request's text then, one request to
// the embedding model per stored answer; a lookup embeds the failed call's
// text (an embedding that fails is a miss). Those requests go through the
// Client's chain with the caller's context, outside the call's CallRecord.
//
// A lookup is a flat scan of the entries of the call's family and config:
// O(n·d) for n entries of d dimensions, under the cache's lock, paid only
// when every model failed (BenchmarkSemanticLookup, 768 dimensions, on a
// shared 2-core machine: about 20 ms at 10,000 entries, 0.3 s at 100,000).
// Each entry holds its vector: 4·d bytes (3 KB at 768 dimensions). Keep Size
// in the thousands, or set Dimensions lower, for a quick lookup.
//
// With a fleet (WithSharedState on a store that is a fleet.VectorStore:
// redisstore's, fleet.NewMemoryState's), the entries are the fleet's: each
// stored answer is also added to the store under the project's hash and the
// entry's family and config digest (its vector, template digest, exact key
// and answer; never the text), and a lookup first reads the entries other
// replicas added to that scope since its last read (at most
// fleet.VectorsPerRead a lookup). Each is one round trip, bounded and
// skipped as every call to the store is (see WithSharedState): a store
// down or slow fails no call, the cache then matching among its own
// entries.
//
// Get and Put are the exact cache's, by key (Put stores no text: its entry
// matches exactly only, and is not shared). A SemanticCache is safe for
// concurrent use and may serve several Clients (it then reads each
// project's entries); its zero value is not usable, use NewSemanticCache.
type SemanticCache struct {
	cfg SemanticCacheConfig

	mu        sync.Mutex
	lru       *simplelru.LRU[string, *semEntry]
	scopes    map[string]map[*semEntry]struct{} // entries with a vector, by scope
	templates map[string]*semEntry              // by scope and template digest
	marks     *simplelru.LRU[string, string]    // project and scope → the VectorStore's mark of the last entry read
	asked     *asked                            // the requests it was asked (FrequentRequests)
}

// semEntry is one answer of a SemanticCache.
type semEntry struct {
	key      string    // the exact key
	scope    string    // family and config digest; "" for an exact-only entry (Put)
	template string    // the scope, "\x00" and the template's digest (templateDigest); "" for none
	vec      []float32 // the text's embedding, normalised; nil for none
	json     []byte
	expires  time.Time
}

// NewSemanticCache returns an empty SemanticCache configured by cfg.
func NewSemanticCache(cfg SemanticCacheConfig) *SemanticCache {
	if cfg.Threshold <= 0 || cfg.Threshold > 1 {
		cfg.Threshold = defaultSemanticThreshold
	}
	if cfg.Size < 1 {
		cfg.Size = defaultAnswerCacheSize
	}
	if cfg.TTL <= 0 {
		cfg.TTL = defaultAnswerCacheTTL
	}
	s := &SemanticCache{cfg: cfg, scopes: map[string]map[*semEntry]struct{}{}, templates: map[string]*semEntry{}, asked: newAsked(askedPerAnswer * cfg.Size)}
	s.lru, _ = simplelru.NewLRU[string, *semEntry](cfg.Size, s.evicted) // fails only for a size below 1
	s.marks, _ = simplelru.NewLRU[string, string](cfg.Size, nil)
	return s
}

// evicted forgets e's indexes; called with s.mu held.
func (s *SemanticCache) evicted(_ string, e *semEntry) {
	if set := s.scopes[e.scope]; set != nil {
		delete(set, e)
		if len(set) == 0 {
			delete(s.scopes, e.scope)
		}
	}
	if e.template != "" && s.templates[e.template] == e {
		delete(s.templates, e.template)
	}
}

// Get returns the answer stored under key, exactly as NewAnswerCache's does.
func (s *SemanticCache) Get(_ context.Context, key string) (*genai.GenerateContentResponse, bool) {
	s.mu.Lock()
	e, ok := s.live(key)
	s.mu.Unlock()
	if !ok {
		return nil, false
	}
	return e.answer()
}

// Put stores resp under key for exact matches only.
func (s *SemanticCache) Put(_ context.Context, key string, resp *genai.GenerateContentResponse) {
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	s.add(&semEntry{key: key, json: b}, time.Now().Add(s.cfg.TTL))
}

// live returns the entry under key unless it expired (then it is
// removed); called with s.mu held.
func (s *SemanticCache) live(key string) (*semEntry, bool) {
	e, ok := s.lru.Get(key)
	if ok && !time.Now().Before(e.expires) {
		s.lru.Remove(key)
		return nil, false
	}
	return e, ok
}

// add stores e until expires, replacing the entry of its key.
func (s *SemanticCache) add(e *semEntry, expires time.Time) {
	e.expires = expires
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lru.Remove(e.key) // drops an older entry's indexes
	s.lru.Add(e.key, e)
	if e.vec != nil {
		set := s.scopes[e.scope]
		if set == nil {
			set = map[*semEntry]struct{}{}
			s.scopes[e.scope] = set
		}
		set[e] = struct{}{}
	}
	if e.template != "" {
		s.templates[e.template] = e
	}
}

func (e *semEntry) answer() (*genai.GenerateContentResponse, bool) {
	resp := new(genai.GenerateContentResponse)
	if json.Unmarshal(e.json, resp) != nil {
		return nil, false
	}
	return resp, true
}

// cacheRequest is the request a requestCache reads.
type cacheRequest struct {
	family   string
	contents []*genai.Content
	config   *genai.GenerateContentConfig
}

// scope returns the family and config part of r's keys.
func (r cacheRequest) scope() (string, bool) {
	d, ok := requestDigest(r.family, nil, r.config)
	if !ok {
		return "", false
	}
	return r.family + ":" + hex.EncodeToString(d[:]), true
}

// text returns r's contents as text (role, ": ", text, a line each), false
// when a part is not text.
func (r cacheRequest) text() (string, bool) {
	var b strings.Builder
	for _, c := range r.contents {
		if c == nil {
			continue
		}
		b.WriteString(c.Role)
		b.WriteString(": ")
		for _, p := range c.Parts {
			if p == nil {
				continue
			}
			if p.Text == "" || p.Thought {
				return "", false
			}
			b.WriteString(p.Text)
		}
		b.WriteByte('\n')
	}
	return b.String(), b.Len() > 0
}

// wholeAnswer reports whether resp is an answer worth serving again: text
// in its first candidate, which ended normally, and a prompt not blocked.
func wholeAnswer(resp *genai.GenerateContentResponse) bool {
	if resp == nil || IsFallback(resp) || len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return false
	}
	if resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
		return false
	}
	cand := resp.Candidates[0]
	if cand.FinishReason != "" && cand.FinishReason != genai.FinishReasonStop {
		return false
	}
	return cand.Content != nil && resp.Text() != ""
}

// store puts a model's answer to req under key, with its template and the
// embedding of its text, and shares it with the fleet.
func (s *SemanticCache) store(ctx context.Context, c *Client, key string, req cacheRequest, resp *genai.GenerateContentResponse) {
	if !wholeAnswer(resp) {
		return
	}
	b, err := json.Marshal(resp)
	if err != nil {
		return
	}
	e := &semEntry{key: key, json: b}
	shared := fleet.VectorEntry{Key: key, Answer: b}
	if scope, ok := req.scope(); ok {
		e.scope = scope
		if text, ok := req.text(); ok {
			if s.cfg.Template != nil {
				shared.Template = templateDigest(s.cfg.Template(text))
				e.template = scope + "\x00" + shared.Template
			}
			e.vec = s.embed(ctx, c, text)
			shared.Vector = e.vec
		}
	}
	s.add(e, time.Now().Add(s.cfg.TTL))
	if e.scope != "" {
		s.share(ctx, c, e.scope, shared)
	}
}

// embed returns the normalised embedding of text by the Client's chain,
// nil when there is no embedding model or the request failed.
func (s *SemanticCache) embed(ctx context.Context, c *Client, text string) []float32 {
	if s.cfg.EmbeddingModel == "" {
		return nil
	}
	var cfg *genai.EmbedContentConfig
	if s.cfg.Dimensions > 0 {
		cfg = &genai.EmbedContentConfig{OutputDimensionality: &s.cfg.Dimensions}
	}
	ctx = context.WithValue(ctx, callRecordKey{}, (*CallRecord)(nil)) // not the caller's call
	r, err := c.EmbedContent(ctx, s.cfg.EmbeddingModel, []*genai.Content{genai.NewContentFromText(text, genai.RoleUser)}, cfg)
	if err != nil || r == nil || len(r.Embeddings) == 0 || r.Embeddings[0] == nil {
		return nil
	}
	return normalised(r.Embeddings[0].Values)
}

// normalised returns v scaled to length 1, nil for a zero vector.
func normalised(v []float32) []float32 {
	var sum float64
	for _, x := range v {
		sum += float64(x) * float64(x)
	}
	if sum == 0 {
		return nil
	}
	n := float32(1 / math.Sqrt(sum))
	out := make([]float32, len(v))
	for i, x := range v {
		out[i] = x * n
	}
	return out
}

// lookup answers a request whose every model failed: exact, template, then
// semantic.
func (s *SemanticCache) lookup(ctx context.Context, c *Client, key string, req cacheRequest) (*genai.GenerateContentResponse, CacheHit, bool) {
	scope, scoped := req.scope()
	if scoped {
		s.pull(ctx, c, scope)
	}
	if resp, ok := s.Get(ctx, key); ok {
		return resp, CacheHit{Kind: CacheExact, Entry: key, Similarity: 1}, true
	}
	if !scoped {
		return nil, CacheHit{}, false
	}
	text, ok := req.text()
	if !ok {
		return nil, CacheHit{}, false
	}
	if s.cfg.Template != nil {
		tk := scope + "\x00" + templateDigest(s.cfg.Template(text)) // the user's func, outside the lock
		s.mu.Lock()
		e, ok := s.templates[tk]
		if ok {
			e, ok = s.live(e.key)
		}
		s.mu.Unlock()
		if ok {
			if resp, ok := e.answer(); ok {
				return resp, CacheHit{Kind: CacheTemplate, Entry: e.key, Similarity: 1}, true
			}
		}
	}
	vec := s.embed(ctx, c, text)
	if vec == nil {
		return nil, CacheHit{}, false
	}
	e, sim := s.nearest(scope, vec)
	if e == nil {
		return nil, CacheHit{}, false
	}
	resp, ok := e.answer()
	if !ok {
		return nil, CacheHit{}, false
	}
	return resp, CacheHit{Kind: CacheSemantic, Entry: e.key, Similarity: sim}, true
}

// nearest returns the live entry of scope most similar to vec at or above
// the threshold, nil when none is: a flat scan.
func (s *SemanticCache) nearest(scope string, vec []float32) (*semEntry, float64) {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *semEntry
	bestSim := s.cfg.Threshold
	for e := range s.scopes[scope] {
		if len(e.vec) != len(vec) || !now.Before(e.expires) {
			continue
		}
		if sim := dot(e.vec, vec); sim >= bestSim {
			best, bestSim = e, sim
		}
	}
	if best != nil {
		s.lru.Get(best.key) // recently used
	}
	return best, bestSim
}

// dot is the dot product of two vectors of the same length: their cosine
// similarity when both are normalised.
func dot(a, b []float32) float64 {
	var sum float32
	for i := range a {
		sum += a[i] * b[i]
	}
	return float64(sum)
}
