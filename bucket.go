package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/pacific"
)

// Limits is a model's quota as the Google project has it: AI Studio shows the
// active values (https://ai.google.dev/gemini-api/docs/rate-limits). The
// Client sends at most WithHeadroom of each (rounded down, at least 1). A zero
// field means no local limit on that dimension (a limit the server states in a
// 429 is then learned); a negative field makes New fail. Limits is a plain
// value, safe to copy and share.
type Limits struct {
	RPM int // requests per minute
	TPM int // input tokens per minute
	RPD int // requests per day; the day ends at midnight America/Los_Angeles
}

// validate reports every negative field of l, for model, at once.
func (l Limits) validate(model string) error {
	var errs []error
	for _, f := range [...]struct {
		name string
		v    int
	}{{"RPM", l.RPM}, {"TPM", l.TPM}, {"RPD", l.RPD}} {
		if f.v < 0 {
			errs = append(errs, fmt.Errorf("geminiguard: WithLimits(%q): %s (%d) is negative: use the model's quota from AI Studio, or 0 for no local limit", model, f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// quotaDim is a dimension of a model's quota.
type quotaDim int

const (
	dimRPM quotaDim = iota // requests per minute
	dimTPM                 // input tokens per minute
	dimRPD                 // requests per day
	numDims
)

// String returns "RPM", "TPM" or "RPD".
func (d quotaDim) String() string {
	switch d {
	case dimRPM:
		return "RPM"
	case dimTPM:
		return "TPM"
	case dimRPD:
		return "RPD"
	}
	return fmt.Sprintf("quotaDim(%d)", int(d))
}

// quotaDimOf reads the dimension from a 429's QuotaFailure quotaId:
// "GenerateRequestsPerMinutePerProjectPerModel[-FreeTier]" is RPM,
// "GenerateContent[PaidTier]InputTokensPerModelPerMinute[-FreeTier]" is TPM,
// "GenerateRequestsPerDayPerProjectPerModel[-FreeTier]" is RPD. ok is false
// for anything else, including the per-day input-token quota
// ("GenerateContentInputTokensPerModelPerDay-FreeTier"), which the limiter
// does not keep: the model's cool-down until the Pacific midnight covers it.
func quotaDimOf(quotaID string) (quotaDim, bool) {
	requests := strings.Contains(quotaID, "Requests")
	tokens := strings.Contains(quotaID, "Tokens")
	switch {
	case requests == tokens:
		return 0, false
	case strings.Contains(quotaID, "PerMinute"):
		if requests {
			return dimRPM, true
		}
		return dimTPM, true
	case strings.Contains(quotaID, "PerDay") && requests:
		return dimRPD, true
	}
	return 0, false
}

// rateLimitError reports a request the limiter refused. It matches
// ErrRateLimited; when the call's deadline was the reason, also
// context.DeadlineExceeded; when the daily requests are spent, also
// ErrQuotaExhausted. Returned as a pointer.
type rateLimitError struct {
	Dimension quotaDim      // the dimension that held the request back
	Until     time.Time     // when it could have been sent (the Pacific midnight for RPD); zero when never
	Wait      time.Duration // Until minus the time of the request; 0 when never
	Tokens    int           // the request's input tokens, for a request larger than the effective TPM
	Limit     int           // the effective TPM, for a request larger than it
	deadline  bool          // the wait would have overrun the deadline
	skipped   bool          // the Client did not wait: another model could answer at once
}

func (e *rateLimitError) Error() string {
	switch {
	case e.skipped:
		return fmt.Sprintf("geminiguard: rate limited: out of tokens for %v; the next model answers sooner", e.Wait)
	case !e.deadline:
		return fmt.Sprintf("geminiguard: rate limited: the request's %d input tokens exceed the effective TPM (%d): no wait admits it", e.Tokens, e.Limit)
	case e.Dimension == dimRPD:
		return fmt.Sprintf("geminiguard: rate limited: RPD: the day's requests are spent until %s (midnight America/Los_Angeles), after the deadline", e.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("geminiguard: rate limited: %s: the request could be sent in %v, after the deadline", e.Dimension, e.Wait)
}

// Is reports ErrRateLimited, context.DeadlineExceeded when the deadline was
// the reason, and ErrQuotaExhausted when the daily requests are spent.
func (e *rateLimitError) Is(target error) bool {
	switch target {
	case ErrRateLimited:
		return true
	case context.DeadlineExceeded:
		return e.deadline
	case ErrQuotaExhausted:
		return e.Dimension == dimRPD
	}
	return false
}

// limiter paces the requests to one model so that no quota dimension is
// exceeded: RPM and TPM on golang.org/x/time/rate token buckets, RPD on a
// counter that resets at midnight America/Los_Angeles (the Gemini API's daily
// reset), each at headroom × the limit.
//
// Bursts: RPM is a sliding-window log, the quota's own semantics: a request
// may leave when fewer than headroom·RPM requests left in the 60 seconds
// before it, so a burst up to that size leaves at once and no 60-second
// window (half-open) ever holds more. (A token bucket cannot do both: with
// burst B it lets B + headroom·RPM through in a window, or paces a burst one
// request at a time.) The TPM bucket holds headroom·TPM tokens so that any request up to
// that size can be granted (a larger one is refused at once); a full bucket
// plus a minute of refill means a 60-second window that follows an idle minute
// can carry up to 2·headroom·TPM tokens (1.6 TPM at the default 0.8): a
// headroom of 0.5 or less keeps every window within TPM. RPD is a counter,
// never a smooth refill: once spent, requests wait for the Pacific midnight.
//
// Requests are granted in order: each is scheduled at the earliest time every
// dimension admits it, and every dimension records it at that time, so a
// request held back by one dimension cannot let others bunch up behind it.
// Times are arguments; the limiter reads no clock and starts no goroutine.
// A limiter is safe for concurrent use. Use newLimiter.
type limiter struct {
	headroom float64
	active   atomic.Bool // something limits or blocks: reserve must take the lock
	tokensOn atomic.Bool // TPM is limited: reserve needs the input-token estimate

	mu       sync.Mutex         // guards the fields below
	clock    time.Time          // latest time handed to rpm and tpm; they never see an earlier one
	clockDim quotaDim           // the dimension that pushed clock past a request's time
	limit    [numDims]int       // configured or learned limits; 0 when none
	eff      [numDims]int       // effective limits: headroom × limit, at least 1
	blocked  [numDims]time.Time // no grants before these (server 429s)
	rpm      *window            // nil while RPM is not limited
	tpm      *rate.Limiter      // nil while TPM is not limited
	dayEnd   time.Time          // end (next Pacific midnight) of the day rpdCount counts
	rpdCount int                // requests granted in the day ending at dayEnd
	used     int64              // input tokens granted, corrected by reconcile
}

// newLimiter returns a limiter for Limits l, each limit run at headroom × it
// (0 < headroom ≤ 1; New validates it). With zero Limits it grants every
// request at once, without locking or allocating, until drain or learn gives
// it something to enforce.
func newLimiter(l Limits, headroom float64) *limiter {
	lim := &limiter{headroom: headroom}
	lim.setLimit(dimRPM, l.RPM)
	lim.setLimit(dimTPM, l.TPM)
	lim.setLimit(dimRPD, l.RPD)
	return lim
}

// effective returns headroom × limit rounded down, at least 1.
func effective(limit int, headroom float64) int {
	f := math.Floor(float64(limit)*headroom + 1e-6)
	if f >= float64(limit) {
		return limit
	}
	return max(1, int(f))
}

// setLimit makes limit (> 0) the limit of dimension d. l.mu must be held, or
// l not yet shared.
func (l *limiter) setLimit(d quotaDim, limit int) {
	if limit <= 0 {
		return
	}
	eff := effective(limit, l.headroom)
	l.limit[d], l.eff[d] = limit, eff
	perSecond := rate.Limit(float64(eff) / 60)
	switch d {
	case dimRPM:
		l.rpm = l.rpm.resized(eff)
	case dimTPM:
		l.tpm = setBucket(l.tpm, l.clock, perSecond, eff)
		l.tokensOn.Store(true)
	}
	l.active.Store(true)
}

// setBucket returns b set to rate r and burst n at t, or a new full bucket
// when b is nil.
func setBucket(b *rate.Limiter, t time.Time, r rate.Limit, n int) *rate.Limiter {
	if b == nil {
		return rate.NewLimiter(r, n)
	}
	b.SetLimitAt(t, r)
	b.SetBurstAt(t, n)
	return b
}

// grant is a request the limiter admitted. Its zero value (from a limiter
// with nothing to enforce) gives nothing back.
type grant struct {
	l      *limiter
	rpm    time.Time         // send time booked in the RPM window; zero when not limited
	tpm    *rate.Reservation // nil when TPM was not limited
	dayEnd time.Time         // the Pacific day counted against RPD; zero when not limited
	tokens int               // input tokens counted against TPM
}

// cancel returns what the grant took, as far as later grants allow (see
// rate.Reservation.CancelAt): call it, at most once, when the request was not
// sent after all (the context ended during the wait, the breaker refused).
// The RPD count is always returned.
func (g grant) cancel(now time.Time) {
	l := g.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.advance(now)
	if !g.rpm.IsZero() && l.rpm != nil {
		l.rpm.cancel(g.rpm)
	}
	if g.tpm != nil {
		g.tpm.CancelAt(t)
		l.used -= int64(g.tokens)
	}
	if !g.dayEnd.IsZero() && g.dayEnd.Equal(l.dayEnd) && l.rpdCount > 0 {
		l.rpdCount--
	}
}

// advance moves the limiter's clock to now, if later, and returns the clock.
// l.mu must be held.
func (l *limiter) advance(now time.Time) time.Time {
	if now.After(l.clock) {
		l.clock = now
	}
	return l.clock
}

// reserve asks, at now, to send one request of tokens input tokens (ignored
// unless TPM is limited). It returns the wait before the request may be sent
// and a grant to cancel if it is not sent after all.
//
// When the request could not be sent before deadline (zero: none) it reserves
// nothing and returns a *rateLimitError matching ErrRateLimited and
// context.DeadlineExceeded (and ErrQuotaExhausted when the RPD is spent; its
// Until is then the next Pacific midnight). A request larger than the
// effective TPM can never be sent: a *rateLimitError matching only
// ErrRateLimited, at once. With nothing to enforce it returns at once,
// without locking or allocating.
func (l *limiter) reserve(now time.Time, tokens int, deadline time.Time) (grant, time.Duration, error) {
	if !l.active.Load() {
		return grant{}, 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	// Earliest time every dimension admits the request, granted in order:
	// never before the previous grant.
	t := now
	dim := l.clockDim
	if !t.After(l.clock) {
		t = l.clock
	}
	at := t
	for d, until := range l.blocked {
		if until.After(at) {
			at, dim = until, quotaDim(d)
		}
	}
	if l.rpm != nil {
		if e := l.rpm.earliest(t); e.After(at) {
			at, dim = e, dimRPM
		}
	}
	if l.tpm == nil || tokens < 0 {
		tokens = 0
	}
	if tokens > 0 {
		if tokens > l.eff[dimTPM] {
			return grant{}, 0, &rateLimitError{Dimension: dimTPM, Tokens: tokens, Limit: l.eff[dimTPM]}
		}
		if e := earliest(l.tpm, t, tokens, l.eff[dimTPM]); e.After(at) {
			at, dim = e, dimTPM
		}
	}
	dayEnd, count := l.dayEnd, l.rpdCount
	if l.eff[dimRPD] > 0 {
		if !at.Before(dayEnd) {
			dayEnd, count = pacific.NextMidnight(at), 0
		}
		if count >= l.eff[dimRPD] {
			at, dim = dayEnd, dimRPD
			dayEnd, count = pacific.NextMidnight(at), 0
		}
	}

	wait := at.Sub(now)
	if wait > 0 && !deadline.IsZero() && !at.Before(deadline) {
		return grant{}, 0, &rateLimitError{Dimension: dim, Until: at, Wait: wait, deadline: true}
	}

	if at.After(t) {
		l.clockDim = dim
	}
	l.clock = at
	g := grant{l: l}
	if l.rpm != nil {
		l.rpm.add(at)
		g.rpm = at
	}
	if tokens > 0 {
		g.tpm = l.tpm.ReserveN(at, tokens)
		g.tokens = tokens
		l.used += int64(tokens)
	}
	if l.eff[dimRPD] > 0 {
		l.dayEnd, l.rpdCount = dayEnd, count+1
		g.dayEnd = dayEnd
	}
	return g, wait, nil
}

// earliest returns the first time at or after t when b, refilled at
// perMinute tokens a minute, holds n tokens, rounded up to the nanosecond.
// t must not precede any time b has seen.
func earliest(b *rate.Limiter, t time.Time, n, perMinute int) time.Time {
	need := float64(n) - b.TokensAt(t)
	if need <= 0 {
		return t
	}
	return t.Add(time.Duration(math.Ceil(need * float64(time.Minute) / float64(perMinute))))
}

// reconcile corrects TPM after a response: estimated is what reserve was
// given, actual the usageMetadata.promptTokenCount. A larger actual count is
// taken from the bucket at once (the request was already sent), up to one
// effective TPM, so the next requests wait for it; a smaller one is not given
// back (rate.Limiter cannot) but is counted in the snapshot's TokensUsed.
// Without a TPM limit, or without an actual count (≤ 0), it does nothing.
func (l *limiter) reconcile(now time.Time, estimated, actual int) {
	if !l.tokensOn.Load() || actual <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.used += int64(actual - estimated)
	if extra := min(actual-estimated, l.eff[dimTPM]); extra > 0 {
		l.tpm.ReserveN(l.advance(now), extra)
	}
}

// drain applies a server 429 on dimension d: no grant before until (the
// RetryInfo delay's end, or the next Pacific midnight for RPD). The TPM
// bucket is also empty at until, so it refills at its steady rate instead of
// releasing a burst of tokens into a quota the server says is spent. The RPM
// bucket holds one request at most, so the request the server invited at
// until is granted then, and the steady pacing follows.
func (l *limiter) drain(now time.Time, d quotaDim, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active.Store(true)
	if until.After(l.blocked[d]) {
		l.blocked[d] = until
	}
	if until.After(l.clock) {
		l.clock, l.clockDim = until, d
	}
	t := l.advance(now)
	if d == dimTPM && l.tpm != nil {
		if n := int(l.tpm.TokensAt(t)); n > 0 {
			l.tpm.AllowN(t, n)
		}
	}
}

// learn applies the quota a 429 stated (QuotaFailure quotaValue) for
// dimension d: a dimension without a limit starts being limited at headroom ×
// limit, so a Client that was given no Limits stops hammering; a lower limit
// than the current one replaces it; a higher one is ignored (a configured
// limit is never raised). limit ≤ 0 is ignored.
func (l *limiter) learn(d quotaDim, limit int) {
	if limit <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.limit[d]; cur == 0 || limit < cur {
		l.setLimit(d, limit)
	}
}

// limitsTokens reports whether TPM is limited, that is whether reserve needs
// an input-token estimate. Safe for concurrent use, lock-free.
func (l *limiter) limitsTokens() bool {
	return l.tokensOn.Load()
}

// limiterStats is a snapshot of a limiter.
type limiterStats struct {
	TokensUsed    int64     // input tokens granted, corrected by reconcile; 0 without a TPM limit
	RequestsToday int       // requests counted in the Pacific day of the latest grant; 0 without an RPD limit
	BlockedUntil  time.Time // end of the latest server 429 block; zero when none
	RPM, TPM, RPD int       // effective limits (headroom × configured or learned); 0 when none
}

// snapshot returns the limiter's counters and effective limits.
func (l *limiter) snapshot() limiterStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := limiterStats{
		TokensUsed:    l.used,
		RequestsToday: l.rpdCount,
		RPM:           l.eff[dimRPM],
		TPM:           l.eff[dimTPM],
		RPD:           l.eff[dimRPD],
	}
	for _, until := range l.blocked {
		if until.After(s.BlockedUntil) {
			s.BlockedUntil = until
		}
	}
	return s
}

// Token estimate constants (see estimateTokens).
const (
	bytesPerToken = 4   // "a token is about 4 characters" (ai.google.dev/gemini-api/docs/tokens)
	tokensPerBlob = 258 // an image up to 384×384 px, or one 768×768 tile of a larger one (same page)
	maxValueDepth = 32  // nesting followed in function-call arguments and responses
)

// estimateTokens is a cheap local estimate of a request's input tokens, for
// the TPM bucket before the request is sent (reconcile corrects it from
// usageMetadata afterwards): ceil(bytes/4) of the text in contents and in the
// system instruction (text parts, executable code and its results, function
// names, argument and response keys and strings; bytes rather than
// characters, which is closer for non-Latin scripts), plus 258 per inline or
// file data part (one image tile; audio, video and long PDFs count more, and
// tools and cached content are not counted). It allocates nothing.
func estimateTokens(contents []*genai.Content, cfg *genai.GenerateContentConfig) int {
	n := 0
	for _, c := range contents {
		n += contentBytes(c)
	}
	if cfg != nil {
		n += contentBytes(cfg.SystemInstruction)
	}
	return (n + bytesPerToken - 1) / bytesPerToken
}

// contentBytes returns the text bytes of c, with each blob counted as
// tokensPerBlob tokens' worth of bytes.
func contentBytes(c *genai.Content) int {
	if c == nil {
		return 0
	}
	n := 0
	for _, p := range c.Parts {
		if p == nil {
			continue
		}
		n += len(p.Text)
		if p.InlineData != nil || p.FileData != nil {
			n += tokensPerBlob * bytesPerToken
		}
		if p.ExecutableCode != nil {
			n += len(p.ExecutableCode.Code)
		}
		if p.CodeExecutionResult != nil {
			n += len(p.CodeExecutionResult.Output)
		}
		if f := p.FunctionCall; f != nil {
			n += len(f.Name) + valueBytes(f.Args, 0)
		}
		if f := p.FunctionResponse; f != nil {
			n += len(f.Name) + valueBytes(f.Response, 0)
		}
	}
	return n
}

// valueBytes returns the bytes of the keys and strings in a decoded JSON
// value, counting any other scalar as one token's worth.
func valueBytes(v any, depth int) int {
	if depth > maxValueDepth {
		return 0
	}
	switch v := v.(type) {
	case nil:
		return 0
	case string:
		return len(v)
	case map[string]any:
		n := 0
		for k, e := range v {
			n += len(k) + valueBytes(e, depth+1)
		}
		return n
	case []any:
		n := 0
		for _, e := range v {
			n += valueBytes(e, depth+1)
		}
		return n
	}
	return bytesPerToken
}

// window is a sliding-window log of send times: at most len(times) requests
// in any minute. Times are added in non-decreasing order (the limiter's clock
// only moves forward), so the ring is sorted from next (oldest) on. It is
// not safe for concurrent use: the limiter's mu guards it.
type window struct {
	times []time.Time // ring of the latest sends
	next  int         // index of the oldest send once the ring is full
	n     int         // sends recorded, at most len(times)
}

// resized returns a window admitting limit requests a minute that keeps the
// latest sends of w (nil: none).
func (w *window) resized(limit int) *window {
	out := &window{times: make([]time.Time, limit)}
	if w == nil {
		return out
	}
	start := max(0, w.n-limit)
	for i := start; i < w.n; i++ {
		out.add(w.times[(w.next+i)%len(w.times)])
	}
	return out
}

// earliest returns the first time at or after t when a request may leave.
func (w *window) earliest(t time.Time) time.Time {
	if w.n < len(w.times) {
		return t
	}
	if free := w.times[w.next].Add(time.Minute); free.After(t) {
		return free
	}
	return t
}

// add records a send at t (not before any recorded send).
func (w *window) add(t time.Time) {
	if w.n < len(w.times) {
		w.times[(w.next+w.n)%len(w.times)] = t
		w.n++
		return
	}
	w.times[w.next] = t
	w.next = (w.next + 1) % len(w.times)
}

// cancel removes the latest send if it was at t: a request booked and then
// not sent. An older send stays, as rate.Reservation.CancelAt would keep it.
func (w *window) cancel(t time.Time) {
	if w.n == 0 {
		return
	}
	last := (w.next + w.n - 1) % len(w.times)
	if !w.times[last].Equal(t) {
		return
	}
	w.times[last] = time.Time{}
	w.n--
}
