package geminiguard

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/genai"
)

// GenerateContentStream streams one answer through the chain, in the SDK's
// shape: lazy until ranged, and the first error ends the stream.
//
// Before the first chunk is yielded, the whole chain applies: limiter,
// breaker, retries, cascade and Fallback (whose answer arrives as a single
// chunk). A stream that sends nothing within the first-chunk deadline, or
// stalls longer than the idle deadline between chunks, counts as a failure of
// its model (see WithStreamDeadlines). The call timeout of WithTimeouts bounds
// the time to the first chunk; after it, only the caller's context and the
// idle deadline bound the stream.
//
// After the first chunk, a cut (transport error, error object inside the 200
// stream, or an end without any finishReason) is never silent: the stream
// ends with a *StreamError (ErrStreamInterrupted) carrying the text yielded so
// far, or, with WithStreamResume, the request is sent again with that text as
// a partial model turn — to the same model or the next of the cascade — and
// only the new text is yielded. Resume guarantees that nothing already
// yielded is yielded again and that the answer is complete (it ends with a
// finishReason); it cannot guarantee the continuation is the very text an
// uncut stream would have produced, since the model writes it anew.
//
// A finishReason SAFETY, RECITATION, PROHIBITED_CONTENT, BLOCKLIST or SPII
// ends the stream with a *ResponseError (ErrBlocked), not retried.
// MAX_TOKENS ends it normally; the last chunk carries that finishReason.
// The SDK's automatic continuation is off: one attempt is one HTTP request.
// Breaking out of the loop releases the connection and the breaker permit,
// and the slot of the call's bulkhead (InBulkhead), which a stream
// holds from the start of the loop to its end; a full bulkhead ends the
// stream at once with an error matching ErrBulkheadFull. A nil ctx, or a
// Client not made by New, ends it at once with the error GenerateContent
// returns for it.
func (c *Client) GenerateContentStream(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error] {
	return func(yield func(*genai.GenerateContentResponse, error) bool) {
		if err := c.usable(ctx); err != nil {
			yield(nil, err)
			return
		}
		if err := checkGenerate(contents, config); err != nil {
			yield(nil, err)
			return
		}
		bh, err := c.enterBulkhead(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		s := streamRun{c: c, ctx: ctx, model: model, contents: contents, config: config, start: time.Now(), rec: callRecordFrom(ctx)}
		defer bh.leave(&s.err)
		s.run(yield)
	}
}

// errStalled is the cause of an attempt whose stream sent nothing for longer
// than its first-chunk or idle deadline.
var errStalled = errors.New("geminiguard: stream stalled")

// streamRun is one GenerateContentStream call across its resumes and hops.
type streamRun struct {
	c        *Client
	ctx      context.Context
	model    string
	contents []*genai.Content
	config   *genai.GenerateContentConfig
	start    time.Time
	rec      *CallRecord
	attempts []Attempt
	partial  strings.Builder // text yielded so far
	yielded  int             // chunks yielded so far
	fallback bool
	hit      CacheHit // the answer cache's entry that answered (CallRecord.Cache)
	resumes  int      // cuts healed by a resume
	finished bool     // counted in the statistics
	err      error    // how the stream ended, once it has; nil: answered (or not ended)

	spent spend // tokens and cost of the upstream streams
}

func (s *streamRun) run(yield func(*genai.GenerateContentResponse, error) bool) {
	c := s.c
	c.stats.calls.Add(1)
	defer s.recordUnfinished()
	span := c.tel.startStream(s)
	ended := false
	defer endUnended(span, &ended)
	err := s.stream(yield)
	s.finished, s.err = true, err
	latency := time.Since(s.start)
	c.tel.endStream(s, span, err, latency)
	ended = true
	c.stats.record(err == nil, s.fallback, latency)
	if s.rec != nil {
		*s.rec = CallRecord{Attempts: s.attempts, Fallback: s.fallback, Resumes: s.resumes, Latency: latency, Cache: s.hit}
		s.spent.record(s.rec)
		if err == nil && !s.fallback && len(s.attempts) > 0 {
			s.rec.Model = s.attempts[len(s.attempts)-1].Model
		}
	}
}

// recordUnfinished counts a stream that a panic (the caller's loop body's,
// the SDK's) ended as a failure, so the statistics stay consistent; the
// panic goes on to the caller.
func (s *streamRun) recordUnfinished() {
	if !s.finished {
		s.finished = true
		s.c.stats.record(false, false, time.Since(s.start))
	}
}

// emit yields one chunk of the answer.
func (s *streamRun) emit(yield func(*genai.GenerateContentResponse, error) bool, resp *genai.GenerateContentResponse) bool {
	s.partial.WriteString(textOf(resp))
	s.yielded++
	return yield(resp, nil)
}

// stream yields the answer and returns the error that ended it (already
// yielded), nil when it ended normally or the caller stopped.
func (s *streamRun) stream(yield func(*genai.GenerateContentResponse, error) bool) error {
	model, config := s.model, s.config
	hop := false  // the next request continues a paused answer with its token
	progress := 0 // length of the text yielded when the last resume began
	for resumes, hops := 0, 0; ; {
		contents := s.contents
		if s.partial.Len() > 0 && !hop {
			contents = append(contents[:len(contents):len(contents)], genai.NewContentFromText(s.partial.String(), genai.RoleModel))
		}
		first, call, err := s.open(model, contents, config, hop)
		if err != nil && s.yielded > 0 {
			// The resume or hop found no model: the answer stands cut, with
			// its text.
			err = &StreamError{Model: model, Partial: s.partial.String(), Err: err}
		}
		if err != nil {
			yield(nil, err)
			return err
		}
		if call.stream.session == nil { // the Fallback answered
			s.fallback, s.hit = true, call.hit
			s.emit(yield, first)
			return nil
		}
		model = call.stream.held.m.name
		end := s.follow(call, first, s.partial.Len() > 0 && !hop, yield)
		s.c.cfg.recorder.streamEnd(call.stream.opened, end.chunks, end.verdict())
		if !end.done && end.token == nil {
			// The attempt that answered was cut: the record says so.
			s.attempts[len(s.attempts)-1].Err = &ModelError{Model: model, Verdict: cutVerdict(end.err), Err: end.err}
		}
		switch {
		case end.done:
			return end.err
		case end.token != nil && hops < maxContinuationHops:
			// The server paused the answer: the next hop goes through the
			// chain like any request, to the same model alone.
			hops++
			var next genai.GenerateContentConfig
			if config != nil {
				next = *config
			}
			next.ContinuationToken = end.token
			config, hop = &next, true
			continue
		case end.token != nil:
			end.err = errTooManyHops
		}
		hop = false
		// A resume that brought new text starts the count again: only
		// resumes without progress are bounded (like the SDK's own
		// continuation, which allows 3 reconnects without progress).
		if s.partial.Len() > progress {
			progress, resumes = s.partial.Len(), 0
		}
		if !s.c.cfg.resume || resumes >= s.c.cfg.retry.MaxAttempts || s.ctx.Err() != nil || !cutVerdict(end.err).Retryable {
			serr := &StreamError{Model: model, Partial: s.partial.String(), Err: end.err}
			yield(nil, serr)
			return serr
		}
		resumes++
		s.resumes++
		config = s.config // a resume restarts from the text, not from a token
	}
}

// cutVerdict classifies what cut a stream after its first chunk: a clean
// end without finishReason is a cut like a transport error.
func cutVerdict(err error) Verdict {
	if err == errNoFinishReason {
		return Verdict{Class: ClassStreamCut, Retryable: true, Scope: ScopeModel, counts: true}
	}
	return Classify(err)
}

// open runs the chain until a model sends a first chunk. A hop goes to model
// alone: its continuation token is that model's. Once anything was yielded,
// the Fallback no longer answers: a canned answer cannot continue a model's.
func (s *streamRun) open(model string, contents []*genai.Content, config *genai.GenerateContentConfig, hop bool) (*genai.GenerateContentResponse, *generateCall, error) {
	call := s.c.newGenerateCall(s.ctx, model, contents, config)
	call.send, call.stream = openStream, &streamCall{parent: s.ctx, continues: s.partial.Len() > 0, yielded: s.yielded > 0}
	call.learns, call.class = true, call.class+sizeClasses // the time to a first chunk, learned apart
	call.only = hop
	if s.yielded > 0 {
		call.fallback = nil
	}
	first, err := call.run(s.ctx)
	s.attempts = append(s.attempts, call.attempts...)
	return first, call, err
}

// streamEnd is how one upstream stream ended.
type streamEnd struct {
	err   error  // the cut to heal, or the error already yielded when done
	done  bool   // over: normally, by an error already yielded, or by the caller
	token []byte // a CONTINUATION pause: send the next hop with this token
	// chunks is the number of chunks the stream delivered.
	chunks int
}

// verdict reads how the stream ended: a zero Verdict when it answered (or
// paused for a hop), the cut's or the error's otherwise.
func (e streamEnd) verdict() Verdict {
	if e.err == nil {
		return Verdict{}
	}
	return cutVerdict(e.err)
}

// follow yields the chunks of an open stream and reports how it ended. A
// resumed stream's first chunk loses the text already yielded when the model
// started over. The
// answering model's admission is settled on every path, a panic in the
// caller's loop body included.
func (s *streamRun) follow(call *generateCall, first *genai.GenerateContentResponse, resumed bool, yield func(*genai.GenerateContentResponse, error) bool) (end streamEnd) {
	c, ss, held := s.c, call.stream.session, &call.stream.held
	defer ss.close()
	defer held.abandon()
	chunks := 0
	defer func() { end.chunks = chunks }()
	answered := false // this stream sent an answer part
	// The latest chunk's usage is the stream's running total.
	usage := first.UsageMetadata
	defer func() { s.spent.add(bill(held.m, usage, time.Now(), serviceTier(call.user))) }()
	resp, err := first, error(nil)
	for n := 0; ; n++ {
		if n > 0 {
			resp, err = ss.next(c.cfg.idle)
		}
		if err != nil {
			v := Classify(err)
			c.settle(held, time.Now(), err, v)
			if v.Class == ClassCanceled {
				yield(nil, err)
				return streamEnd{err: err, done: true}
			}
			return streamEnd{err: err}
		}
		if resp == nil { // clean end of the body without any finishReason
			c.settle(held, time.Now(), errNoFinishReason, cutVerdict(errNoFinishReason))
			return streamEnd{err: errNoFinishReason}
		}
		chunks++
		usage = cmp.Or(resp.UsageMetadata, usage)
		answered = answered || hasAnswer(contentOf(resp))
		if n == 0 && resumed {
			trimRepeat(resp, s.partial.String())
		}
		finish := finishReasonOf(resp)
		if rerr := blockedFinish(held.m.name, resp, finish); rerr != nil {
			c.settle(held, time.Now(), nil, Verdict{})
			yield(nil, rerr)
			return streamEnd{err: rerr, done: true}
		}
		switch finish {
		case "":
			if !s.emit(yield, resp) {
				c.settle(held, time.Now(), nil, Verdict{})
				return streamEnd{done: true}
			}
		case genai.FinishReasonContinuation:
			c.settle(held, time.Now(), nil, Verdict{})
			resp.Candidates[0].FinishReason = "" // the answer goes on: do not show the pause
			if !s.emit(yield, resp) {
				return streamEnd{done: true}
			}
			if tok := resp.Candidates[0].ContinuationToken; len(tok) > 0 {
				return streamEnd{token: tok}
			}
			return streamEnd{err: errNoFinishReason}
		default:
			// The last chunk: the answer as a whole is judged as a unary
			// answer is (one definition of a quiet failure).
			if rerr := answerError(held.m.name, resp, answered || call.stream.continues && endMarker(resp)); rerr != nil {
				c.settle(held, time.Now(), rerr, Classify(rerr))
				return streamEnd{err: rerr}
			}
			c.settle(held, time.Now(), nil, Verdict{})
			s.emit(yield, resp)
			return streamEnd{done: true}
		}
	}
}

// openStream is the sendFunc of streams: it opens the stream on m and waits
// for its first chunk, within the first-chunk deadline. The open stream is
// left in call.stream.session, or, for a request of a hedged attempt, where
// actx says (withSessionSlot). Cancelling actx before the first chunk ends
// the request at once with actx's error (a hedge's loser); its deadline is
// the first-chunk watchdog's. A first chunk that ends the answer, or has no
// candidate to begin one, is judged as a unary answer is: a quiet failure is
// the attempt's error, and nothing of it reaches the caller.
func openStream(actx context.Context, call *generateCall, m *modelState) (*genai.GenerateContentResponse, error) {
	c := call.c
	wait := min(c.cfg.firstChunk, m.timeout)
	if d, ok := actx.Deadline(); ok {
		wait = min(wait, time.Until(d))
	}
	slot := &call.stream.session
	if p, ok := actx.Value(sessionSlotKey{}).(**streamSession); ok {
		slot = p
	}
	// The stream outlives the attempt's context: it lives on the caller's,
	// and a watchdog cancels it when it stalls.
	sctx, cancel := context.WithCancelCause(call.stream.parent)
	ss := &streamSession{ctx: sctx, cancel: cancel, model: m.name}
	defer func() {
		if *slot != ss { // not opened: an error, a cancellation, or a panic of the SDK
			ss.close()
		}
	}()
	cancelled := context.AfterFunc(actx, func() {
		if errors.Is(actx.Err(), context.Canceled) {
			ss.cancel(context.Canceled)
		}
	})
	ss.next2, ss.stop = iter.Pull2(c.signers.learnStream(m.name, c.modelsFor(m).GenerateContentStream(sctx, m.wire, call.turnsFor(m), configFor(m, call.user, call.config, c.sdkRetries))))
	first, err := ss.next(wait)
	if !cancelled() && errors.Is(actx.Err(), context.Canceled) { // its first chunk, if any, came too late
		return nil, actx.Err()
	}
	switch {
	case err != nil:
		return nil, err
	case first == nil:
		return nil, &StreamError{Model: m.name, Err: errNoFinishReason}
	}
	finish := finishReasonOf(first)
	noCandidate := len(first.Candidates) == 0 || first.Candidates[0] == nil
	if finish != "" && finish != genai.FinishReasonContinuation || noCandidate {
		if rerr := answerError(m.name, first, call.stream.continues && endMarker(first)); rerr != nil {
			return nil, rerr
		}
	} else if rerr := blockedFinish(m.name, first, finish); rerr != nil {
		return nil, rerr
	}
	*slot = ss
	return first, nil
}

// sessionSlotKey is the key of the context value that tells openStream
// where to leave the stream it opened: a **streamSession.
type sessionSlotKey struct{}

// withSessionSlot returns ctx telling openStream to leave the stream it
// opens in *slot rather than in the call's streamCall: each request of a
// hedged attempt opens its own.
func withSessionSlot(ctx context.Context, slot **streamSession) context.Context {
	return context.WithValue(ctx, sessionSlotKey{}, slot)
}

// streamSession is one open upstream stream and its stall watchdog.
type streamSession struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	model  string
	next2  func() (*genai.GenerateContentResponse, error, bool)
	stop   func()
}

