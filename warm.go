package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"time"

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
