package geminiguard

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"google.golang.org/genai"
)

// WarmRequest is one GenerateContent request for Warm: Model "" is the
// cascade's primary, as for GenerateContent.
type WarmRequest struct {
	Model    string
	Contents []*genai.Content
	Config   *genai.GenerateContentConfig
}

// WarmConfig paces Warm. Its zero value sends the requests one after the
// other through the bulkhead calls without a name take, with no spend limit
// but the Client's.
type WarmConfig struct {
	// Bulkhead is the bulkhead the warm-up's calls go through
	// (WithBulkhead), so that they never take an interactive feature's
	// slots: give the warm-up a bulkhead of its own. "": that of calls
	// without a name.
	Bulkhead string
	// Every is the least time from one request's start to the next's: the
	// warm-up's rate. 0: no pause.
	Every time.Duration
	// Budget is the most the warm-up may spend, by the CallRecord cost of
	// its calls (Prices); once it is reached Warm stops. 0: no limit but the
	// Client's own (WithBudget).
	Budget Micros
}

// errWarmBudget: the warm-up's own budget (WarmConfig.Budget) is spent.
var errWarmBudget = fmt.Errorf("geminiguard: Warm: WarmConfig.Budget is spent: %w", ErrBudgetExhausted)

// Warm fills the answer cache (WithAnswerCache: NewAnswerCache's,
// a SemanticCache, any AnswerCache) before it is needed, by sending each
// request through the Client's chain as GenerateContent does, one at a
// time, in order, at the pace of cfg; a model's answer is stored as a live
// call's is. A request whose answer the cache already holds (by its exact
// key) is skipped, sending nothing. Requests that fail are passed over.
//
// It returns the number of requests a model answered, and nil when it went
// through them all; an error matching ErrBudgetExhausted when the Client's
// budget (WithBudget) or cfg.Budget was spent, at the first request that
// found it so (the rest are not sent); ctx's error when ctx ended; an
// error matching ErrBulkheadFull when cfg's bulkhead refused a request; an
// error when the Client has no answer cache, or for the errors by which
// GenerateContent refuses a Client (ErrClosed).
func (c *Client) Warm(ctx context.Context, requests []WarmRequest, cfg WarmConfig) (int, error) {
	if err := c.usable(ctx); err != nil {
		return 0, err
	}
	if c.cfg.answers == nil {
		return 0, errors.New("geminiguard: Warm: the Client has no answer cache: give one with WithAnswerCache")
	}
	if cfg.Bulkhead != "" {
		ctx = InBulkhead(ctx, cfg.Bulkhead)
	}
	ctx = context.WithValue(ctx, warmKey{}, true)
	answered := 0
	var spent Micros
	var next time.Time
	for _, r := range requests {
		if cfg.Budget > 0 && spent >= cfg.Budget {
			return answered, errWarmBudget
		}
		if key, ok := c.answerKey(r.Model, r.Contents, r.Config); ok {
			if _, held := c.cfg.answers.Get(ctx, key); held {
				continue
			}
		}
		if wait := time.Until(next); wait > 0 {
			if err := sleep(ctx, wait); err != nil {
				return answered, err
			}
		}
		next = time.Now().Add(cfg.Every)
		var rec CallRecord
		resp, err := c.GenerateContent(RecordCall(ctx, &rec), r.Model, r.Contents, r.Config)
		spent += rec.Cost
		if berr := budgetRefused(err, rec); berr != nil {
			return answered, berr
		}
		switch {
		case ctx.Err() != nil:
			return answered, ctx.Err()
		case errors.Is(err, ErrBulkheadFull), errors.Is(err, ErrClosed):
			return answered, err
		case err == nil && !IsFallback(resp):
			answered++
		}
	}
	return answered, nil
}

// budgetRefused returns the error by which a call ended on the Client's
// budget (WithBudget), nil when it did not: the call's error, or, when the
// Fallback (or the cache) answered, the attempt's that the budget refused.
func budgetRefused(err error, rec CallRecord) error {
	if err != nil {
		if errors.Is(err, ErrBudgetExhausted) {
			return err
		}
		return nil
	}
	if rec.Fallback {
		for _, a := range rec.Attempts {
			if errors.Is(a.Err, ErrBudgetExhausted) {
				return a.Err
			}
		}
	}
	return nil
}

// askedDays is how many days of counts an answer cache keeps of the
// requests it is asked (FrequentRequests).
const askedDays = 31

// askedPerAnswer is how many requests an answer cache counts per answer it
// holds: a request asked often stays counted after its answer was evicted.
const askedPerAnswer = 4

