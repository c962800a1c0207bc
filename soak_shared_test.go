package geminiguard_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// soakSharedCalls is the scale of TestSoakShared: about this many calls in
// all (unary, streams, chat messages, token counts). The default keeps it
// within about 20 s under -race on two cores; a long run:
// go test -race -run SoakShared -soak.shared=50000 .
var soakSharedCalls = flag.Int("soak.shared", 10000, "calls of TestSoakShared, in all")

// The invariants of TestSoakShared: the soak's, then those of issue 18 that
// only its configuration shows.
var soakSharedInvariants = append(soakInvariants[:len(soakInvariants):len(soakInvariants)],
	"foreignBulkhead", // (2) a call refused as another bulkhead's, or by the interactive bulkhead, which never fills
	"fallbackLost",    // (4) in an outage, a caller with a deadline got a bare context error instead of the Fallback
	"budgetOvershoot", // (5) the day's spend above the daily budget by more than one call's cost
	"tokensBypass",    // (6) CountTokens sent past a misspelt bulkhead name or a full bulkhead
	"nilContext",      // (8) a method given a nil context (or a zero Client) panicked or returned no error
	"chatHistory",     // (9) a Chat's histories that do not grow as genai's Chat would record the exchange
)

// The bulkheads of TestSoakShared: the interactive one has room for every
// call the soak makes at once (its callers and the shared calls they leave
// behind), the batch one is small and flooded.
const (
	soakInteractive = "interactive"
	soakBatch       = "batch"
	soakBatchQueue  = 200 * time.Millisecond // the batch bulkhead's QueueTimeout
	soakBatchSlots  = 2
)

// soakBudgetPerCall is TestSoakShared's daily budget per call of the run:
// about half of what the run spends without one (about $0.0001 a call), so
// that the budget is spent halfway.
const soakBudgetPerCall = 20 * geminiguard.Micros(1)

// soakPool is how many prompts the calls of one second of fake time share;
// one in soakOutageEvery prompts is in an outage.
const (
	soakPool        = 6
	soakOutageEvery = 8
)

// soakOutage reports whether prompt id is in an outage: every request of
// its fails at once.
func soakOutage(id int) bool { return id%soakOutageEvery == soakOutageEvery-1 }

// soakChatBase numbers the prompts of chats, apart from the shared ones.
const soakChatBase = 1 << 30

// TestSoakShared is the soak of one Client with every call-sharing and
// call-limiting defence on at once: dedupe, idempotency keys, two bulkheads
// (one flooded by a batch feature), a daily budget, Chats, the answer cache
// and the Fallback, under the soak's random faults (soakFaults) and its
// callers' deadlines, cancellations, early breaks and consumer panics.
// Calls share prompts (a handful per second of fake time), so that
// identical calls meet in flight, across bulkheads too; one prompt in
// soakOutageEvery is in an outage. It counts the soak's invariants and
// those of issue 18 (soakSharedInvariants), prints one line of figures, and
// fails when any count is not 0. Rerun a seed with -soak.seed=N.
func TestSoakShared(t *testing.T) {
	seed := *soakSeed
	tally := newSoakTally(soakSharedInvariants)
	var figs soakFigures
	synctest.Test(t, func(t *testing.T) { runSharedSoak(t, seed, tally, &figs) })
	t.Logf("soak shared: seed=%d calls=%d %s upstream=%d successes=%d fallbacks=%d errors=%d breaks=%d cancels=%d consumerPanics=%d fakeTime=%v",
		seed, figs.unary.Load()+figs.streams.Load(), tally.line(), figs.upstream.Load(), figs.successes.Load(), figs.fallbacks.Load(),
		figs.errors.Load(), figs.breaks.Load(), figs.cancels.Load(), figs.userPanics.Load(), time.Duration(figs.fakeTime.Load()).Round(time.Millisecond))
	t.Logf("soak shared: errors by class: %v", figs.classes)
	for _, f := range tally.failures() {
		t.Errorf("soak shared seed=%d: %s", seed, f)
	}
}

