package geminiguard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Bulkhead limits how many calls of one feature run at once, so that a
// feature that floods the Client (a batch job) cannot take every slot of
// the limiter, the breakers and the network from another (an interactive
// page). Calls choose their bulkhead with InBulkhead; see WithBulkhead.
//
// A call that finds every slot taken waits in the bulkhead's queue, in
// arrival order, until a slot frees; a call that finds the queue full too
// is refused at once with an error matching ErrBulkheadFull. The zero value
// is not valid: MaxConcurrent must be positive.
//
// A Bulkhead is a value of configuration; the bulkhead at work in a Client
// is safe for concurrent use.
type Bulkhead struct {
	// MaxConcurrent is how many calls of the bulkhead run at once: unary
	// calls until they return, streams until they end (the caller's loop
	// returns or breaks). With an adaptive Limit it is the ceiling of the
	// limit. It must be positive.
	MaxConcurrent int
	// Limit is how the number of calls that run at once is set: LimitFixed
	// (the zero value) keeps it at MaxConcurrent; LimitAIMD and
	// LimitGradient start it at 4 (or MaxConcurrent if lower) and adapt it,
	// between 1 and MaxConcurrent, to the latency of the bulkhead's calls,
	// each measured from its slot to its end (retries included), so that a
	// model that slows down under load gets fewer of the feature's calls.
	// LimitAIMD also backs off on a call that ended on a sign of overload
	// (a 503, another 5xx, a 429 or an attempt timeout), however fast it
	// failed; LimitGradient reads latency alone, so a call that fails fast
	// counts for it as a fast call. Default: LimitFixed, the best of the
	// three whenever MaxConcurrent is sized for the model (BENCHMARKS.md,
	// "Adaptive bulkhead limits").
	Limit BulkheadLimit
	// MaxQueue is how many calls may wait for a slot. 0: none, a call that
	// finds every slot taken is refused at once.
	MaxQueue int
	// QueueTimeout bounds a queued call's wait; a call still queued then is
	// refused with ErrBulkheadFull. 0: the call timeout of WithTimeouts.
	// The caller's context bounds the wait too. The call timeout starts
	// when the call gets its slot.
	QueueTimeout time.Duration
}

// validate reports what is wrong with b, the bulkhead named name.
func (b Bulkhead) validate(name string) error {
	var errs []error
	if name == "" {
		errs = append(errs, fmt.Errorf("geminiguard: WithBulkhead: the name is empty: name the feature, e.g. %q (calls without a name use %q)", "batch", defaultBulkhead))
	}
	if b.MaxConcurrent <= 0 {
		errs = append(errs, fmt.Errorf("geminiguard: WithBulkhead(%q): MaxConcurrent (%d) must be positive: the number of the feature's calls that may run at once", name, b.MaxConcurrent))
	}
	if b.MaxQueue < 0 {
		errs = append(errs, fmt.Errorf("geminiguard: WithBulkhead(%q): MaxQueue (%d) is negative: use 0 for no queue", name, b.MaxQueue))
	}
	if b.Limit < LimitFixed || b.Limit > LimitGradient {
		errs = append(errs, fmt.Errorf("geminiguard: WithBulkhead(%q): Limit (%v) is not one of LimitFixed, LimitAIMD, LimitGradient", name, b.Limit))
	}
	if b.QueueTimeout < 0 {
		errs = append(errs, fmt.Errorf("geminiguard: WithBulkhead(%q): QueueTimeout (%v) is negative: use 0 for the call timeout", name, b.QueueTimeout))
	}
	return errors.Join(errs...)
}

// defaultBulkhead is the bulkhead of calls that name none, when configured.
const defaultBulkhead = "default"

type bulkheadKey struct{}

// InBulkhead returns a context that makes the Client method called
// with it go through the bulkhead named name (WithBulkhead). A name the
// Client has no bulkhead for fails the call before anything is sent, with an
// error that Classify reads as ClassBadRequest: a misspelt name never
// silently escapes its limit.
func InBulkhead(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, bulkheadKey{}, name)
}

