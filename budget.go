package geminiguard

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/pacific"
)

// Budgets: what the Client's priced responses cost (cost.go, bill) is added
// up per Pacific day and per Pacific month, the calendar of the Gemini API's
// daily quotas. Near a budget the cascade steers to cheaper models; at it,
// no request is sent until the window ends. The spend is this Client's; in
// fleet mode (WithSharedState) it is the project's: each request's estimate
// is reserved against the project's total at admission, in one round trip
// to the shared state, and each round trip reports what this Client spent
// since the last less the reservations it settled, and brings back the
// fleet's total (fleet.go).

// Budget is a spend limit of the Client, in Micros, per day and per month
// on the Pacific calendar (days start at midnight America/Los_Angeles, like
// the API's daily quotas; months on the 1st). The zero value limits
// nothing and is refused by WithBudget.
type Budget struct {
	PerDay   Micros // spend per Pacific day; 0: no daily limit
	PerMonth Micros // spend per Pacific month; 0: no monthly limit
	// SteerAt is the fraction of a budget from which the cascade skips a
	// model when a later model of the call's order is cheaper (by Input +
	// Output rate at the time) and can take the request. 0: 0.8; 1: never
	// steer.
	SteerAt float64
}

// defaultSteerAt is Budget.SteerAt's default.
const defaultSteerAt = 0.8

// BudgetStats is the Client's spend against its Budget: in fleet mode
// (WithSharedState), the project's as this Client last heard it (the
// estimates then reserved by requests in flight across the fleet
// included) plus its own since.
type BudgetStats struct {
	Budget                            // the limits, SteerAt defaulted; zero without WithBudget
	SpentToday, SpentThisMonth Micros // in the current Pacific day and month
}

// spendBudget adds up the Client's spend per Pacific day and month. Safe
// for concurrent use; a nil *spendBudget (no budget) counts nothing and
// refuses nothing.
type spendBudget struct {
	b          Budget
	shared     bool       // fleet mode: the spend that counts is the project's; set by New
	onSpend    func()     // fleet mode: called, outside the lock, after spend was added; set by New
	mu         sync.Mutex // guards the fields below
	day, month Micros     // spent in the current windows, by this Client
	// reserved and typical are the estimated cost of the requests in
	// flight (budgetHold), counted against the budgets until their
	// responses are billed (inFlight), so that concurrent calls cannot all
	// pass a nearly spent budget: what each estimate fixed at admission,
	// and how many requests estimate their output as their model's typical
	// one.
	reserved         Micros
	typical          map[typicalHold]int
	dayEnd, monthEnd time.Time // when the current windows end; zero: none started

	// Fleet mode: the project's spend in the windows ending fleetDayEnd and
	// fleetMonthEnd at the last report, and this Client's since.
	fleetDay, fleetMonth       Micros
	fleetDayEnd, fleetMonthEnd time.Time
	unreported                 Micros
}

// newSpendBudget returns the tracker of b, nil for none.
func newSpendBudget(b *Budget) *spendBudget {
	if b == nil {
		return nil
	}
	return &spendBudget{b: *b}
}

// roll starts new windows for those that ended at now. Called with s.mu
// held.
func (s *spendBudget) roll(now time.Time) {
	if !now.Before(s.dayEnd) {
		s.day, s.dayEnd = 0, pacific.NextMidnight(now)
	}
	if !now.Before(s.monthEnd) {
		s.month, s.monthEnd = 0, pacific.NextMonth(now)
	}
}

// add counts cost, spent at the instant at.
func (s *spendBudget) add(at time.Time, cost Micros) {
	if s == nil || cost == 0 {
		return
	}
	s.mu.Lock()
	s.roll(at)
	s.day += cost
	s.month += cost
	if s.shared {
		s.unreported += cost
	}
	s.mu.Unlock()
	if s.onSpend != nil {
		s.onSpend()
	}
}

// spent returns the spend that counts in the current windows: this
// Client's, or in fleet mode the project's as last reported plus this
// Client's since, whichever is more (the shared state may have lost what
// it knew). Called with s.mu held, after roll.
func (s *spendBudget) spent() (day, month Micros) {
	day, month = s.day, s.month
	if s.fleetDayEnd.Equal(s.dayEnd) {
		day = max(day, s.fleetDay+s.unreported)
	}
	if s.fleetMonthEnd.Equal(s.monthEnd) {
		month = max(month, s.fleetMonth+s.unreported)
	}
	return day, month
}