// sharedSoakConfig is TestSoakShared's configuration, with a daily budget
// of budget.
func sharedSoakConfig(budget geminiguard.Micros) soakConfig {
	return soakConfig{
		name: "C",
		opts: []geminiguard.Option{
			geminiguard.WithCascade(soakCascade...),
			geminiguard.WithTimeouts(3*time.Second, 10*time.Second),
			geminiguard.WithStreamDeadlines(2*time.Second, time.Second),
			geminiguard.WithProjectCoolDown(3 * time.Second),
			geminiguard.WithStreamResume(true),
			// Retries enough for a shared call to outlast its callers'
			// deadlines in an outage.
			geminiguard.WithRetry(geminiguard.RetryPolicy{BudgetRatio: 0.5}),
			geminiguard.WithDedup(true),
			geminiguard.WithBulkhead(soakInteractive, geminiguard.Bulkhead{MaxConcurrent: 512, MaxQueue: 512}),
			geminiguard.WithBulkhead(soakBatch, geminiguard.Bulkhead{MaxConcurrent: soakBatchSlots, MaxQueue: 4, QueueTimeout: soakBatchQueue}),
			geminiguard.WithPrices(pro, geminiguard.Price{Input: 2 * geminiguard.Dollar, Output: 12 * geminiguard.Dollar}),
			geminiguard.WithPrices(flash, geminiguard.Price{Input: 0.5 * geminiguard.Dollar, Output: 3 * geminiguard.Dollar}),
			geminiguard.WithPrices(lite, geminiguard.Price{Input: 0.1 * geminiguard.Dollar, Output: 0.4 * geminiguard.Dollar}),
			geminiguard.WithBudget(geminiguard.Budget{PerDay: budget}),
			geminiguard.WithAnswerCache(geminiguard.NewAnswerCache(256, 10*time.Minute)),
			geminiguard.WithFallback(geminiguard.TextFallback(soakFallbackText)),
		},
		callTimeout: 10 * time.Second, maxAttempts: 3, fallback: true,
	}
}

// The goroutines of TestSoakShared, by feature.
const (
	soakBatchGoroutines       = 10
	soakInteractiveGoroutines = 16
	soakChatGoroutines        = 4
	soakChatTurns             = 4
)