// BulkheadStats are one bulkhead's figures, taken by Client.Stats.
type BulkheadStats struct {
	Name     string
	Limit    int   // calls that may hold a slot now: MaxConcurrent, or the adaptive limit (Bulkhead.Limit)
	InFlight int   // calls holding a slot now
	Queued   int   // calls waiting for a slot now
	Admitted int64 // calls given a slot, since New
	Rejected int64 // calls refused with ErrBulkheadFull (queue full, QueueTimeout passed, or the caller's deadline), since New
}

// bulkhead is a Bulkhead at work: a counting semaphore whose blocked
// senders are its queue (the runtime hands a freed slot to the longest
// waiting sender, so the queue is first come, first served). An adaptive
// one holds the slots above its limit itself (release).
type bulkhead struct {
	name     string
	slots    chan struct{} // one element per call holding a slot, and the reserved ones
	maxQueue int64
	wait     time.Duration // the longest wait in the queue
	adaptive bool          // the limit adapts (Bulkhead.Limit); mu, lim and reserved are unused otherwise
	limit    atomic.Int64  // calls that may hold a slot now
	queued   atomic.Int64  // calls in the queue
	admitted atomic.Int64
	rejected atomic.Int64

	mu       sync.Mutex    // guards lim and reserved
	lim      adaptiveLimit // the adaptive limit's algorithm
	reserved int           // elements of slots held by the bulkhead, not by calls: cap(slots) - the limit, once enough calls left
}

// newBulkhead returns b at work, named name, whose queued calls wait at most
// wait.
func newBulkhead(name string, b Bulkhead, wait time.Duration) *bulkhead {
	bh := &bulkhead{name: name, slots: make(chan struct{}, b.MaxConcurrent), maxQueue: int64(b.MaxQueue), wait: wait}
	bh.limit.Store(int64(b.MaxConcurrent))
	if b.Limit != LimitFixed {
		bh.adaptive = true
		bh.lim = newAdaptiveLimit(b.Limit, b.MaxConcurrent)
		for bh.reserved = 0; bh.reserved < b.MaxConcurrent-bh.lim.current(); bh.reserved++ {
			bh.slots <- struct{}{}
		}
		bh.limit.Store(int64(bh.lim.current()))
	}
	return bh
}

// bulkheadSlot is a call's slot in a bulkhead, taken at start: the zero value is no
// slot (no bulkhead).
type bulkheadSlot struct {
	b     *bulkhead
	start time.Time // when the call got the slot; adaptive bulkheads only
}

// newBulkheads builds the Client's bulkheads; nil when there are none.
func newBulkheads(cfg *config) map[string]*bulkhead {
	if len(cfg.bulkheads) == 0 {
		return nil
	}
	bs := make(map[string]*bulkhead, len(cfg.bulkheads))
	for name, b := range cfg.bulkheads {
		wait := b.QueueTimeout
		if wait == 0 {
			wait = cfg.callTimeout
		}
		bs[name] = newBulkhead(name, b, wait)
	}
	return bs
}

// bulkheadFrom returns the bulkhead name ctx carries (InBulkhead), named
// false when it carries none.
func bulkheadFrom(ctx context.Context) (name string, named bool) {
	name, named = ctx.Value(bulkheadKey{}).(string)
	return name, named
}

// bulkheadQueues reports whether the bulkhead the call names in ctx (or
// the "default" one) has calls queued: its feature runs as many calls as
// it allows and more wait, so a hedge, a request beyond them, is not sent
// (a model whose latency grows with its load would slow every call).
func (c *Client) bulkheadQueues(ctx context.Context) bool {
	if len(c.bulkheads) == 0 {
		return false
	}
	b := c.bulkheadNamed(bulkheadFrom(ctx))
	return b != nil && b.queued.Load() > 0
}

// bulkheadNamed returns the bulkhead of a name of bulkheadFrom (the
// "default" one when there is none), nil when it is not configured.
func (c *Client) bulkheadNamed(name string, named bool) *bulkhead {
	if !named {
		name = defaultBulkhead
	}
	return c.bulkheads[name]
}

// enterBulkhead takes a slot of the bulkhead the call names in ctx (or of
// the "default" one) and returns it, to be left when the call ends; the
// zero slot when the call goes through no bulkhead. It fails with an error matching
// ErrBulkheadFull when the bulkhead refuses the call (and context's
// DeadlineExceeded too when the caller's deadline passed in the queue),
// with the context's error when the caller cancelled while queued, and
// with a request error for a name without a bulkhead.
func (c *Client) enterBulkhead(ctx context.Context) (bulkheadSlot, error) {
	name, named := bulkheadFrom(ctx)
	return c.enterNamedBulkhead(ctx, name, named)
}

