package fleet

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/geminiguard/geminiguard/internal/window"
)

// NewMemoryState returns a SharedState kept in this process's memory: the
// Clients given it share limits, cool-downs, breakers and learned limits as
// a fleet on Redis does, on the process's clock (fake time inside a
// testing/synctest bubble). Use it for several Clients of one project in
// one process, and to test fleet behaviour without Redis. It never fails;
// it is safe for concurrent use.
func NewMemoryState() SharedState {
	return &memoryState{projects: make(map[string]*memProject)}
}

// Fact lifetimes that the Fact itself does not state (see FactKind).
const (
	closedFactTTL = time.Minute
	limitFactTTL  = 24 * time.Hour
)

// windowSeconds is the span of the RPM and TPM windows, in seconds.
const windowSeconds = 60

type memoryState struct {
	mu       sync.Mutex // guards projects and all they hold, and subs
	projects map[string]*memProject
	subs     map[string]map[*factsFunc]struct{} // project → its subscribers' changed funcs
	answers  map[string]memAnswer               // project + "\x00" + key → idempotency answer (AnswerStore)
	swept    time.Time                          // when expired answers were last dropped
	vectors  memVectors                         // the semantic caches' entries (VectorStore)
	jobs     map[string]map[string]StoredJob    // project → batch name → its open batch (JobStore)
}

// Subscribe implements Subscriber: changed runs in the goroutine of the
// Publish that changed the facts, after the store's lock is released.
func (s *memoryState) Subscribe(project string, changed func()) (stop func()) {
	return s.SubscribeFacts(project, func(Fact, uint64, uint64) { changed() })
}

// SubscribeFacts implements FactSubscriber, as Subscribe: concurrent
// Publishes call changed concurrently, in either order.
func (s *memoryState) SubscribeFacts(project string, changed func(f Fact, from, to uint64)) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = make(map[string]map[*factsFunc]struct{})
	}
	if s.subs[project] == nil {
		s.subs[project] = make(map[*factsFunc]struct{})
	}
	key := &factsFunc{changed}
	s.subs[project][key] = struct{}{}
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.subs[project], key)
	}
}

// factsFunc is a subscription's changed func, by pointer: the key of
// memoryState.subs.
type factsFunc struct{ changed func(f Fact, from, to uint64) }

type memProject struct {
	daySpend, monthSpend map[int64]int64 // by the window's end, unix seconds
	version              uint64
	facts                map[FactKey]Fact
	replicas             map[string]time.Time // replica → live until
	models               map[string]*memModel
}

// dayKeep is how long a day's request count outlives the day, so that a
// replica whose clock lags still counts against the day it is in.
const dayKeep = time.Hour

// memModel is one model's fleet-wide counts.
type memModel struct {
	failures   int                   // consecutive failures across the fleet
	draws      int                   // how many of them are draws of their own (LeaseRequest.Draws)
	drawsUntil time.Time             // the latest DrawsUntil reported in the run
	answered   time.Time             // the latest answer any replica reported
	latencies  map[string]memLatency // replica → its latest record of the model's answer times
	awaiting   map[string]time.Time  // replica → until when it waits for an answer (LeaseRequest.Awaiting)
	secs       [windowSeconds]memSecond
	days       map[int64]int       // DayEnd (unix s) → requests in the day ending then
	probes     map[string]memProbe // endpoint → the slot's holder
}

// memLatency is a replica's record of a model's answer times, kept until
// until (LeaseRequest.Latency).
type memLatency struct {
	counts []LatencyCount
	until  time.Time
}

// latency keeps r's record of the model's answer times and fills l's with
// the other replicas' (LeaseRequest.Latency, Latencies).
func (m *memModel) latency(r LeaseRequest, now time.Time, l *Lease) {
	if r.Latency != nil {
		if m.latencies == nil {
			m.latencies = make(map[string]memLatency)
		}
		m.latencies[r.Replica] = memLatency{slices.Clone(r.Latency), now.Add(r.ReplicaTTL)}
	}
	if !r.Latencies {
		return
	}
	sum := make(map[[2]int]int64)
	for replica, rec := range m.latencies {
		switch {
		case !now.Before(rec.until):
			delete(m.latencies, replica)
		case replica != r.Replica:
			for _, c := range rec.counts {
				sum[[2]int{c.Class, c.Bucket}] += c.N
			}
		}
	}
	l.Latency = make([]LatencyCount, 0, len(sum))
	for k, n := range sum {
		l.Latency = append(l.Latency, LatencyCount{Class: k[0], Bucket: k[1], N: n})
	}
}