func runSharedSoak(t *testing.T, seed uint64, tally *soakTally, figs *soakFigures) {
	// No daily quota: the late calls never come (the prompts are numbered
	// by fake seconds).
	faults := newSoakFaults(seed, 1<<40, soakFaultRates)
	faults.outage = soakOutage
	var models []geminitest.Model
	for i, m := range soakCascade {
		// A small output limit: an answer cut at MAX_TOKENS is billed for
		// it, and one call's cost bounds the budget's overshoot.
		models = append(models, geminitest.Model{Name: m, Latency: time.Duration(20*(3-i)) * time.Millisecond,
			ChunkInterval: 10 * time.Millisecond, Decide: faults.decide(m), OutputTokenLimit: 1024,
			Quota: geminitest.Quota{RPM: 20_000, RPD: 1_000_000, PaidTier: true}})
	}
	srv := geminitest.New(models...)
	cfg := sharedSoakConfig(geminiguard.Micros(*soakSharedCalls) * soakBudgetPerCall)
	r := &soakRun{cfg: cfg, seed: seed, srv: srv, c: newClient(t, srv, nil, cfg.opts...), tally: tally, figs: figs,
		texts: make(map[string]string), faults: faults, shared: true, cached: true, outage: soakOutage}
	for _, m := range soakCascade {
		r.texts[m] = srv.FullText(m)
	}
	baseline := goleak.IgnoreCurrent()
	start := time.Now()
	epoch := func() int { return int(time.Since(start) / time.Second) }

	stopDoctor := make(chan struct{})
	var doctor sync.WaitGroup
	doctor.Go(func() {
		for {
			select {
			case <-stopDoctor:
				return
			case <-time.After(2 * time.Second):
				_, _ = r.c.CheckCascade(t.Context())
			}
		}
	})

	perG := max(1, *soakSharedCalls/(soakBatchGoroutines+soakInteractiveGoroutines+soakChatGoroutines))
	var calls atomic.Int64
	var wg sync.WaitGroup
	for g := range soakBatchGoroutines + soakInteractiveGoroutines {
		batch := g < soakBatchGoroutines
		wg.Go(func() {
			for i := range perG {
				sc := planSharedCall(seed, g, i, epoch(), batch)
				time.Sleep(sc.think)
				calls.Add(1)
				switch {
				case sc.id%25 == 0:
					r.countTokens(t.Context(), sc)
				case sc.stream:
					r.stream(t.Context(), sc)
				default:
					r.unary(t.Context(), sc)
				}
			}
		})
	}
	for g := range soakChatGoroutines {
		wg.Go(func() {
			for k := range max(1, perG/soakChatTurns) {
				r.chat(t.Context(), soakChatBase+g<<16+k)
				calls.Add(soakChatTurns)
			}
		})
	}
	wg.Wait()
	close(stopDoctor)
	doctor.Wait()
	chaos := time.Since(start)

	r.checkSharedStats()
	r.checkBudgetSpend()
	r.checkMisspeltCounts()
	upstream := 0
	for _, m := range soakCascade {
		upstream += srv.Total(m)
	}
	r.checkHealthy(t.Context(), faults)
	r.checkFullBulkheadCounts(t.Context())
	r.checkNilContexts(t.Context())

	synctest.Wait()
	if err := goleak.Find(baseline, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start")); err != nil {
		r.tally.add("leaked", "cfg=%s: %v", cfg.name, err)
	}
	figs.unary.Add(calls.Load())
	figs.upstream.Add(int64(upstream))
	figs.fakeTime.Add(int64(time.Since(start)))
	t.Logf("soak cfg=%s: %d calls, %d upstream requests, chaos %v of fake time, spent %v of %v (the most one call cost: %v), bulkheads %+v", cfg.name, calls.Load(), upstream,
		chaos.Round(time.Millisecond), r.spentAtChaosEnd, r.c.Stats().Budget.PerDay, geminiguard.Micros(r.maxCost.Load()), r.c.Stats().Bulkheads)
}

// planSharedCall draws the i-th call of goroutine g, made in second epoch
// of fake time: the soak's shape (planSoakCall) on one of the prompts of
// that second, in its feature's bulkhead; one unary call in four with an
// idempotency key (per prompt and model, so that calls of both features
// share it); batch calls come fast, rarely as streams.
func planSharedCall(seed uint64, g, i, epoch int, batch bool) soakCall {
	id := g<<20 | i
	sc := planSoakCall(seed, "C", id)
	sc.g = g
	r := rand.New(rand.NewPCG(seed, 2<<40|uint64(id)))
	sc.prompt = epoch*soakPool + r.IntN(soakPool)
	sc.bulkhead = soakInteractive
	if batch {
		sc.bulkhead, sc.queue = soakBatch, soakBatchQueue
		sc.think = time.Duration(r.Int64N(int64(100 * time.Millisecond)))
		sc.stream = id%10 == 3
	}
	if !sc.stream && r.IntN(4) == 0 {
		sc.key = fmt.Sprintf("key %d %s", sc.prompt, sc.model)
	}
	return sc
}