// enterNamedBulkhead is enterBulkhead for the name of bulkheadFrom(ctx),
// read already.
func (c *Client) enterNamedBulkhead(ctx context.Context, name string, named bool) (bulkheadSlot, error) {
	b := c.bulkheadNamed(name, named)
	if b == nil {
		if !named {
			return bulkheadSlot{}, nil
		}
		return bulkheadSlot{}, &requestError{where: fmt.Sprintf("the bulkhead %q of InBulkhead", name), what: "is not configured", fix: fmt.Sprintf("add WithBulkhead(%q, ...) to New, or fix the name", name)}
	}
	if err := b.enter(ctx); err != nil {
		return bulkheadSlot{}, err
	}
	s := bulkheadSlot{b: b}
	if b.adaptive {
		s.start = time.Now() // the first of an adaptive bulkhead's two clock readings
	}
	return s, nil
}

// enter takes a slot, waiting in the queue if there is room in it.
func (b *bulkhead) enter(ctx context.Context) error {
	select {
	case b.slots <- struct{}{}:
		b.admitted.Add(1)
		return nil
	default:
	}
	if b.queued.Add(1) > b.maxQueue {
		b.queued.Add(-1)
		b.rejected.Add(1)
		return fmt.Errorf("geminiguard: bulkhead %q: %d calls running and %d queued: %w", b.name, b.limit.Load(), b.maxQueue, ErrBulkheadFull)
	}
	defer b.queued.Add(-1)
	sharedQueue(ctx, b) // a shared call's waiters whose deadline passes in the queue are refused as it would be (dedup.go)
	defer sharedQueue(ctx, nil)
	t := time.NewTimer(b.wait)
	defer t.Stop()
	select {
	case b.slots <- struct{}{}:
		b.admitted.Add(1)
		return nil
	case <-t.C:
		b.rejected.Add(1)
		return fmt.Errorf("geminiguard: bulkhead %q: no slot within the queue timeout (%v): %w", b.name, b.wait, ErrBulkheadFull)
	case <-ctx.Done():
		err := ctx.Err()
		if errors.Is(err, context.DeadlineExceeded) {
			return b.refuseAtDeadline(err)
		}
		return fmt.Errorf("geminiguard: bulkhead %q: cancelled while queued: %w", b.name, err)
	}
}

// refuseAtDeadline counts and returns the refusal of a queued call whose
// deadline passed (err, its context's error) before it got a slot: an
// error matching ErrBulkheadFull and err.
func (b *bulkhead) refuseAtDeadline(err error) error {
	b.rejected.Add(1)
	return fmt.Errorf("geminiguard: bulkhead %q: no slot before the caller's deadline: %w: %w", b.name, ErrBulkheadFull, err)
}

// leave gives the slot back; an adaptive bulkhead learns how long the call
// held it and whether it ended on a sign of overload (*err, the call's
// error, read now: deferred, leave sees the call's end; nil when a panic
// ended it). The zero slot (no bulkhead) does nothing.
func (s bulkheadSlot) leave(err *error) {
	switch {
	case s.b == nil:
	case s.b.adaptive:
		s.b.release(time.Since(s.start), overloaded(*err)) // the second clock reading
	default:
		<-s.b.slots
	}
}

// bulkheadStats returns every bulkhead's figures, by name.
func (c *Client) bulkheadStats() []BulkheadStats {
	if len(c.bulkheads) == 0 {
		return nil
	}
	st := make([]BulkheadStats, 0, len(c.bulkheads))
	for _, b := range c.bulkheads {
		st = append(st, BulkheadStats{Name: b.name, Limit: int(b.limit.Load()), InFlight: b.inFlight(), Queued: int(b.queued.Load()),
			Admitted: b.admitted.Load(), Rejected: b.rejected.Load()})
	}
	slices.SortFunc(st, func(x, y BulkheadStats) int { return cmp.Compare(x.Name, y.Name) })
	return st
}

// inFlight returns the number of calls holding a slot now.
func (b *bulkhead) inFlight() int {
	if !b.adaptive {
		return len(b.slots)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.slots) - b.reserved
}