// next returns the next chunk, (nil, nil) at a clean end, or the error that
// ended the stream: errStalled (wrapped as an attempt timeout) when nothing
// came within wait. A chunk and the watchdog that race are settled once:
// either the chunk came first and the watchdog does nothing (the stream
// lives on), or the watchdog cut the stream first and the chunk is dropped
// as stalled, never returned from a stream that can no longer be read.
func (ss *streamSession) next(wait time.Duration) (*genai.GenerateContentResponse, error) {
	var settled atomic.Bool // the chunk or the watchdog, whichever came first
	wd := time.AfterFunc(wait, func() {
		if settled.CompareAndSwap(false, true) {
			ss.cancel(errStalled)
		}
	})
	resp, err, ok := ss.next2()
	wd.Stop()
	switch {
	case !settled.CompareAndSwap(false, true):
		return nil, &attemptTimeoutError{err: errStalled}
	case !ok:
		return nil, nil
	}
	return resp, err
}

// close releases the stream: its connection and its watchdog.
func (ss *streamSession) close() {
	if ss.stop != nil {
		ss.stop()
	}
	ss.cancel(nil)
}

// finishReasonOf returns the first candidate's finishReason, "" when none.
func finishReasonOf(resp *genai.GenerateContentResponse) genai.FinishReason {
	if resp == nil || len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return ""
	}
	return resp.Candidates[0].FinishReason
}