// report returns, for a round trip to the shared state at now, what this
// Client spent since the last report and the windows it counts in, and
// clears it; reported then says how the round trip went. Nil-safe.
func (s *spendBudget) report(now time.Time) (spent Micros, dayEnd, monthEnd time.Time) {
	if s == nil {
		return 0, time.Time{}, time.Time{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	spent, s.unreported = s.unreported, 0
	return spent, s.dayEnd, s.monthEnd
}

// reported keeps the project's spend a round trip brought back (ok), or
// puts back what it failed to report. Nil-safe.
func (s *spendBudget) reported(ok bool, r fleet.LeaseRequest, l fleet.Lease) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.unreported += Micros(r.Spent)
		return
	}
	s.fleetDay, s.fleetDayEnd = Micros(l.DaySpent), r.SpendDay
	s.fleetMonth, s.fleetMonthEnd = Micros(l.MonthSpent), r.SpendMonth
}

// check returns a *budgetError when a budget is spent at now, and whether
// the spend has reached SteerAt of a budget; the estimated cost of the
// requests in flight (inFlight) counts as spent.
func (s *spendBudget) check(now time.Time) (exhausted *budgetError, steer bool) {
	if s == nil {
		return nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	day, month := s.spent()
	inFlight := s.inFlight(now)
	day, month = day+inFlight, month+inFlight
	for _, w := range [...]struct {
		name         string
		spent, limit Micros
		end          time.Time
	}{{"month", month, s.b.PerMonth, s.monthEnd}, {"day", day, s.b.PerDay, s.dayEnd}} {
		switch {
		case w.limit == 0:
		case w.spent >= w.limit:
			if exhausted == nil { // the month first: it ends last
				exhausted = &budgetError{Window: w.name, Spent: w.spent - inFlight, InFlight: inFlight, Limit: w.limit, Until: w.end}
			}
		case float64(w.spent) >= s.b.SteerAt*float64(w.limit):
			steer = true
		}
	}
	return exhausted, steer
}

// checkAlone returns a *budgetError when this Client, the shared state not
// answering, may not hold est more: what it spent and holds since its last
// report that reached the store, est included, is kept within its share of
// what the project's budgets had left then (the room divided by share, the
// replicas fleet.share counts), so that replicas cut off together cannot
// each spend the project's whole remainder.
func (s *spendBudget) checkAlone(now time.Time, est Micros, share int) *budgetError {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	own := s.unreported + s.inFlight(now)
	for _, w := range [...]struct {
		name     string
		heard    Micros
		heardEnd time.Time
		limit    Micros
		end      time.Time
	}{{"month", s.fleetMonth, s.fleetMonthEnd, s.b.PerMonth, s.monthEnd}, {"day", s.fleetDay, s.fleetDayEnd, s.b.PerDay, s.dayEnd}} {
		if w.limit == 0 {
			continue
		}
		heard := w.heard
		if !w.heardEnd.Equal(w.end) {
			heard = 0 // nothing heard of this window yet
		}
		if own+est > (w.limit-heard)/Micros(max(share, 1)) {
			return &budgetError{Window: w.name, Spent: heard + own, Limit: w.limit, Until: w.end}
		}
	}
	return nil
}

// budgetHold is the estimated cost of one request, reserved against the
// budgets (spendBudget.reserve) from its admission until its response is
// billed. Its zero value holds nothing. In fleet mode the estimate is
// reserved against the project's total in the shared state (shared), and
// release gives back, with the next report, what the response did not
// spend of it; while the store is unreachable it is held locally, as
// without a fleet.
type budgetHold struct {
	s      *spendBudget
	fixed  Micros       // what the estimate fixed at admission: the input, and a bounded output
	typ    *typicalHold // the output estimated as the model's typical one when billed; nil: none
	shared Micros       // the estimate reserved in the project's total (fixed and typ then hold nothing here); 0: none
}

// typicalHold names the requests in flight whose output is estimated as
// their model's typical output (modelSpend.typicalOutput), priced as the
// model's at the time of each check: a hold taken before the model's first
// answer counts its typical output from that answer on.
type typicalHold struct {
	m    *modelState
	tier genai.ServiceTier
	long bool // the prompt is priced at the long-prompt rates
}

// reserve counts h's estimate against the budgets until h is released,
// and returns h bound to s. Nil-safe: no budget holds nothing.
func (s *spendBudget) reserve(h budgetHold) budgetHold {
	if s == nil || (h.fixed <= 0 && h.typ == nil) {
		return budgetHold{}
	}
	s.mu.Lock()
	s.reserved += h.fixed
	if h.typ != nil {
		if s.typical == nil {
			s.typical = make(map[typicalHold]int)
		}
		s.typical[*h.typ]++
	}
	s.mu.Unlock()
	h.s = s
	return h
}

// release gives the hold's estimate back, once: the request's response, if
// any, was billed (or it never left). A shared reservation is given back
// to the project's total with the next report (the real cost, billed on
// its own, less the reservation), due within leaseFor. Safe to call again,
// and on the zero hold.
func (h *budgetHold) release() {
	s := h.s
	if s == nil {
		return
	}
	s.mu.Lock()
	s.reserved -= h.fixed
	if h.typ != nil {
		if s.typical[*h.typ]--; s.typical[*h.typ] == 0 {
			delete(s.typical, *h.typ)
		}
	}
	s.unreported -= h.shared
	s.mu.Unlock()
	if h.shared != 0 && s.onSpend != nil {
		s.onSpend()
	}
	*h = budgetHold{}
}

// inFlight returns the estimated cost at now of the requests in flight.
// Called with s.mu held.
func (s *spendBudget) inFlight(now time.Time) Micros {
	total := s.reserved
	for t, n := range s.typical {
		total += Micros(n) * t.cost(now)
	}
	return total
}

// cost returns the cost at now of one typical output of t's model, 0 while
// the model has answered nothing or has no price.
func (t typicalHold) cost(now time.Time) Micros {
	out, _ := t.m.spent.typicalOutput()
	p, ok := t.m.price(now)
	if !ok || out <= 0 {
		return 0
	}
	prompt := int64(0)
	if t.long {
		prompt = int64(p.LongPrompt) + 1
	}
	return p.cost(Tokens{Output: out}, prompt, t.tier)
}

// holdBudget reserves into a.hold the estimated cost at call.now of the
// generate request the call is about to send to m: its input tokens as the
// limiter estimates them (estimateTokens), and its output (thinking
// included) as m's typical answer (modelSpend.typicalOutput, as of each
// later check), or the config's MaxOutputTokens when it sets one and m's
// typical answer is longer or not known yet. It holds nothing when the
// Client has no budget or m has no price. In fleet mode the estimate (the
// typical output priced at call.now) is reserved against the project's
// total in one round trip: when the project's budget is spent, holdBudget
// holds nothing and returns stepProject with the error to record; when the
// store does not answer, the estimate is held locally (the budget step
// checked the project's spend as last heard).
func (call *call[R]) holdBudget(ctx context.Context, m *modelState, a *admission) (step, error) {
	h := call.estimate(m)
	c := call.c
	if h == (budgetHold{}) || c.fleet == nil {
		a.hold = c.spending.reserve(h)
		return stepGo, nil
	}
	est := h.fixed
	if h.typ != nil {
		est += h.typ.cost(call.now)
	}
	b := c.spending.b
	l, ok := c.sync(ctx, m, fleet.LeaseRequest{Reserve: int64(est), DayBudget: int64(b.PerDay), MonthBudget: int64(b.PerMonth)})
	call.now = time.Now() // after the round trip
	switch {
	case !ok:
		if err := c.spending.checkAlone(call.now, est, c.fleet.share()); err != nil {
			return stepProject, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassBudgetExhausted, Scope: ScopeProject}, Err: err}
		}
		a.hold = c.spending.reserve(h)
	case l.BudgetRefused != "":
		err := &budgetError{Window: l.BudgetRefused, Spent: Micros(l.DaySpent), Limit: b.PerDay, Until: pacific.NextMidnight(call.now)}
		if l.BudgetRefused == "month" {
			err.Spent, err.Limit, err.Until = Micros(l.MonthSpent), b.PerMonth, pacific.NextMonth(call.now)
		}
		return stepProject, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassBudgetExhausted, Scope: ScopeProject}, Err: err}
	default:
		a.hold = budgetHold{s: c.spending, shared: est}
	}
	return stepGo, nil
}