// countTokens counts the tokens of sc's prompt. A batch call names its
// bulkhead and gets a count or a typed error; an interactive one names a
// bulkhead that does not exist, on lite (whose countTokens nothing else
// calls), and must be refused before anything is sent (item 6).
func (r *soakRun) countTokens(ctx context.Context, sc soakCall) {
	name, model := sc.bulkhead, pro
	if sc.bulkhead == soakInteractive {
		name, model = "interactiv", lite
	}
	var resp *genai.CountTokensResponse
	var err error
	if p := soakRecover(func() {
		resp, err = r.c.CountTokens(geminiguard.InBulkhead(ctx, name), model, r.prompt(sc), nil)
	}); p != nil {
		r.tally.add("panics", "seed=%d %v: CountTokens panicked: %v", r.seed, sc, p)
		return
	}
	switch {
	case name != sc.bulkhead:
		if v := geminiguard.Classify(err); err == nil || v.Class != geminiguard.ClassBadRequest {
			r.tally.add("tokensBypass", "seed=%d %v: CountTokens through the misspelt bulkhead %q: %v (%v), want a bad request", r.seed, sc, name, err, v.Class)
		}
	case err != nil:
		if !typedErr(err, false, false) {
			r.tally.add("untyped", "seed=%d %v: CountTokens: %T: %v", r.seed, sc, err, err)
		}
		r.checkIssue18(sc, err, "", false, false, geminiguard.CallRecord{})
	case resp == nil || resp.TotalTokens <= 0:
		r.tally.add("silent", "seed=%d %v: CountTokens answered %+v", r.seed, sc, resp)
	}
}

// checkMisspeltCounts: no countTokens request reached lite, which only
// the misspelt bulkhead's calls asked (item 6).
func (r *soakRun) checkMisspeltCounts() {
	if n := r.srv.Hits(lite, geminitest.VerbCountTokens); n > 0 {
		r.tally.add("tokensBypass", "seed=%d: %d countTokens requests reached %s through a misspelt bulkhead name", r.seed, n, lite)
	}
}

// checkFullBulkheadCounts holds every slot of the batch bulkhead with
// streams and counts tokens through it: the full bulkhead must refuse the
// count with ErrBulkheadFull once its queue timeout passed, sending nothing
// (item 6).
func (r *soakRun) checkFullBulkheadCounts(ctx context.Context) {
	release := make(chan struct{})
	var holders sync.WaitGroup
	for range soakBatchSlots {
		holders.Go(func() {
			for _, err := range r.c.GenerateContentStream(geminiguard.InBulkhead(ctx, soakBatch), "", genai.Text("hold a slot"), nil) {
				if err == nil {
					<-release
				}
				break
			}
		})
	}
	synctest.Wait()
	before := r.srv.Hits(pro, geminitest.VerbCountTokens)
	_, err := r.c.CountTokens(geminiguard.InBulkhead(ctx, soakBatch), pro, genai.Text("count me"), nil)
	if sent := r.srv.Hits(pro, geminitest.VerbCountTokens) - before; !errors.Is(err, geminiguard.ErrBulkheadFull) || sent != 0 {
		r.tally.add("tokensBypass", "seed=%d: CountTokens through the full bulkhead %q: %v, %d requests sent; want ErrBulkheadFull and none", r.seed, soakBatch, err, sent)
	}
	close(release)
	holders.Wait()
}

