package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/genai"
)

// FallbackModelVersion is the ModelVersion of a response the Fallback gave
// when the Fallback left ModelVersion empty.
const FallbackModelVersion = "geminiguard-fallback"

// Fallback is the last resort of a call whose models all failed: a cache, a
// default text, another provider. It is not called for request-scoped
// failures (bad request, safety block) or after the caller cancelled. A nil
// response or a non-nil error means "no answer": the call then returns
// req.Err. It must be safe for concurrent use.
type Fallback func(ctx context.Context, req FallbackRequest) (*genai.GenerateContentResponse, error)

// FallbackRequest is what the Fallback gets to answer.
type FallbackRequest struct {
	Model    string // the call's first choice
	Contents []*genai.Content
	Config   *genai.GenerateContentConfig // the caller's, do not modify
	Err      *CascadeError                // why every model failed
}

// TextFallback returns a Fallback that answers every call with text.
func TextFallback(text string) Fallback {
	return func(context.Context, FallbackRequest) (*genai.GenerateContentResponse, error) {
		return &genai.GenerateContentResponse{
			Candidates: []*genai.Candidate{{
				Content:      genai.NewContentFromText(text, genai.RoleModel),
				FinishReason: genai.FinishReasonStop,
			}},
		}, nil
	}
}

// run sends the call through the chain and ends it (finish): the cascade's
// models in order, each through retry (limiter, breaker, classifier-driven
// retries); rounds, when a model failed retryably while another could still
// answer; an early probe when nothing is left but open models; then the
// Fallback, else a *CascadeError.
func (call *call[R]) run(ctx context.Context) (R, error) {
	var zero R
	c := call.c
	if call.stream == nil { // a stream counts once, however many times it opens
		c.stats.calls.Add(1)
		defer call.recordUnfinished()
	}
	if err := c.projectCooling(call.now); err != nil {
		call.skip(c.model(call.firstModel()), err, 0)
		return call.finish(ctx, zero, nil, nil)
	}
	// The first round walks the cascade; a later round, after a backoff,
	// walks again the models that failed retryably while another model
	// could still answer (so a sick primary gets its retries too, after a
	// pause, and the call returns to it before giving up).
	var buf [4]retrySlot // rounds of short cascades stay off the heap
	slots := buf[:0]
	for _, m := range call.order() {
		slots = append(slots, retrySlot{m: m})
	}
	for round := 1; ; round++ {
		call.later = call.later[:0]
		for i := range slots {
			sl := &slots[i]
			if round > 1 && !c.budget.withdraw(call.now) {
				continue // the Client is retrying too much: no second rounds now
			}
			resp, next, err := call.retry(ctx, sl)
			switch next {
			case stepDone:
				return call.finish(ctx, resp, sl.m, nil)
			case stepStop:
				return call.finish(ctx, zero, nil, err)
			case stepProject:
				return call.finish(ctx, zero, nil, nil)
			case stepLater:
				call.later = append(call.later, *sl)
			}
		}
		if len(call.later) == 0 {
			break
		}
		switch err := call.pause(ctx, round); {
		case err == errNoTimeForRound:
			return call.finish(ctx, zero, nil, nil)
		case err != nil:
			return call.finish(ctx, zero, nil, err)
		}
		slots = append(slots[:0], call.later...)
	}
	switch resp, m, next, err := call.probeAllOpen(ctx); next {
	case stepDone:
		return call.finish(ctx, resp, m, nil)
	case stepStop:
		return call.finish(ctx, zero, nil, err)
	}
	return call.finish(ctx, zero, nil, nil)
}

// errNoTimeForRound: the backoff before another round would overrun the
// call's deadline.
var errNoTimeForRound = errors.New("geminiguard: no time left for another round")