// blockedFinish returns a *ResponseError (ErrBlocked) for a chunk that blocks
// the prompt or ends the answer for safety, nil otherwise.
func blockedFinish(model string, resp *genai.GenerateContentResponse, finish genai.FinishReason) error {
	if resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
		return &ResponseError{Kind: ErrBlocked, Model: model, Reason: string(resp.PromptFeedback.BlockReason), Response: resp}
	}
	if finish == "" {
		return nil
	}
	if rerr, ok := responseError(model, resp).(*ResponseError); ok && rerr.Kind == ErrBlocked {
		return rerr
	}
	return nil
}

// endMarker reports a chunk that ends an answer without adding to it:
// finishReason STOP or MAX_TOKENS with a part, empty as it may be. It ends
// a resumed or continued stream whose answer so far had text (the cut came
// after the last text); a candidate with no parts at all does not.
func endMarker(resp *genai.GenerateContentResponse) bool {
	switch finishReasonOf(resp) {
	case genai.FinishReasonStop, genai.FinishReasonMaxTokens:
		c := contentOf(resp)
		return c != nil && len(c.Parts) > 0
	}
	return false
}

// contentOf returns the first candidate's content, nil when none.
func contentOf(resp *genai.GenerateContentResponse) *genai.Content {
	if len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return nil
	}
	return resp.Candidates[0].Content
}

// textOf returns the text of the first candidate's non-thought parts.
func textOf(resp *genai.GenerateContentResponse) string {
	if len(resp.Candidates) == 0 || resp.Candidates[0] == nil || resp.Candidates[0].Content == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range resp.Candidates[0].Content.Parts {
		if p != nil && !p.Thought {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// trimRepeat removes the already-yielded text from the first chunk of a
// resumed stream when the model started its answer over instead of
// continuing it.
func trimRepeat(resp *genai.GenerateContentResponse, yielded string) {
	if yielded == "" || len(resp.Candidates) == 0 || resp.Candidates[0] == nil || resp.Candidates[0].Content == nil {
		return
	}
	parts := resp.Candidates[0].Content.Parts
	if len(parts) == 0 || parts[0] == nil {
		return
	}
	if rest, ok := strings.CutPrefix(parts[0].Text, yielded); ok {
		p := *parts[0]
		p.Text = rest
		parts[0] = &p
	}
}