// checkNilContexts calls every method that takes a context with a nil one,
// and a zero Client's: each must return an error, never panic (item 8).
// The next good call must still get the primary's answer.
func (r *soakRun) checkNilContexts(ctx context.Context) {
	var none context.Context // what a caller passes by mistake
	hi := genai.Text("hi")
	chat, err := r.c.Chats().Create(ctx, "", nil, nil)
	if err != nil {
		r.tally.add("nilContext", "seed=%d: Chats.Create: %v", r.seed, err)
		return
	}
	stream := func(seq func(func(*genai.GenerateContentResponse, error) bool)) error {
		var last error = errors.New("soak: the stream yielded nothing")
		for _, err := range seq {
			last = err
			break
		}
		return last
	}
	var zero geminiguard.Client
	for _, m := range []struct {
		name string
		call func() error
	}{
		{"New", func() error {
			_, err := geminiguard.New(none, geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
				geminiguard.WithHTTPClient(r.srv.HTTPClient()), geminiguard.WithCascade(soakCascade...))
			return err
		}},
		{"GenerateContent", func() error { _, err := r.c.GenerateContent(none, "", hi, nil); return err }},
		{"GenerateContentStream", func() error { return stream(r.c.GenerateContentStream(none, "", hi, nil)) }},
		{"EmbedContent", func() error { _, err := r.c.EmbedContent(none, pro, hi, nil); return err }},
		{"CountTokens", func() error { _, err := r.c.CountTokens(none, pro, hi, nil); return err }},
		{"ComputeTokens", func() error { _, err := r.c.ComputeTokens(none, pro, hi, nil); return err }},
		{"CheckCascade", func() error { _, err := r.c.CheckCascade(none); return err }},
		{"Chat.SendMessage", func() error { _, err := chat.SendMessage(none, genai.Part{Text: "hi"}); return err }},
		{"Chat.SendMessageStream", func() error { return stream(chat.SendMessageStream(none, genai.Part{Text: "hi"})) }},
		{"zero Client's GenerateContent", func() error { _, err := zero.GenerateContent(ctx, "", hi, nil); return err }},
		{"zero Client's Stats", func() error { _ = zero.Stats(); return errors.New("no error to return") }},
	} {
		var err error
		if p := soakRecover(func() { err = m.call() }); p != nil {
			r.tally.add("nilContext", "seed=%d: %s panicked: %v", r.seed, m.name, p)
		} else if err == nil {
			r.tally.add("nilContext", "seed=%d: %s returned no error", r.seed, m.name)
		}
	}
	soakGoodCall(ctx, r.srv, r.c, r.tally, "after the nil contexts")
}

// checkBudgetSpend: the day's spend, once the chaos is over, is within one
// call's cost of the daily budget (item 5: calls in flight are reserved).
func (r *soakRun) checkBudgetSpend() {
	b := r.c.Stats().Budget
	r.spentAtChaosEnd = b.SpentToday
	if most := geminiguard.Micros(r.maxCost.Load()); b.SpentToday > b.PerDay+most {
		r.tally.add("budgetOvershoot", "seed=%d: spent %v of the daily budget %v: %v over, the most one call cost is %v", r.seed, b.SpentToday, b.PerDay, b.SpentToday-b.PerDay, most)
	}
}

// checkSharedStats compares Stats with what the fake saw: no upstream
// request missing from the models' counters. (Calls and answers are not
// compared: a call that joins another's, or leaves it early, is counted
// once for all.)
func (r *soakRun) checkSharedStats() {
	for _, ms := range r.c.Stats().Models {
		if hits := int64(r.srv.Total(ms.Model)); hits > ms.Requests {
			r.tally.add("statsMismatch", "cfg=%s: the fake got %d requests for %s, its Stats count %d", r.cfg.name, hits, ms.Model, ms.Requests)
		}
	}
}