// memProbe is a held half-open probe slot.
type memProbe struct {
	replica string
	until   time.Time
}

// memSecond is one second of the RPM and TPM windows.
type memSecond struct {
	sec              int64
	requests, tokens int
}

func (s *memoryState) project(id string) *memProject {
	p := s.projects[id]
	if p == nil {
		p = &memProject{facts: make(map[FactKey]Fact), replicas: make(map[string]time.Time), models: make(map[string]*memModel)}
		s.projects[id] = p
	}
	return p
}

func (s *memoryState) Lease(ctx context.Context, r LeaseRequest) (Lease, error) {
	if err := ctx.Err(); err != nil {
		return Lease{}, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.project(r.Project)
	if r.Replica != "" {
		p.replicas[r.Replica] = now.Add(r.ReplicaTTL)
	}
	out := Lease{Version: p.version}
	for id, until := range p.replicas {
		if now.Before(until) {
			out.Replicas++
		} else {
			delete(p.replicas, id)
		}
	}
	if r.Version != p.version {
		out.Facts = []Fact{}
		for k, f := range p.facts {
			if now.Before(f.End()) {
				out.Facts = append(out.Facts, f)
			} else {
				delete(p.facts, k)
			}
		}
	}
	out.DaySpent = p.spend(&p.daySpend, r.SpendDay, r.Spent, now)
	out.MonthSpent = p.spend(&p.monthSpend, r.SpendMonth, r.Spent, now)
	if r.Reserve > 0 {
		switch {
		case r.MonthBudget > 0 && out.MonthSpent >= r.MonthBudget:
			out.BudgetRefused = "month"
		case r.DayBudget > 0 && out.DaySpent >= r.DayBudget:
			out.BudgetRefused = "day"
		default:
			out.DaySpent = p.spend(&p.daySpend, r.SpendDay, r.Reserve, now)
			out.MonthSpent = p.spend(&p.monthSpend, r.SpendMonth, r.Reserve, now)
		}
	}
	first := p.model(r.Model)
	first.health(r, now, &out)
	first.latency(r, now, &out)
	out.Requests, out.RetryAfter, out.Dimension = first.lease(r, now)
	if r.Next != nil {
		next := *r.Next
		next.Replica = r.Replica // the probe slot's holder
		if r.Requests <= 0 || out.Requests > 0 {
			next.Requests = 0 // only a refusal falls through
		}
		var n Lease
		nm := p.model(next.Model)
		nm.health(next, now, &n)
		n.Requests, n.RetryAfter, n.Dimension = nm.lease(next, now)
		out.Next = &n
	}
	return out, nil
}

// model returns the counts of the model named name, made when new.
func (p *memProject) model(name string) *memModel {
	m := p.models[name]
	if m == nil {
		m = &memModel{days: make(map[int64]int), probes: make(map[string]memProbe)}
		p.models[name] = m
	}
	return m
}

// health counts r's outcomes in the model's run of failures across the
// fleet (LeaseRequest.Failures, Answered, Draws) and keeps its Awaiting,
// and fills l's Failures, Draws, Answered and Awaiting (the others') at
// now.
func (m *memModel) health(r LeaseRequest, now time.Time, l *Lease) {
	if r.Answered.After(m.answered) {
		m.answered, m.failures, m.draws, m.drawsUntil = r.Answered, 0, 0, time.Time{}
	}
	if r.Failures > 0 {
		draws := max(r.Draws, 0)
		if draws > 0 && r.FailedSince.Before(m.drawsUntil) {
			draws-- // the first met the model in a draw counted already
		}
		starts := m.draws == 0
		m.failures += r.Failures
		m.draws = max(m.draws+draws, 1)
		if r.Draws > 0 || starts { // a report of no draw ends none: the replica's own draw, its report overtaken, is not its overlap
			m.drawsUntil = window.Later(m.drawsUntil, r.DrawsUntil)
		}
	}
	l.Failures, l.Draws, l.Answered = m.failures, m.draws, m.answered
	if r.Awaiting.After(now) {
		if m.awaiting == nil {
			m.awaiting = make(map[string]time.Time)
		}
		m.awaiting[r.Replica] = r.Awaiting
	} else {
		delete(m.awaiting, r.Replica)
	}
	for replica, until := range m.awaiting {
		switch {
		case !until.After(now):
			delete(m.awaiting, replica)
		case replica != r.Replica:
			l.Awaiting = window.Later(l.Awaiting, until)
		}
	}
}

// lease is Lease's step of one model at now: it counts r's report (debt,
// requests sent alone and unused) and grants up to r.Requests, returning
// the grant, or the refusal's wait and dimension.
func (m *memModel) lease(r LeaseRequest, now time.Time) (granted int, retry time.Duration, dim string) {
	sec := now.Unix()
	if r.Debt > 0 {
		m.at(sec).tokens += r.Debt
	}
	m.settle(r, sec, now)
	if r.Requests <= 0 {
		return 0, 0, ""
	}
	if r.Probe > 0 {
		if held := m.probes[r.Endpoint]; held.replica != r.Replica && now.Before(held.until) {
			return 0, held.until.Sub(now), "probe"
		}
	}
	for end := range m.days {
		if !now.Before(time.Unix(end, 0).Add(dayKeep)) {
			delete(m.days, end)
		}
	}
	day := 0
	if !r.DayEnd.IsZero() {
		day = m.days[r.DayEnd.Unix()]
	}
	reqs, tokens := m.sum(sec)
	n := r.Requests
	if r.RPM > 0 {
		n = min(n, r.RPM-reqs)
	}
	if r.TPM > 0 && r.Tokens > 0 {
		n = min(n, (r.TPM-tokens)/r.Tokens)
	}
	if r.RPD > 0 {
		n = min(n, r.RPD-day)
	}
	if n <= 0 {
		retry, dim = m.refusal(now, r, day, reqs, tokens)
		return 0, retry, dim
	}
	b := m.at(sec)
	b.requests += n
	b.tokens += n * r.Tokens
	if !r.DayEnd.IsZero() && now.Before(r.DayEnd.Add(dayKeep)) {
		m.days[r.DayEnd.Unix()] += n
	}
	if r.Probe > 0 {
		m.probes[r.Endpoint] = memProbe{replica: r.Replica, until: now.Add(r.Probe)}
	}
	return n, 0, ""
}

// settle counts r's requests sent alone in the window and r's day at once,
// and takes r's unused leased requests and tokens off the window's latest
// seconds and off r's day (none below zero).
func (m *memModel) settle(r LeaseRequest, sec int64, now time.Time) {
	day := !r.DayEnd.IsZero() && now.Before(r.DayEnd.Add(dayKeep))
	if r.Alone > 0 {
		m.at(sec).requests += r.Alone
		if day {
			m.days[r.DayEnd.Unix()] += r.Alone
		}
	}
	reqs, toks := max(r.Unused, 0), max(r.UnusedTokens, 0)
	for s := sec; s > sec-windowSeconds && reqs+toks > 0; s-- {
		b := &m.secs[s%windowSeconds]
		if b.sec != s {
			continue
		}
		n, t := min(b.requests, reqs), min(b.tokens, toks)
		b.requests, b.tokens, reqs, toks = b.requests-n, b.tokens-t, reqs-n, toks-t
	}
	if day && r.Unused > 0 {
		m.days[r.DayEnd.Unix()] -= min(m.days[r.DayEnd.Unix()], r.Unused)
	}
}

// spend adds spent (negative: given back) to the window of windows ending
// at end, never below zero, and returns the window's spend; nothing for a
// zero end. Windows ended over an hour ago are dropped.
func (p *memProject) spend(windows *map[int64]int64, end time.Time, spent int64, now time.Time) int64 {
	if end.IsZero() {
		return 0
	}
	if *windows == nil {
		*windows = make(map[int64]int64)
	}
	for e := range *windows {
		if time.Unix(e, 0).Add(time.Hour).Before(now) {
			delete(*windows, e)
		}
	}
	w := max((*windows)[end.Unix()]+spent, 0)
	(*windows)[end.Unix()] = w
	return w
}

// at returns the window's bucket of second sec, emptied if it held an older
// second.
func (m *memModel) at(sec int64) *memSecond {
	b := &m.secs[sec%windowSeconds]
	if b.sec != sec {
		*b = memSecond{sec: sec}
	}
	return b
}

// sum returns the requests and tokens of the 60 seconds ending with sec.
func (m *memModel) sum(sec int64) (requests, tokens int) {
	for _, b := range m.secs {
		if b.sec > sec-windowSeconds {
			requests += b.requests
			tokens += b.tokens
		}
	}
	return requests, tokens
}

// refusal returns how long until one request of r may be granted, and the
// dimension that waits longest.
func (m *memModel) refusal(now time.Time, r LeaseRequest, day, reqs, tokens int) (time.Duration, string) {
	var wait time.Duration
	dim := ""
	if r.RPD > 0 && day >= r.RPD {
		wait, dim = r.DayEnd.Sub(now), "rpd"
	}
	if d := m.freed(now, func(b memSecond) int { return b.requests }, reqs+1-r.RPM); r.RPM > 0 && d > wait {
		wait, dim = d, "rpm"
	}
	if d := m.freed(now, func(b memSecond) int { return b.tokens }, tokens+r.Tokens-r.TPM); r.TPM > 0 && d > wait {
		wait, dim = d, "tpm"
	}
	if dim == "" { // a single request larger than TPM: the window never frees enough
		dim = "tpm"
		wait = windowSeconds * time.Second
	}
	return wait, dim
}

// freed returns how long until the seconds leaving the window free at least
// need units of what count counts; 0 when need ≤ 0.
func (m *memModel) freed(now time.Time, count func(memSecond) int, need int) time.Duration {
	if need <= 0 {
		return 0
	}
	sec := now.Unix()
	for s := sec - windowSeconds + 1; s <= sec; s++ {
		b := m.secs[s%windowSeconds]
		if b.sec != s {
			continue
		}
		if need -= count(b); need <= 0 {
			return time.Unix(s+windowSeconds, 0).Sub(now)
		}
	}
	return 0
}

func (s *memoryState) Publish(ctx context.Context, project string, f Fact) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	if f.At.IsZero() {
		f.At = now
	}
	if to, ok := s.publish(project, f, now); ok {
		s.mu.Lock()
		var notify []func(Fact, uint64, uint64)
		for fn := range s.subs[project] {
			notify = append(notify, fn.changed)
		}
		s.mu.Unlock()
		for _, fn := range notify {
			fn(f, to-1, to)
		}
	}
	return nil
}