// pause waits the backoff between two rounds of a call. It returns nil to
// start the next round; errNoTimeForRound, without waiting, when the wait
// would overrun the call's deadline (the last failure is then marked as cut
// short by it); the caller's context error, recorded, when it ended during
// the wait.
func (call *call[R]) pause(ctx context.Context, round int) error {
	c := call.c
	first := &call.later[0]
	d, _ := c.cfg.retry.retryDelay(0, first.prev, round, c.jitter.float64())
	if !call.now.Add(d).Before(call.deadline) {
		for i := len(call.attempts) - 1; i >= 0; i-- {
			if a := call.attempts[i]; !a.Skipped { // skips share their errors: never modify those
				if me, ok := a.Err.(*ModelError); ok {
					me.Err = &waitError{Err: me.Err, Wait: d}
				}
				break
			}
		}
		return errNoTimeForRound
	}
	for i := range call.later {
		call.later[i].prev, call.later[i].delay = d, 0
	}
	first.delay = d
	c.retrying(RetryEvent{Model: first.m.name, Attempt: first.tries, Err: call.attempts[len(call.attempts)-1].Err, Delay: d})
	if err := call.sleep(ctx, d); err != nil {
		return call.fail(first.m.name, err, d, 0)
	}
	return nil
}

// order returns the call's models: the first choice, then (unless only) the
// cascade.
func (call *call[R]) order() []*modelState {
	if call.only {
		return call.c.model(call.firstModel()).self
	}
	return call.c.order(call.first)
}

// hasNext reports whether a model after current in the call's order could
// take a request now (not open, not cooling down).
func (call *call[R]) hasNext(current *modelState) bool {
	now := call.now
	after := false
	for _, m := range call.order() {
		if after && m.cooling(now) == nil && m.breakers[call.endpoint].state(now) != StateOpen {
			return true
		}
		after = after || m == current
	}
	return false
}

// order returns the models of a call: first (when given), then the cascade
// in order without repeating first. It allocates only for a first choice
// other than the primary.
func (c *Client) order(first string) []*modelState {
	if first == "" || first == c.cascade[0] {
		return c.states
	}
	out := make([]*modelState, 0, len(c.states)+1)
	out = append(out, c.model(first))
	for _, m := range c.states {
		if m.name != first {
			out = append(out, m)
		}
	}
	return out
}

// cooling returns a *ModelError when the model is cooling down at now.
func (m *modelState) cooling(now time.Time) error {
	until, reason, ok := m.cool.until(now)
	if !ok {
		return nil
	}
	if e := m.coolErr.Load(); e != nil {
		if ce := e.Err.(*CoolingError); ce.Until.Equal(until) && ce.Reason == reason {
			return e // the same cool-down: share its error, immutable
		}
	}
	e := &ModelError{
		Model:   m.name,
		Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel},
		Err:     &CoolingError{Model: m.name, Until: until, Reason: reason},
	}
	m.coolErr.Store(e)
	return e
}

// projectCooling returns a *ModelError when the whole project is cooling down.
func (c *Client) projectCooling(now time.Time) error {
	until, reason, ok := c.project.until(now)
	if !ok {
		return nil
	}
	return &ModelError{
		Verdict: Verdict{Class: reason, Scope: ScopeProject},
		Err:     &CoolingError{Until: until, Reason: reason},
	}
}

// applyVerdict makes a failure's verdict reach past the call: cool-downs for
// the model or the project, and the limiter learning from a 429.
func (c *Client) applyVerdict(m *modelState, v Verdict, now time.Time) {
	if dim, ok := quotaDimOf(v.QuotaID); ok {
		if v.QuotaLimit > 0 {
			m.lim.learn(dim, v.QuotaLimit)
		}
		if v.Class == ClassRateLimit || v.Class == ClassDailyQuota {
			m.lim.drain(now, dim, coolDownUntil(v, now, c.cfg.projectCoolDown))
		}
	}
	if v.CoolDown == CoolDownNone {
		return
	}
	until := coolDownUntil(v, now, c.cfg.projectCoolDown)
	if v.Scope == ScopeProject {
		if c.project.set(until, v.Class) {
			c.cooledDown(CoolDownEvent{Until: until, Reason: v.Class})
		}
		return
	}
	if m.cool.set(until, v.Class) {
		c.cooledDown(CoolDownEvent{Model: m.name, Until: until, Reason: v.Class})
	}
}

// Shutdown is an announced retirement of a model.
type Shutdown struct {
	Date        time.Time // the day requests start failing (00:00 UTC of that day)
	Replacement string    // the model Google names as its replacement, "" when none
	Source      string    // where it was announced
}

// shutdownWarnDays is how close a shutdown must be for CheckCascade to warn.
const shutdownWarnDays = 90