// chat holds a conversation of soakChatTurns messages, unary or streamed,
// under the soak's deadlines, cancellations and breaks, and checks after
// each message that the histories grew as genai's Chat would have recorded
// the exchange (item 9): the user turn and the model turn for an answer
// (the Fallback's too), and for an error that holds a model's blocked or
// empty answer (genai returns it without error) unless the stream was cut;
// nothing for any other error nor for a stream the caller stopped; the
// curated history only for a model's answer.
func (r *soakRun) chat(ctx context.Context, id int) {
	ch, err := r.c.Chats().Create(ctx, "", nil, nil)
	if err != nil {
		r.tally.add("chatHistory", "seed=%d chat %d: Create: %v", r.seed, id, err)
		return
	}
	for turn := range soakChatTurns {
		sc := planSoakCall(r.seed, "C", id<<3|turn)
		sc.prompt, sc.bulkhead, sc.panicAfter = id, soakInteractive, 0
		time.Sleep(sc.think)
		msg := fmt.Sprintf("soak call %d: turn %d", id, turn)
		comp, cur := ch.History(false), ch.History(true)
		var cancelAt atomic.Int64
		cctx, cancel := r.callCtx(ctx, sc, &cancelAt)
		var rec geminiguard.CallRecord
		cctx = geminiguard.RecordCall(callOpts(cctx, sc), &rec)
		var (
			got   string
			broke bool
		)
		if p := soakRecover(func() {
			if !sc.stream {
				var resp *genai.GenerateContentResponse
				if resp, err = ch.SendMessage(cctx, genai.Part{Text: msg}); resp != nil {
					got = resp.Text()
				}
				return
			}
			var b strings.Builder
			n := 0
			err = nil
			for resp, e := range ch.SendMessageStream(cctx, genai.Part{Text: msg}) {
				if e != nil {
					err = e
					break
				}
				n++
				if (len(resp.Candidates) == 0 || resp.Candidates[0] == nil) && !geminiguard.IsFallback(resp) {
					r.tally.add("emptyChunk", "seed=%d chat %d turn %d: chunk %d has no candidate", r.seed, id, turn, n)
				}
				b.WriteString(resp.Text())
				if n == sc.breakAfter {
					broke = true
					break
				}
			}
			got = b.String()
		}); p != nil {
			cancel()
			r.tally.add("panics", "seed=%d chat %d turn %d: panicked: %v", r.seed, id, turn, p)
			return
		}
		r.recorded(sc, &rec)
		r.checkIssue18(sc, err, got, cancelAt.Load() != 0, callerDone(cctx, time.Now()), rec)
		cancel()
		if err != nil {
			r.figs.errors.Add(1)
			r.figs.class(r.cfg.name, err)
		} else {
			r.figs.successes.Add(1)
		}
		var rerr *geminiguard.ResponseError
		var serr *geminiguard.StreamError
		answered := err == nil && !broke
		want := 0 // turns the exchange adds to the comprehensive history
		if answered || err != nil && errors.As(err, &rerr) && !errors.As(err, &serr) {
			want = 2
		}
		wantCurated := 0
		if answered && !rec.Fallback {
			wantCurated = 2
		}
		r.checkHistory(sc, id, turn, msg, got, answered, comp, ch.History(false), want, err)
		if after := ch.History(true); len(after) != len(cur)+wantCurated {
			r.tally.add("chatHistory", "seed=%d chat %d turn %d: curated history went from %d to %d turns, want +%d; err=%v fallback=%v attempts=%s",
				r.seed, id, turn, len(cur), len(after), wantCurated, err, rec.Fallback, attemptsOf(rec))
		}
	}
}

// checkHistory checks one exchange of a chat: the comprehensive history
// went from before to after, keeping before and adding want turns, the
// user's message and, for an answer, the model turn with the text the
// caller got.
func (r *soakRun) checkHistory(sc soakCall, id, turn int, msg, got string, answered bool, before, after []*genai.Content, want int, err error) {
	bad := func(format string, args ...any) {
		r.tally.add("chatHistory", "seed=%d chat %d turn %d (%v): "+format, append([]any{r.seed, id, turn, sc}, args...)...)
	}
	if len(after) != len(before)+want {
		bad("the comprehensive history went from %d to %d turns, want +%d; err=%v", len(before), len(after), want, err)
		return
	}
	for i := range before {
		if after[i] != before[i] {
			bad("turn %d of the history changed", i)
			return
		}
	}
	if want == 0 {
		return
	}
	user, model := after[len(after)-2], after[len(after)-1]
	if user.Role != genai.RoleUser || len(user.Parts) != 1 || user.Parts[0].Text != msg {
		bad("the user turn is %+v, want %q", user, msg)
	}
	if model.Role != genai.RoleModel {
		bad("the model turn has role %q", model.Role)
	}
	if answered {
		text := ""
		for _, p := range model.Parts {
			text += p.Text
		}
		if text != got {
			bad("the model turn holds %q, the caller got %q", clip(text), clip(got))
		}
	}
}