// estimate returns the hold holdBudget reserves for the request the call
// is about to send to m, not yet reserved; the zero hold when the Client
// has no budget, the request is not a generate one, or m has no price.
func (call *call[R]) estimate(m *modelState) budgetHold {
	if call.c.spending == nil || call.endpoint != endpointGenerate {
		return budgetHold{}
	}
	p, ok := m.price(call.now)
	if !ok {
		return budgetHold{}
	}
	in := int64(call.tokens)
	if in < 0 {
		in = int64(estimateTokens(call.contents, call.user))
	}
	tier := serviceTier(call.user)
	tk := Tokens{Input: in}
	var typ *typicalHold
	out, learned := m.spent.typicalOutput()
	if cfg := call.user; cfg != nil && cfg.MaxOutputTokens > 0 && (!learned || out > int64(cfg.MaxOutputTokens)) {
		tk.Output = int64(cfg.MaxOutputTokens)
	} else {
		typ = &typicalHold{m: m, tier: tier, long: p.LongPrompt > 0 && in > int64(p.LongPrompt)}
	}
	return budgetHold{fixed: p.cost(tk, in, tier), typ: typ}
}

// stats returns the spend at now.
func (s *spendBudget) stats(now time.Time) BudgetStats {
	if s == nil {
		return BudgetStats{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.roll(now)
	day, month := s.spent()
	return BudgetStats{Budget: s.b, SpentToday: day, SpentThisMonth: month}
}

// budgetError says why a call sent nothing: a budget is spent until Until.
// It matches ErrBudgetExhausted.
type budgetError struct {
	Window       string // "day" or "month"
	Spent, Limit Micros
	InFlight     Micros // the estimated cost of the requests in flight, counted as spent
	Until        time.Time
}

func (e *budgetError) Error() string {
	budget := "monthly"
	if e.Window == "day" {
		budget = "daily"
	}
	var inFlight string
	if e.InFlight > 0 {
		inFlight = fmt.Sprintf(" and %s committed to requests in flight", e.InFlight)
	}
	return fmt.Sprintf("geminiguard: budget exhausted: %s spent%s of the %s budget %s, until %s (WithBudget)",
		e.Spent, inFlight, budget, e.Limit, e.Until.UTC().Format(time.RFC3339))
}

// Is reports ErrBudgetExhausted.
func (e *budgetError) Is(target error) bool { return target == ErrBudgetExhausted }

// steeredError says why a model was skipped without a request: the spend
// neared a budget and a later model of the call is cheaper.
type steeredError struct {
	Model, Cheaper string
}

func (e *steeredError) Error() string {
	return fmt.Sprintf("geminiguard: model %s skipped for the cheaper %s: the spend is past Budget.SteerAt", e.Model, e.Cheaper)
}

// overBudget returns stepGo when the budget lets the call send its request
// to m now; else, with the error to record, stepProject when a budget is
// spent (no model may be sent anything), or stepNext when the spend nears
// a budget and a later model of the call's order is cheaper and can take
// the request. countTokens is free: never refused.
func (call *call[R]) overBudget(ctx context.Context, m *modelState) (step, error) {
	if !call.endpoint.metered() {
		return stepGo, nil
	}
	if c := call.c; c.spending != nil && c.fleet != nil && c.fleet.due(call.now) {
		c.sync(ctx, m, fleet.LeaseRequest{}) // the project's spend, as of now
		call.now = time.Now()                // after the round trip
	}
	exhausted, steer := call.c.spending.check(call.now)
	if exhausted != nil {
		return stepProject, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassBudgetExhausted, Scope: ScopeProject}, Err: exhausted}
	}
	if !steer || call.endpoint != endpointGenerate {
		return stepGo, nil
	}
	if cheaper := call.cheaperNext(m); cheaper != nil {
		return stepNext, &ModelError{Model: m.name, Verdict: Verdict{Class: ClassBudgetExhausted, Scope: ScopeModel},
			Err: &steeredError{Model: m.name, Cheaper: cheaper.name}}
	}
	return stepGo, nil
}

// cheaperNext returns a model after m in the call's order that can take a
// request now (not open, not cooling down) and whose Input + Output rate
// now is below m's, nil when none. A model without a known price is never
// cheaper, nor steered from.
func (call *call[R]) cheaperNext(m *modelState) *modelState {
	now := call.now
	rate := func(m *modelState) (Micros, bool) {
		p, ok := m.price(now)
		return p.Input + p.Output, ok
	}
	own, ok := rate(m)
	if !ok {
		return nil
	}
	after := false
	for _, n := range call.order() {
		if after && n.cooling(now) == nil && n.breakers[call.endpoint].state(now) != StateOpen {
			if r, ok := rate(n); ok && r < own {
				return n
			}
		}
		after = after || n == m
	}
	return nil
}