// publish merges f into project's facts at now, and reports whether it
// changed them, and the project's version after it.
func (s *memoryState) publish(project string, f Fact, now time.Time) (version uint64, changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.project(project)
	k := f.Key()
	if old, ok := p.facts[k]; ok && now.Before(old.End()) && !f.Replaces(old) {
		return 0, false
	}
	if !now.Before(f.End()) {
		return 0, false
	}
	p.facts[k] = f
	p.version++
	if f.Kind == FactOpen || f.Kind == FactClosed {
		if m := p.models[f.Model]; m != nil {
			delete(m.probes, f.Endpoint)
		}
	}
	return p.version, true
}

var _ AnswerStore = (*memoryState)(nil)

// memAnswer is an answer kept for an idempotency key, until expires.
type memAnswer struct {
	answer  []byte
	expires time.Time
}

// answerSweep is how often StoreAnswer drops the expired answers.
const answerSweep = time.Minute

// StoreAnswer implements AnswerStore; it fails only when ctx ended.
func (s *memoryState) StoreAnswer(ctx context.Context, project, key string, answer []byte, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.answers == nil {
		s.answers = make(map[string]memAnswer)
	}
	if now.Sub(s.swept) >= answerSweep {
		for k, a := range s.answers {
			if !now.Before(a.expires) {
				delete(s.answers, k)
			}
		}
		s.swept = now
	}
	s.answers[project+"\x00"+key] = memAnswer{answer: answer, expires: now.Add(ttl)}
	return nil
}

// LoadAnswer implements AnswerStore; it fails only when ctx ended.
func (s *memoryState) LoadAnswer(ctx context.Context, project, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.answers[project+"\x00"+key]
	if !ok || !now.Before(a.expires) {
		return nil, nil
	}
	return a.answer, nil
}