// FrequentRequests returns the n requests that cache was asked most often
// over the last days days (today, by UTC, and the days-1 before it; at most
// 31), most frequent first (ties: the most recently asked first), for
// Warm: cache counts, as NewAnswerCache's and a SemanticCache do, the
// request of every GenerateContent call that a Client with
// WithAnswerCache(cache) made through it (a model's answer stored, or a
// lookup when every model failed), but not Warm's own. The counts are kept
// in memory, per day, for the 4×size requests asked most recently (size:
// the cache's bound), each request held as JSON. A cache of another kind
// (redisstore's, any AnswerCache of the user's) counts nothing: it returns
// nil, as it does for n or days below 1. The requests returned are the
// caller's.
func FrequentRequests(cache AnswerCache, n, days int) []WarmRequest {
	ac, ok := cache.(askingCache)
	if !ok || n < 1 || days < 1 {
		return nil
	}
	return ac.askedCounts().frequent(n, min(days, askedDays), time.Now())
}

// askingCache is an answer cache that counts the requests it is asked
// (FrequentRequests).
type askingCache interface {
	askedCounts() *asked
}

// warmKey marks the context of Warm's calls, whose requests the caches do
// not count.
type warmKey struct{}

// countAsked counts a GenerateContent request in the answer cache, when it
// counts requests and the call is not Warm's.
func (c *Client) countAsked(ctx context.Context, key, model string, contents []*genai.Content, config *genai.GenerateContentConfig) {
	if ac, ok := c.cfg.answers.(askingCache); ok && ctx.Value(warmKey{}) == nil {
		ac.askedCounts().ask(key, model, contents, config, time.Now())
	}
}

// asked counts the requests an answer cache is asked, per UTC day. Safe
// for concurrent use; create with newAsked.
type asked struct {
	mu  sync.Mutex                            // guards lru and its requests' counts
	lru *simplelru.LRU[string, *askedRequest] // by exact key, the most recently asked last
}

// askedRequest is one request counted by asked: its JSON and its counts,
// count[d%askedDays] for day d when day[d%askedDays] is d.
type askedRequest struct {
	model            string
	contents, config []byte
	day              [askedDays]int64
	count            [askedDays]int
	last             time.Time
}

// newAsked returns an empty count of at most size requests (at least 1).
func newAsked(size int) *asked {
	lru, _ := simplelru.NewLRU[string, *askedRequest](max(size, 1), nil) // fails only for a size below 1
	return &asked{lru: lru}
}

// utcDay returns the day of t since the Unix epoch, by UTC.
func utcDay(t time.Time) int64 {
	return t.Unix() / int64(24*time.Hour/time.Second)
}

// ask counts a request under its exact key at now. A request first counted
// is kept as JSON (none is kept when it does not marshal).
func (a *asked) ask(key, model string, contents []*genai.Content, config *genai.GenerateContentConfig, now time.Time) {
	a.mu.Lock()
	r, ok := a.lru.Get(key)
	a.mu.Unlock()
	if !ok {
		cb, err := json.Marshal(contents)
		if err != nil {
			return
		}
		var gb []byte
		if config != nil {
			if gb, err = json.Marshal(config); err != nil {
				return
			}
		}
		r = &askedRequest{model: model, contents: cb, config: gb}
	}
	d := utcDay(now)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !ok {
		if held, found := a.lru.Get(key); found { // counted meanwhile
			r = held
		} else {
			a.lru.Add(key, r)
		}
	}
	i := d % askedDays
	if r.day[i] != d {
		r.day[i], r.count[i] = d, 0
	}
	r.count[i]++
	r.last = now
}

// frequent returns the n requests asked most often over the days days up to
// now's.
func (a *asked) frequent(n, days int, now time.Time) []WarmRequest {
	today := utcDay(now)
	type ranked struct {
		r     *askedRequest
		count int
		last  time.Time
	}
	var all []ranked
	a.mu.Lock()
	for _, r := range a.lru.Values() {
		sum := 0
		for i, d := range r.day {
			if d > today-int64(days) && d <= today {
				sum += r.count[i]
			}
		}
		if sum > 0 {
			all = append(all, ranked{r, sum, r.last})
		}
	}
	a.mu.Unlock()
	slices.SortStableFunc(all, func(x, y ranked) int {
		return cmp.Or(cmp.Compare(y.count, x.count), y.last.Compare(x.last))
	})
	out := make([]WarmRequest, 0, min(n, len(all)))
	for _, x := range all[:min(n, len(all))] {
		w := WarmRequest{Model: x.r.model}
		if json.Unmarshal(x.r.contents, &w.Contents) != nil {
			continue
		}
		if x.r.config != nil {
			w.Config = new(genai.GenerateContentConfig)
			if json.Unmarshal(x.r.config, w.Config) != nil {
				continue
			}
		}
		out = append(out, w)
	}
	return out
}

func (m *memoryCache) askedCounts() *asked   { return m.asked }
func (s *SemanticCache) askedCounts() *asked { return s.asked }
