package geminiguard

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/pacific"
	"github.com/geminiguard/geminiguard/internal/window"
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
	IPM int // images per minute: the images the image methods ask for (GenerateImages, EditImage, ...)
}

// validate reports every negative field of l, for model, at once.
func (l Limits) validate(model string) error {
	var errs []error
	for _, f := range [...]struct {
		name string
		v    int
	}{{"RPM", l.RPM}, {"TPM", l.TPM}, {"RPD", l.RPD}, {"IPM", l.IPM}} {
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

// RateLimitError reports a request that a local limit refused, so that
// nothing was sent: a limit of WithLimits, or one learned from a 429. It is
// exported so that a caller can read which limit refused the request and
// when the model takes it again. It matches ErrRateLimited, and also
// ErrQuotaExhausted when the day's requests (RPD) are spent; never a context
// error, as no context ended. A Client method returns it as a pointer inside a
// *ModelError whose Verdict.RetryAfter is the wait until Until.
type RateLimitError struct {
	// Dimension is the limit that held the request back: "RPM", "TPM",
	// "RPD" or "IPM".
	Dimension string
	// Until is when the limits admit the request (the next midnight
	// America/Los_Angeles when the day's requests are spent); zero when no
	// wait admits it (Tokens > Limit).
	Until time.Time
	// Tokens is the request's input-token estimate (IPM: the images it asks
	// for) and Limit the effective TPM (IPM), for a request larger than that;
	// both 0 otherwise.
	Tokens, Limit int

	wait    time.Duration // Until minus the time of the request
	skipped bool          // the Client did not wait: another model could answer at once
}

func (e *RateLimitError) Error() string {
	switch {
	case e.Tokens > 0:
		what := "input tokens"
		if e.Dimension == "IPM" {
			what = "images"
		}
		return fmt.Sprintf("geminiguard: rate limited: the request's %d %s exceed the effective %s (%d): no wait admits it", e.Tokens, what, e.Dimension, e.Limit)
	case e.skipped:
		return fmt.Sprintf("geminiguard: rate limited: %s: the request could be sent in %v; the next model answers sooner", e.Dimension, e.wait)
	case e.Dimension == "RPD":
		return fmt.Sprintf("geminiguard: rate limited: RPD: the day's requests are spent until %s (midnight America/Los_Angeles), after the deadline", e.Until.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("geminiguard: rate limited: %s: the request could be sent in %v, after the deadline", e.Dimension, e.wait)
}

// Is reports ErrRateLimited, and ErrQuotaExhausted when the day's requests
// are spent.
func (e *RateLimitError) Is(target error) bool {
	switch target {
	case ErrRateLimited:
		return true
	case ErrQuotaExhausted:
		return e.Dimension == "RPD"
	}
	return false
}

// localLimitError is the failure of model at now when its limiter refused the
// request with err (a *RateLimitError): its Verdict's RetryAfter is the wait
// until the limits admit the request, 0 when none does.
func localLimitError(model string, err error, now time.Time) *ModelError {
	v := Verdict{Class: ClassLocalRateLimit, Scope: ScopeModel}
	var rle *RateLimitError
	if errors.As(err, &rle) && rle.Until.After(now) {
		v.RetryAfter = rle.Until.Sub(now)
	}
	return &ModelError{Model: model, Verdict: v, Err: err}
}

// The largest limits learn takes from a 429: far beyond the largest published
// Gemini quotas (30,000 RPM and 30,000,000 TPM on tier 3), so that a corrupt
// or hostile quotaValue means at most "practically unlimited".
const (
	maxLearnedRPM = 10_000_000
	maxLearnedTPM = 2_000_000_000
	maxLearnedRPD = 2_000_000_000
)

// limiter paces the requests to one model so that no quota dimension is
// exceeded: RPM on a sliding window of per-second counts, TPM on a token
// bucket, RPD on a counter that resets at midnight America/Los_Angeles (the
// Gemini API's daily reset), each at headroom × the limit. Its memory does
// not depend on the limits.
//
// Bursts: RPM follows the quota's own semantics: a request may leave when
// fewer than headroom·RPM requests left in the 60 seconds before it, so a
// burst up to that size leaves at once and no 60-second window (half-open)
// ever holds more. (A token bucket cannot do both: with burst B it lets
// B + headroom·RPM through in a window, or paces a burst one request at a
// time.) The window keeps, per second of send time, the number of sends and
// the first and last of them. Where an exact log of sends would admit a
// request at T, it admits it in [T, T+1s): never early, and exactly at T
// while no second holds sends at more than two instants (a burst is sent at
// one). After a send booked more than 61 s ahead is given back, the sends of
// the seconds whose slots it took count together until the last of them is
// 60 s old: up to a minute late, never early.
//
// The TPM bucket holds headroom·TPM tokens so that any request up to that
// size can be granted (a larger one is refused at once); a full bucket plus
// a minute of refill means a 60-second window that follows an idle minute
// can carry up to 2·headroom·TPM tokens (1.6 TPM at the default 0.8): a
// headroom of 0.5 or less keeps every window within TPM. RPD is a counter,
// never a smooth refill: once spent, requests wait for the Pacific midnight.
//
// Requests are granted in order: each is scheduled at the earliest time every
// dimension admits it, and not before the latest grant, and every dimension
// records it at that time, so a request held back by one dimension cannot let
// others bunch up behind it. A grant given back (grant.cancel) returns its
// RPM send, its RPD count and its place in line; its tokens exactly when no
// token grant followed it, else as far as the later ones allow.
// Times are arguments; the limiter reads no clock and starts no goroutine.
// A limiter is safe for concurrent use. Use newLimiter.
//
// The windows are internal/window's, not golang.org/x/time/rate's, though
// rate.Limiter takes times too (ReserveN(t, n), Reservation.CancelAt(t)):
// the RPM window is no token bucket (above), and for TPM and IPM its
// CancelAt restores only the tokens no later reservation used and forgets
// the rest, where a grant given back here comes back in full once the
// grants after it are given back too. On internal/window's
// TestBucketGiveBackBehindLater script, rate.Limiter v0.16.0 keeps the next
// full-bucket request waiting 30 s where window.Bucket admits it at once.
type limiter struct {
	headroom float64
	active   atomic.Bool // something limits or blocks: reserve must take the lock
	tokensOn atomic.Bool // TPM is limited: reserve needs the input-token estimate
	images   bool        // an IPM limiter (newImageLimiter): its "tokens" are images, its TPM is IPM

	mu       sync.Mutex         // guards the fields below
	now      time.Time          // the latest time a request was made at; later ones are taken to be made no earlier
	clock    time.Time          // send time of the latest grant; later ones are not sent before it
	clockDim quotaDim           // the dimension that held the latest grant back
	seq      uint64             // grants made and not given back as the latest
	given    []order            // grants given back behind later ones, by seq; at most window.MaxGiven
	limit    [numDims]int       // configured or learned limits; 0 when none
	eff      [numDims]int       // effective limits: headroom × limit, at least 1
	blocked  [numDims]time.Time // no grants before these (server 429s)
	rpm      *window.Sliding    // nil while RPM is not limited
	tpm      window.Bucket      // PerMinute 0 while TPM is not limited
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

// newImageLimiter returns the limiter of a model's IPM (nil when ipm is 0):
// a limiter whose token bucket counts images, ipm a minute at headroom, and
// whose errors name IPM. A call of an image method reserves its images from
// it as another call reserves its input tokens from the model's limiter.
func newImageLimiter(ipm int, headroom float64) *limiter {
	if ipm <= 0 {
		return nil
	}
	lim := newLimiter(Limits{TPM: ipm}, headroom)
	lim.images = true
	return lim
}

// dimName names dimension d in l's errors: IPM for an image limiter's TPM.
func (l *limiter) dimName(d quotaDim) string {
	if l.images && d == dimTPM {
		return "IPM"
	}
	return d.String()
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
	switch d {
	case dimRPM:
		if l.rpm == nil {
			l.rpm = new(window.Sliding)
		}
	case dimTPM:
		l.tpm.Resize(eff, l.now)
		l.tokensOn.Store(true)
	}
	l.active.Store(true)
}

// grant is a request the limiter admitted. Its zero value (from a limiter
// with nothing to enforce) gives nothing back.
type grant struct {
	l      *limiter
	at     time.Time   // send time
	dim    quotaDim    // the dimension that held it back, when it waits
	rpm    bool        // booked in the RPM window at at
	tpm    window.Take // its tokens; zero when TPM was not limited
	tokens int         // input tokens counted against TPM
	order
}

// order is a grant's place in the limiter's order of grants: what to restore
// once it, and every grant after it, is given back.
type order struct {
	seq       uint64    // limiter.seq after it
	prevClock time.Time // limiter.clock and clockDim before it
	prevDim   quotaDim
	dayEnd    time.Time // the Pacific day counted against RPD; zero when not limited
	prevDay   time.Time // limiter.dayEnd and rpdCount before it
	prevCount int
	counted   bool // still counted in its day's rpdCount
}

// cancel gives back what the grant took: call it, at most once, when the
// request was not sent after all (the context ended during the wait, the
// breaker refused, the Client skipped the model). The RPM send and the
// tokens' count in TokensUsed always come back, and the RPD count when its
// day is current. The grant's place in line comes back once every grant
// after it is given back too (the later ones keep their send times until
// then). Its tokens come back as far as the token grants after it allow, and
// in full once those are given back too (a reconcile's debt is never given
// back, so tokens taken before one may stay spent).
func (g grant) cancel() {
	l := g.l
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if g.rpm && l.rpm != nil {
		l.rpm.Remove(g.at)
	}
	if !g.tpm.IsZero() {
		l.tpm.GiveBack(g.tpm)
		l.count(-int64(g.tokens))
	}
	g.counted = !g.dayEnd.IsZero()
	l.uncount(&g.order)
	l.unwind(g.order)
}

// uncount takes o's request out of the RPD count when o's day is current.
// l.mu must be held.
func (l *limiter) uncount(o *order) {
	if o.counted && o.dayEnd.Equal(l.dayEnd) && l.rpdCount > 0 {
		l.rpdCount--
		o.counted = false
	}
}

// unwind takes a given-back grant's order o out of the order of grants. When
// o is the latest, the clock (and the RPD day, when o opened it) go back to
// what they were before it, and so on through the grants given back before
// it; else o waits in l.given for the grants after it. l.mu must be held.
func (l *limiter) unwind(o order) {
	if o.seq != l.seq {
		i, _ := slices.BinarySearchFunc(l.given, o.seq, func(x order, seq uint64) int { return cmp.Compare(x.seq, seq) })
		l.given = slices.Insert(l.given, i, o)
		if len(l.given) > window.MaxGiven {
			l.given = slices.Delete(l.given, 0, 1)
		}
		return
	}
	for {
		l.clock, l.clockDim, l.seq = o.prevClock, o.prevDim, l.seq-1
		if o.dayEnd.Equal(l.dayEnd) && l.rpdCount == 0 && !o.prevDay.Equal(o.dayEnd) {
			// It opened a day that now counts nothing: the day before is
			// current again.
			l.dayEnd, l.rpdCount = o.prevDay, o.prevCount
		}
		n := len(l.given)
		if n == 0 || l.given[n-1].seq != l.seq {
			return
		}
		o, l.given = l.given[n-1], l.given[:n-1]
		l.uncount(&o)
	}
}

// skip gives g back (see cancel) and returns the failure of model at now,
// for a call that moves on to the next model rather than wait for g: wait is
// what reserve returned.
func (g grant) skip(model string, now time.Time, wait time.Duration) *ModelError {
	g.cancel()
	return localLimitError(model, &RateLimitError{Dimension: g.l.dimName(g.dim), Until: now.Add(wait), wait: wait, skipped: true}, now)
}

// enforces reports whether reserve has anything to enforce: when it has
// not, reserve grants every request at once with the zero grant, and a
// caller on a hot path may skip it (a grant is large to return). Lock-free.
func (l *limiter) enforces() bool {
	return l.active.Load()
}

// reserve asks, at now, to send one request of tokens input tokens (ignored
// unless TPM is limited). It returns the wait before the request may be sent
// and a grant to cancel if it is not sent after all.
//
// When the request could not be sent before deadline (zero: none) it reserves
// nothing and returns a *RateLimitError matching ErrRateLimited (and
// ErrQuotaExhausted when the RPD is spent; its Until is then the next Pacific
// midnight). A request larger than the effective TPM can never be sent: a
// *RateLimitError with a zero Until, at once. With nothing to enforce it
// returns at once, without locking or allocating.
func (l *limiter) reserve(now time.Time, tokens int, deadline time.Time) (grant, time.Duration, error) {
	if !l.active.Load() {
		return grant{}, 0, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()

	// Earliest time every dimension admits the request, granted in order:
	// never before the previous grant, nor before a request seen already.
	l.now = window.Later(l.now, now)
	t := l.now
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
		if e := l.rpm.Earliest(t, l.eff[dimRPM]); e.After(at) {
			at, dim = e, dimRPM
		}
	}
	if l.tpm.PerMinute() == 0 || tokens < 0 {
		tokens = 0
	}
	if tokens > 0 {
		if tokens > l.eff[dimTPM] {
			return grant{}, 0, &RateLimitError{Dimension: l.dimName(dimTPM), Tokens: tokens, Limit: l.eff[dimTPM]}
		}
		if e := l.tpm.Earliest(t, tokens); e.After(at) {
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
		return grant{}, 0, &RateLimitError{Dimension: l.dimName(dim), Until: at, wait: wait}
	}

	if l.now.After(l.clock) {
		// Every grant so far has its send time behind it: none can give
		// the clock back.
		l.given = l.given[:0]
	}
	g := grant{l: l, at: at, dim: dim, order: order{prevClock: l.clock, prevDim: l.clockDim}}
	if at.After(t) {
		l.clockDim = dim
	}
	l.clock = at
	l.seq++
	g.seq = l.seq
	if l.rpm != nil {
		l.rpm.Add(at, l.now)
		g.rpm = true
	}
	if tokens > 0 {
		g.tpm = l.tpm.Take(at, tokens, false)
		g.tokens = tokens
		l.count(int64(tokens))
	}
	if l.eff[dimRPD] > 0 {
		g.prevDay, g.prevCount = l.dayEnd, l.rpdCount
		l.dayEnd, l.rpdCount = dayEnd, count+1
		g.dayEnd = dayEnd
	}
	return g, wait, nil
}

// count adds n input tokens (of either sign) to l.used, saturating at the
// int64 limits. l.mu must be held.
func (l *limiter) count(n int64) {
	switch sum := l.used + n; {
	case n > 0 && sum < l.used:
		l.used = math.MaxInt64
	case n < 0 && sum > l.used:
		l.used = math.MinInt64
	default:
		l.used = sum
	}
}

// reconcile corrects TPM after a response: estimated is what reserve was
// given, actual the usageMetadata.promptTokenCount. A larger actual count is
// taken from the bucket at once (the request was already sent), up to one
// effective TPM, so the next requests wait for it; a smaller one is not given
// back to the bucket (later grants were scheduled around it) but is counted
// in the snapshot's TokensUsed. Without a TPM limit, or without an actual
// count (≤ 0), it does nothing.
func (l *limiter) reconcile(now time.Time, estimated, actual int) {
	if !l.tokensOn.Load() || actual <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.count(int64(actual) - int64(estimated))
	if extra := min(actual-estimated, l.eff[dimTPM]); extra > 0 {
		l.tpm.Take(now, extra, true)
	}
}

// drain applies a server 429 on dimension d: no grant before until (the
// RetryInfo delay's end, or the next Pacific midnight for RPD). The TPM
// bucket is also empty at until, so it refills at its steady rate instead of
// releasing a burst of tokens into a quota the server says is spent. The RPM
// window keeps its sends, so the request the server invited at until is
// granted then when the window has room, and the steady pacing follows.
// An until at or before now empties the TPM bucket at now.
func (l *limiter) drain(now time.Time, d quotaDim, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.active.Store(true)
	if until.After(l.blocked[d]) {
		l.blocked[d] = until
	}
	if d == dimTPM {
		l.tpm.Empty(window.Later(now, until))
	}
}

// learn applies the quota a 429 stated (QuotaFailure quotaValue) for
// dimension d: a dimension without a limit starts being limited at headroom ×
// limit, so a Client that was given no Limits stops hammering; a lower limit
// than the current one replaces it; a higher one is ignored (a configured
// limit is never raised). A limit above maxLearnedRPM, maxLearnedTPM or
// maxLearnedRPD is taken as that maximum; limit ≤ 0 is ignored.
func (l *limiter) learn(d quotaDim, limit int) {
	if limit <= 0 {
		return
	}
	switch d {
	case dimRPM:
		limit = min(limit, maxLearnedRPM)
	case dimTPM:
		limit = min(limit, maxLearnedTPM)
	case dimRPD:
		limit = min(limit, maxLearnedRPD)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur := l.limit[d]; cur == 0 || limit < cur {
		l.setLimit(d, limit)
	}
}

// limits returns the effective limits by dimension (0: not limited).
func (l *limiter) limits() [numDims]int {
	if !l.active.Load() {
		return [numDims]int{}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.eff
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