// Shutdowns returns the built-in table of announced shutdown dates of the
// Gemini API (not Vertex AI), as read on the dates its Source fields give.
// Google moves these dates; WithShutdowns adds to or overrides the table.
func Shutdowns() map[string]Shutdown {
	const (
		official = "https://ai.google.dev/gemini-api/docs/deprecations (read 2026-11)"
		dec2026  = "https://dev.to/aideprecations/what-to-do-before-gemini-25-pro-and-25-flash-are-retired-on-december-1-2026-5gg9 (Gemini API deprecations, read 2026-11-10)"
		jun2026  = "https://docs.embabel.com (GEMINI_2_0_FLASH: shut down by Google on 2026-06-01, returns 404)"
	)
	day := func(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }
	return map[string]Shutdown{
		"gemini-1.5-pro":               {Date: day(2025, time.September, 24), Replacement: "gemini-2.5-pro", Source: official},
		"gemini-1.5-flash":             {Date: day(2025, time.September, 24), Replacement: "gemini-2.5-flash", Source: official},
		"gemini-1.5-flash-8b":          {Date: day(2025, time.September, 24), Replacement: "gemini-2.5-flash-lite", Source: official},
		"gemini-2.0-flash":             {Date: day(2026, time.June, 1), Replacement: "gemini-3.5-flash", Source: jun2026},
		"gemini-2.0-flash-001":         {Date: day(2026, time.June, 1), Replacement: "gemini-3.5-flash", Source: jun2026},
		"gemini-2.0-flash-lite":        {Date: day(2026, time.June, 1), Replacement: "gemini-2.5-flash-lite", Source: jun2026},
		"gemini-2.0-flash-lite-001":    {Date: day(2026, time.June, 1), Replacement: "gemini-2.5-flash-lite", Source: jun2026},
		"gemini-2.5-pro-preview-03-25": {Date: day(2025, time.December, 2), Replacement: "gemini-3.1-pro-preview", Source: official},
		"gemini-2.5-pro-preview-05-06": {Date: day(2025, time.December, 2), Replacement: "gemini-3.1-pro-preview", Source: official},
		"gemini-2.5-pro-preview-06-05": {Date: day(2025, time.December, 2), Replacement: "gemini-3.1-pro-preview", Source: official},
		"gemini-3-pro-preview":         {Date: day(2026, time.March, 9), Replacement: "gemini-3.1-pro-preview", Source: official},
		"gemini-2.5-pro":               {Date: day(2026, time.December, 1), Replacement: "gemini-3.8-flash", Source: dec2026},
		"gemini-2.5-flash":             {Date: day(2026, time.December, 1), Replacement: "gemini-3.5-flash-lite", Source: dec2026},
	}
}

func mergeShutdowns(extra map[string]Shutdown) map[string]Shutdown {
	table := Shutdowns()
	for k, v := range extra {
		table[strings.TrimPrefix(k, "models/")] = v
	}
	return table
}

// ErrModelNotFound: CheckCascade did not find a cascade model among the
// models the API lists for this key.
var ErrModelNotFound = errors.New("geminiguard: model not found")

// CascadeReport is what CheckCascade found.
type CascadeReport struct {
	Models   []ModelReport // one per cascade model, in order
	Warnings []string      // things to fix before they break: one generation only, shutdowns near
	Checked  time.Time
}

// Healthy reports whether every cascade model exists and none is past or
// within the warning window of its shutdown.
func (r *CascadeReport) Healthy() bool {
	for _, m := range r.Models {
		if !m.Exists || m.Verdict != "ok" {
			return false
		}
	}
	return true
}

// ModelReport is one cascade model as the API lists it.
type ModelReport struct {
	Model            string
	Exists           bool
	DisplayName      string
	Generation       string // "2.5", "2.0", ... read from the name; "" when unknown
	InputTokenLimit  int32
	OutputTokenLimit int32
	Shutdown         *Shutdown // announced shutdown, nil when none is known
	DaysLeft         int       // days until Shutdown (negative: past); 0 when none
	Verdict          string    // "ok", "missing", "shutdown soon", "shut down"
}

// CheckCascade lists the models the API offers to this key (paging with fresh
// List calls) and checks the cascade against them. It returns an error
// matching ErrModelNotFound that names every cascade model the API does not
// list (the report is returned too), or the API's error when listing failed.
// Warnings cover a cascade whose models all share one generation and models
// whose announced shutdown is within 90 days or past. A model found again
// ends its "missing" cool-down, and a successful listing ends a project
// cool-down.
func (c *Client) CheckCascade(ctx context.Context) (*CascadeReport, error) {
	listed, err := c.listModels(ctx)
	if err != nil {
		return nil, fmt.Errorf("geminiguard: listing models for the cascade check: %w", err)
	}
	now := time.Now()
	c.project.clear()
	report := &CascadeReport{Checked: now}
	var missing []string
	generations := map[string]bool{}
	for _, name := range c.cascade {
		mr := ModelReport{Model: name, Generation: generationOf(name), Verdict: "ok"}
		if info, ok := listed[name]; ok {
			mr.Exists, mr.DisplayName = true, info.DisplayName
			mr.InputTokenLimit, mr.OutputTokenLimit = info.InputTokenLimit, info.OutputTokenLimit
			c.model(name).cool.clear()
		} else {
			mr.Verdict = "missing"
			missing = append(missing, name)
			c.model(name).cool.set(coolDownUntil(Verdict{CoolDown: CoolDownUntilRecheck}, now, 0), ClassNotFound)
		}
		if sd, ok := c.shutdown[name]; ok {
			mr.Shutdown = &sd
			mr.DaysLeft = int(math.Ceil(sd.Date.Sub(now).Hours() / 24))
			switch {
			case mr.DaysLeft <= 0:
				mr.Verdict = "shut down"
				report.Warnings = append(report.Warnings, fmt.Sprintf("%s was shut down on %s; replace it with %s", name, sd.Date.Format(time.DateOnly), orNone(sd.Replacement)))
			case mr.DaysLeft <= shutdownWarnDays:
				if mr.Exists {
					mr.Verdict = "shutdown soon"
				}
				report.Warnings = append(report.Warnings, fmt.Sprintf("%s shuts down on %s (in %s); replace it with %s", name, sd.Date.Format(time.DateOnly), days(mr.DaysLeft), orNone(sd.Replacement)))
			}
		}
		if mr.Generation != "" {
			generations[mr.Generation] = true
		}
		report.Models = append(report.Models, mr)
	}
	if len(c.cascade) > 1 && len(generations) == 1 {
		for g := range generations {
			report.Warnings = append(report.Warnings, fmt.Sprintf("every cascade model is generation %s: one retirement or regional outage of that generation takes them all; add a model of another generation", g))
		}
	}
	if len(missing) > 0 {
		return report, fmt.Errorf("%w: the API does not list %s for this key: fix WithCascade (run examples/cascade-doctor to see what is listed)", ErrModelNotFound, strings.Join(missing, ", "))
	}
	return report, nil
}

func days(n int) string {
	if n == 1 {
		return "1 day"
	}
	return fmt.Sprintf("%d days", n)
}

func orNone(s string) string {
	if s == "" {
		return "a current model"
	}
	return s
}

// listPageSize is the page size CheckCascade asks for (the API's maximum is 1000).
const listPageSize = 1000

// listModels pages through the API's model list with fresh List calls: the
// SDK's Page.Next re-sends the first page token when one was given.
func (c *Client) listModels(ctx context.Context) (map[string]*genai.Model, error) {
	out := make(map[string]*genai.Model)
	token := ""
	for range 100 { // a bound against a server that never stops paging
		page, err := c.api.List(ctx, &genai.ListModelsConfig{PageSize: listPageSize, PageToken: token})
		if err != nil {
			return nil, err
		}
		for _, m := range page.Items {
			out[strings.TrimPrefix(m.Name, "models/")] = m
		}
		if page.NextPageToken == "" || page.NextPageToken == token {
			return out, nil
		}
		token = page.NextPageToken
	}
	return out, nil
}

// generationOf reads the generation from a model name: "gemini-2.5-flash" →
// "2.5". "" when the name does not follow the gemini-<version>-... pattern.
func generationOf(name string) string {
	rest, ok := strings.CutPrefix(name, "gemini-")
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, "-")
	if v == "" || !strings.ContainsAny(v[:1], "0123456789") {
		return ""
	}
	return v
}
