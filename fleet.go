package geminiguard

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/internal/latency"
	"github.com/geminiguard/geminiguard/internal/pacific"
	"github.com/geminiguard/geminiguard/internal/window"
)

// Fleet mode (WithSharedState). The gate consults the fleet after the
// Client's own limiter: a metered request takes one request (and its input
// tokens) from a lease of the model's fleet-wide limits, leased in small
// batches from the shared state so that a steady load costs a fraction of
// a round trip per call; a half-open breaker's probe takes the model's
// fleet-wide probe slot. Every round trip also brings back what other
// replicas published since the last one (cool-downs, open and closed
// breakers, learned limits), applied to this Client's own state, and what
// this Client learns from a response is published the moment it learns it.
// When the store fails or is slow, it is put behind a breaker of its own and
// the Client carries on alone, each limit divided by the replicas last seen
// live, counting what it lets through uncoordinated, until the store answers
// again.

// errFleetSlow is why a call skipped a model whose lease the shared state
// did not answer, the store's breaker still closed.
var errFleetSlow = errors.New("geminiguard: the shared state did not answer the lease: the next model answers rather than spend the fleet's quota uncoordinated")

// Fleet tunables.
const (
	// leaseFor is how long leased requests stay usable, and how often at
	// least the Client reads the fleet's facts while calls flow.
	leaseFor = time.Second
	// maxLeaseBatch bounds the requests leased in one round trip.
	maxLeaseBatch = 16
	// replicaTTL is how long a replica counts as live after its last round
	// trip.
	replicaTTL = time.Minute
	// coldShare is what a replica that has not seen the fleet, and was
	// given no WithFleetSize, divides each limit by while alone.
	coldShare = 10
	// shareLatencyEvery is how often at most a replica shares its record
	// of a model's answer times and its throttle's window with the fleet
	// and reads the others' (fleet.LeaseRequest.Latency), on a round trip
	// for that model.
	shareLatencyEvery = time.Second
	// recordWantedFor is how long a FactRecordWanted a replica publishes
	// asks the fleet to share its record of a model after each attempt to
	// it: each publish costs every replica a round trip (the
	// notification's), so a fleet hears one at most this often a model
	// while an attempt sent before the model's deadlines were learned
	// waits past the answers its replica knows.
	recordWantedFor = 10 * time.Second
	// throttleClass is the first class of a replica's record of a model
	// (fleet.LatencyCount) that holds its throttle's window of the model's
	// generate endpoint, after the classes of answer times: the requests,
	// accepts, slow requests and requests kept back (throttleClass+0…3) of
	// each span, by its start in Unix seconds as the bucket.
	throttleClass = 1 << 10
	// flightClass is the first class of a replica's record of a model that
	// holds its attempts in flight (latency.Learner.InFlight): flightClass
	// plus the class, by when each was sent in Unix milliseconds modulo
	// 2³¹ (flightBuckets) as the bucket.
	flightClass   = 1 << 11
	flightBuckets = 1 << 31
)

// StoreSettings' defaults.
const (
	defaultStoreTimeout    = 30 * time.Millisecond
	defaultStoreMaxTimeout = 250 * time.Millisecond
	defaultStoreWarmUp     = time.Second
	defaultStoreFailures   = 3
	defaultStoreAloneFor   = 2 * time.Second
)

// storeSettingsOf returns s's settings (SettledState) with defaults for
// zero fields, or what is wrong with them or with s.
func storeSettingsOf(s fleet.SharedState) (fleet.StoreSettings, error) {
	if rv := reflect.ValueOf(s); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return fleet.StoreSettings{}, fmt.Errorf("geminiguard: WithSharedState(%T(nil)): pass a store made by its constructor (redisstore.New, fleet.NewMemoryState)", s)
	}
	var st fleet.StoreSettings
	if ss, ok := s.(fleet.SettledState); ok {
		var err error
		if st, err = ss.StoreSettings(); err != nil {
			return fleet.StoreSettings{}, fmt.Errorf("geminiguard: WithSharedState: %w", err)
		}
	}
	if st.Timeout < 0 || st.MaxTimeout < 0 || st.WarmUp < 0 || st.AloneFor < 0 || st.Failures < 0 {
		return fleet.StoreSettings{}, fmt.Errorf("geminiguard: WithSharedState: negative store settings %+v: use 0 for the defaults", st)
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&st.Timeout, defaultStoreTimeout)
	def(&st.MaxTimeout, max(defaultStoreMaxTimeout, st.Timeout))
	def(&st.WarmUp, defaultStoreWarmUp)
	def(&st.AloneFor, defaultStoreAloneFor)
	if st.Failures == 0 {
		st.Failures = defaultStoreFailures
	}
	if st.MaxTimeout < st.Timeout {
		return fleet.StoreSettings{}, fmt.Errorf("geminiguard: WithSharedState: the store's MaxTimeout %v is below its Timeout %v", st.MaxTimeout, st.Timeout)
	}
	return st, nil
}

// fleetLink is a Client's part in its fleet. Safe for concurrent use.
type fleetLink struct {
	store     fleet.SharedState
	settings  fleet.StoreSettings
	fleetSize int // WithFleetSize's; 0: coldShare
	project   string
	replica   string
	health    *breaker // the store's: open while it fails; the Client then carries on alone
	rtt       rttBound // the bound of each round trip

	version  atomic.Uint64 // the project's version whose facts are applied
	synced   atomic.Int64  // unix nanoseconds of the last round trip that answered
	first    atomic.Int64  // unix nanoseconds of the first round trip that answered; 0 before
	failEnd  atomic.Int64  // unix nanoseconds at which the last failure counted by health ended
	replicas atomic.Int64  // live replicas at the last lease, this one included; 0 before the first
	peak     replicaPeak

	roundTrips    atomic.Int64
	failures      atomic.Int64
	uncoordinated atomic.Int64

	unsubscribe func() // ends the store's notifications (Subscriber), once; nil when none

	// A report of this Client's spend (WithBudget) due within leaseFor, so
	// that a replica that spends and goes quiet still tells the fleet.
	reportMu    sync.Mutex
	reportTimer *time.Timer // nil: none pending
	closed      bool        // Close ran: no more reports

	pendingMu sync.Mutex                   // guards pending
	pending   map[fleet.FactKey]fleet.Fact // facts learned while the store was unreachable, to publish on rejoin
}

// rttBound learns the bound of a round trip to the store from the round
// trips' latency, as TCP's retransmission timer does (RFC 6298): the
// smoothed latency plus four of its mean deviations, within [floor, cap],
// doubled after a timeout until a round trip answers, and the cap before
// the first answer (as TCP's timer starts at a second). A cold or busy
// connection's slow round trip so widens the bound instead of sending the
// Client off alone. Safe for concurrent use.
type rttBound struct {
	mu           sync.Mutex    // guards the fields below
	floor, cap   time.Duration // StoreSettings.Timeout and MaxTimeout
	srtt, rttvar time.Duration
	learned      bool          // srtt and rttvar hold an answer's latency
	backoff      time.Duration // the bound after a timeout, until an answer; 0: none
}

// bound returns the bound of the next round trip.
func (b *rttBound) bound() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.backoff > 0 {
		return b.backoff
	}
	if !b.learned {
		return b.cap
	}
	return min(max(b.srtt+4*b.rttvar, b.floor), b.cap)
}

// answered learns the latency d of a round trip that answered.
func (b *rttBound) answered(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backoff = 0
	if !b.learned {
		b.srtt, b.rttvar, b.learned = d, d/2, true
		return
	}
	dev := b.srtt - d
	if dev < 0 {
		dev = -dev
	}
	b.rttvar = (3*b.rttvar + dev) / 4
	b.srtt = (7*b.srtt + d) / 8
}

// timedOut doubles the bound after a round trip bounded by was timed out.
func (b *rttBound) timedOut(was time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.backoff = min(max(b.backoff, 2*was), b.cap)
}

// replicaPeak is the most replicas seen live over about the last minute:
// the largest count of the current unix minute and the one before, among
// those answered (when the store stops answering, the last counts stay).
// Safe for concurrent use.
type replicaPeak struct {
	mu        sync.Mutex // guards the fields below
	minute    int64      // the unix minute of cur
	cur, prev int
}

// saw records n replicas live at now.
func (p *replicaPeak) saw(n int, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch m := now.Unix() / 60; {
	case m == p.minute:
	case m == p.minute+1:
		p.minute, p.prev, p.cur = m, p.cur, 0
	default:
		p.minute, p.prev, p.cur = m, 0, 0
	}
	p.cur = max(p.cur, n)
}

// most returns the most replicas seen.
func (p *replicaPeak) most() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return max(p.cur, p.prev)
}

// share returns what this replica divides each limit by, for what it
// takes on its own (the store unreachable) and for the size of its leases:
// the most replicas seen live over about the last minute, and, until it
// has seen the fleet (round trips that answered over leaseFor, so that
// replicas started with it have registered), at least the WithFleetSize
// hint, else coldShare. Never the whole limit before the fleet is known.
func (f *fleetLink) share() int {
	n := f.peak.most()
	if first := f.first.Load(); first == 0 || f.synced.Load()-first < int64(leaseFor) {
		n = max(n, cmp.Or(f.fleetSize, coldShare))
	}
	return max(n, 1)
}

// reportSpendSoon makes sure this Client's spend reaches the fleet within
// leaseFor: one round trip then, unless one is pending already; any round
// trip before it reports the spend too.
func (c *Client) reportSpendSoon() {
	f := c.fleet
	f.reportMu.Lock()
	defer f.reportMu.Unlock()
	if f.reportTimer != nil || f.closed {
		return
	}
	f.reportTimer = time.AfterFunc(leaseFor, func() {
		f.reportMu.Lock()
		f.reportTimer = nil
		f.reportMu.Unlock()
		c.sync(context.Background(), c.states[0], fleet.LeaseRequest{})
	})
}

// close stops the fleet's background work: notifications and a pending
// report.
func (f *fleetLink) close() {
	if f.unsubscribe != nil {
		f.unsubscribe()
	}
	f.reportMu.Lock()
	defer f.reportMu.Unlock()
	f.closed = true
	if f.reportTimer != nil {
		f.reportTimer.Stop()
		f.reportTimer = nil
	}
}

// FleetStats are a Client's figures in fleet mode (WithSharedState); zero
// without it.
type FleetStats struct {
	Connected bool // the shared state answered the last call made to it (false while the Client carries on alone)
	Replicas  int  // replicas live at the last lease, this one included (0 before the first)
	// RoundTrips counts calls to the shared state, and Failures those that
	// failed or timed out.
	RoundTrips, Failures int64
	// Uncoordinated counts requests the Client let through on its own
	// limits (each divided by Replicas) while the shared state was
	// unreachable.
	Uncoordinated int64
}

// newFleet returns the fleet part of a Client, nil without a store. project
// names the Google project: a hash, never a key.
func newFleet(store fleet.SharedState, project string, fleetSize int) *fleetLink {
	if store == nil {
		return nil
	}
	st, _ := storeSettingsOf(store) // WithSharedState refused the store when it errs
	return &fleetLink{
		store:     store,
		settings:  st,
		fleetSize: fleetSize,
		project:   project,
		replica:   fmt.Sprintf("%016x", rand.Uint64()),
		health:    newBreaker(BreakerSettings{FailureThreshold: st.Failures, OpenFor: st.AloneFor, HalfOpenProbes: 1, DeadAfter: -1}),
		rtt:       rttBound{floor: st.Timeout, cap: st.MaxTimeout},
	}
}

// joinFleet makes New's one warm-up round trip to the store, within ctx and
// bounded by StoreSettings.WarmUp: the replica registers and reads the
// project's facts before its first call, on a connection warmed up. When
// the store does not answer, the Client starts alone (for AloneFor, on a
// conservative share: see fleet.share). Then it subscribes (Subscriber).
func (c *Client) joinFleet(ctx context.Context) {
	f := c.fleet
	if f == nil {
		return
	}
	if _, ok := c.roundTrip(ctx, c.states[0], nil, fleet.LeaseRequest{}, f.settings.WarmUp); !ok && ctx.Err() == nil {
		now := time.Now()
		if tr := f.health.openTill(now, now, now.Add(f.settings.AloneFor), false); tr != nil {
			c.fleetChanged(ctx, tr, errors.New("geminiguard: the warm-up round trip to the shared state failed"))
		}
	}
	c.subscribe()
}

// subscribe asks the store, when it is a Subscriber, to tell c at once when
// the project's facts change: c then reads them in one round trip, so that
// no leased request goes to a model another replica found exhausted; a
// FactSubscriber's change applies without one when c is at the version
// before it (notified). Close ends it. A Subscriber returns at once (see
// Subscriber).
func (c *Client) subscribe() {
	if c.fleet == nil {
		return
	}
	m := c.states[0] // any model: a round trip returns the project's facts
	var stop func()
	switch s := c.fleet.store.(type) {
	case fleet.FactSubscriber:
		// No lock: a change is applied at the version before it only, and
		// the handler may run inside a publish of this Client's (a store
		// that tells in the publisher's goroutine) or call hooks.
		stop = s.SubscribeFacts(c.fleet.project, func(f fleet.Fact, from, to uint64) {
			if !c.notified(f, from, to) {
				c.sync(context.Background(), m, fleet.LeaseRequest{})
			}
		})
	case fleet.Subscriber:
		stop = s.Subscribe(c.fleet.project, func() { c.sync(context.Background(), m, fleet.LeaseRequest{}) })
	default:
		return
	}
	c.fleet.unsubscribe = sync.OnceFunc(stop)
}

// notified applies fact f, told as the change of the project's facts from
// version from to version to, when this Client is at from: what a round
// trip would return at to is what it holds then (facts are applied whole,
// and f is the one that changed). Applied, then the version stored, as a
// round trip's are (roundTrip). It reports false when it did not apply it
// (the change not known, or the Client at another version): the Client
// then reads the facts.
func (c *Client) notified(f fleet.Fact, from, to uint64) bool {
	if to == 0 || c.fleet.version.Load() != from {
		return false
	}
	c.apply(context.Background(), []fleet.Fact{f})
	c.fleet.version.CompareAndSwap(from, to) // a round trip meanwhile read them all, and stored its version
	return true
}

// projectOf returns the id under which the project an SDK client calls
// shares its state: a hash of what identifies the project (named, as
// WithProject gave it; else the API key, or the Vertex AI project and
// location), so that no key reaches the store.
func projectOf(cc genai.ClientConfig, named string) string {
	id := "gemini\x00" + cc.APIKey
	switch {
	case named != "":
		id = "named\x00" + named
	case cc.Backend == genai.BackendVertexAI:
		id = "vertex\x00" + cc.Project + "\x00" + cc.Location + "\x00" + cc.APIKey
	}
	h := sha256.Sum256([]byte("geminiguard project\x00" + id))
	return hex.EncodeToString(h[:12])
}

// call runs fn against the store bounded by the learned bound and behind the store's breaker. It reports whether the store
// answered; false means the Client carries on alone. A ctx that ends first
// says nothing about the store; round trips that fail together (begun
// before the last counted failure ended: one stall of the store) count once
// for the breaker.
func (f *fleetLink) call(ctx context.Context, c *Client, fn func(ctx context.Context) error) bool {
	return f.callWithin(ctx, c, 0, true, fn)
}

// callWithin is call, bounded by warmUp instead when positive: New's first
// round trip, whose latency teaches nothing of a warm connection's. The
// first round trip after carrying on alone is bounded by MaxTimeout. When
// fn panics, the round trip counts as failed for the store's breaker (its
// probe slot given back) and the panic goes on. A round trip that reads the
// fleet's facts (facts) counts as the latest that did (due) when it
// answers; one that shares a record alone (Client.shareRecord) does not.
func (f *fleetLink) callWithin(ctx context.Context, c *Client, warmUp time.Duration, facts bool, fn func(ctx context.Context) error) bool {
	start := time.Now()
	p, _, err := f.health.allow(start)
	if err != nil {
		return false
	}
	bound := warmUp
	switch {
	case bound > 0:
	case p.Probe():
		bound = f.settings.MaxTimeout // the first try after carrying on alone: a cold connection, maybe a restarted server
	default:
		bound = f.rtt.bound()
	}
	sctx, cancel := context.WithTimeout(ctx, bound)
	settled := false
	defer func() {
		if !settled { // fn panicked: the round trip failed, and the panic goes on
			cancel()
			f.health.done(p, time.Now(), outcomeFailure)
		}
	}()
	err = fn(sctx)
	settled = true
	timedOut := sctx.Err() != nil
	cancel()
	f.roundTrips.Add(1)
	now := time.Now()
	o := outcomeSuccess
	switch {
	case err == nil:
		if facts {
			f.synced.Store(now.UnixNano())
			f.first.CompareAndSwap(0, now.UnixNano())
		}
		if warmUp <= 0 {
			f.rtt.answered(now.Sub(start))
		}
	case callerDone(ctx, now):
		o = outcomeIgnore // the caller gave up: nothing said of the store
	default:
		f.failures.Add(1)
		if timedOut {
			f.rtt.timedOut(bound)
		}
		o = outcomeIgnore
		for e := f.failEnd.Load(); start.UnixNano() >= e; e = f.failEnd.Load() {
			if f.failEnd.CompareAndSwap(e, now.UnixNano()) {
				o = outcomeFailure
				break
			}
		}
	}
	if tr := f.health.done(p, now, o); tr != nil {
		c.fleetChanged(ctx, tr, err)
	}
	return err == nil
}

// fleetChanged logs the store's breaker moving: the Client carrying on
// alone, or rejoining.
func (c *Client) fleetChanged(ctx context.Context, tr *transition, err error) {
	switch State(tr.To) {
	case StateOpen:
		c.log(ctx, slog.LevelWarn, "geminiguard: shared state unreachable; carrying on alone with each limit divided by share",
			slog.Int("share", c.fleet.share()), slog.Duration("retry_in", c.fleet.settings.AloneFor), slog.String("error", c.redact(err)))
	case StateClosed:
		c.log(ctx, slog.LevelInfo, "geminiguard: shared state reachable again; limits are the fleet's",
			slog.Int64("uncoordinated", c.fleet.uncoordinated.Load()))
	}
}

// due reports whether the last round trip that answered is leaseFor or
// more before now: the facts (and the project's spend) are to be read again.
func (f *fleetLink) due(now time.Time) bool {
	return time.Duration(now.UnixNano()-f.synced.Load()) >= leaseFor
}

// stats returns the fleet's figures.
func (f *fleetLink) stats() FleetStats {
	if f == nil {
		return FleetStats{}
	}
	return FleetStats{
		Connected:     f.health.state(time.Now()) == StateClosed,
		Replicas:      int(f.replicas.Load()),
		RoundTrips:    f.roundTrips.Load(),
		Failures:      f.failures.Load(),
		Uncoordinated: f.uncoordinated.Load(),
	}
}

// modelLease is what a Client holds of one model's fleet-wide limits: the
// requests and tokens leased and not yet used, and the limiter it uses
// alone while the store is unreachable. Safe for concurrent use.
type modelLease struct {
	// leasing is held by the call asking the store for a lease, so that
	// concurrent calls wait for its lease rather than each ask for one
	// (held at most for the store's timeout).
	leasing  sync.Mutex
	waiting  atomic.Int32 // calls waiting for leasing: the demand a lease is for, now
	mu       sync.Mutex
	requests int       // leased requests left
	tokens   int       // leased input tokens left
	until    time.Time // the leased requests and tokens lapse then
	day      time.Time // the end of the Pacific day the leased requests count in
	debt     int       // input tokens responses reported beyond the leased estimates (and those of requests sent alone), for the next lease
	unleased int       // requests sent alone (the store unreachable), for the next lease
	// Leased requests (and their tokens) that lapsed unsent in the day
	// ending unusedDay, to give back at the next lease.
	unused, unusedTokens int
	unusedDay            time.Time
	second               int64    // the unix second uses counts
	uses                 int      // requests used in second
	lastUses             int      // requests used in the second before it: the next batch
	alone                *limiter // limits ÷ replicas while the store is unreachable; nil until first needed
	aloneFor             [numDims]int

	// The fleet's last refusal: no lease is asked for before refusedUntil.
	refusedUntil time.Time
	refusedDim   string

	// The generate endpoint's outcomes not yet reported to the fleet, and
	// the fleet's consecutive failures at the last report: the failures,
	// how many of them are draws of their own (circuit.Breaker.Draw) and
	// when the earliest of their requests was sent (fleet.LeaseRequest.
	// Draws, FailedSince; zero when none failed), the latest answer.
	failed        int
	draws         int
	failedSince   time.Time
	answered      time.Time
	fleetFailures int
	// drawsUntil is when a request sent from then on is a draw of its own
	// after the latest failure counted as one since the model last
	// answered (zero: none since).
	drawsUntil time.Time

	// The fleet's run of consecutive failures as this replica's leases saw
	// it (failingFor): its count at the latest, and when the first lease
	// that brought it back came.
	runFailures int
	runSince    time.Time

	// latencyShared is when a round trip last shared the model's record
	// of answer times (shareLatency), lastAnswer when the model last
	// answered this replica.
	latencyShared time.Time
	lastAnswer    time.Time
	// wantedUntil is until when the fleet wants the model's record after
	// each attempt (fleet.FactRecordWanted), in Unix nanoseconds: read by
	// every attempt that ends in a fleet (call.shareEnd).
	wantedUntil atomic.Int64
	// awaitingReported is the latest report's Awaiting (awaits).
	awaitingReported time.Time
}

// awaits records until when the fleet knows this replica awaits an
// answer of the model (its latest report's fleet.LeaseRequest.Awaiting).
func (l *modelLease) awaits(until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.awaitingReported = until
}

// awaited returns until when the fleet knows this replica awaits an
// answer of the model (awaits).
func (l *modelLease) awaited() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.awaitingReported
}

// awaitsPast reports whether the fleet knows that this replica awaits an
// answer of the model past t.
func (l *modelLease) awaitsPast(t time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.awaitingReported.After(t)
}

// shareLatency reports whether a round trip at now is to share the
// model's record of answer times with the fleet and read the others'
// (shareLatencyEvery since the last that did, or always), and counts it as
// the last.
func (l *modelLease) shareLatency(now time.Time, always bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !always && now.Before(l.latencyShared.Add(shareLatencyEvery)) {
		return false
	}
	l.latencyShared = now
	return true
}

// want records that the fleet wants the model's record after each
// attempt until until (fleet.FactRecordWanted), and reports whether that
// is later than it knew.
func (l *modelLease) want(until time.Time) bool {
	u := until.UnixNano()
	for {
		old := l.wantedUntil.Load()
		if u <= old {
			return false
		}
		if l.wantedUntil.CompareAndSwap(old, u) {
			return true
		}
	}
}

// wanted reports whether the fleet wants the model's record after each
// attempt at now (want).
func (l *modelLease) wanted(now time.Time) bool {
	return now.UnixNano() < l.wantedUntil.Load()
}

// unshared reports whether the model answered this replica since a round
// trip last shared its record.
func (l *modelLease) unshared() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAnswer.After(l.latencyShared)
}

// record returns this replica's record of m at now as the fleet keeps it
// (modelRecord).
func (m *modelState) record(now time.Time) []fleet.LatencyCount {
	return modelRecord(m.lat.Snapshot(), m.lat.InFlight(), m.routes[endpointGenerate].spans(now))
}

// readRecords has m read the fleet's record of the other replicas
// (fleet.Lease.Latency), read at now: their answer times and attempts in
// flight for its Learner, their spans for its throttle's window.
func (m *modelState) readRecords(fleetCounts []fleet.LatencyCount, now time.Time) {
	m.lat.SetOthersInFlight(othersInFlight(fleetCounts, now))
	m.lat.SetOthers(othersLatency(fleetCounts), now)
	m.routes[endpointGenerate].setOthers(othersSpans(fleetCounts))
}

// sharedSince reports whether a round trip shared the model's record with
// the fleet after start (shareLatency).
func (l *modelLease) sharedSince(start time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.latencyShared.After(start)
}

// modelRecord returns a replica's record of a model as the fleet keeps it:
// its Learner's answer times, its throttle window's spans from
// throttleClass on, and its Learner's attempts in flight from flightClass
// on.
func modelRecord(own []latency.Count, flights []latency.Flight, spans []spanCounts) []fleet.LatencyCount {
	out := make([]fleet.LatencyCount, len(own), len(own)+len(flights)+4*len(spans))
	for i, c := range own {
		out[i] = fleet.LatencyCount{Class: c.Class, Bucket: c.Bucket, N: c.N}
	}
	for _, x := range flights {
		out = append(out, fleet.LatencyCount{Class: flightClass + x.Class, Bucket: int(x.Start.UnixMilli() % flightBuckets), N: x.N})
	}
	for _, x := range spans {
		sec := int(x.start.Unix())
		for i, n := range x.counts() {
			if *n > 0 {
				out = append(out, fleet.LatencyCount{Class: throttleClass + i, Bucket: sec, N: *n})
			}
		}
	}
	return out
}

// othersLatency returns the answer times of the fleet's record of the
// other replicas as a Learner reads it (latency.Learner.SetOthers).
func othersLatency(fleetCounts []fleet.LatencyCount) []latency.Count {
	out := make([]latency.Count, 0, len(fleetCounts))
	for _, c := range fleetCounts {
		if c.Class < throttleClass {
			out = append(out, latency.Count{Class: c.Class, Bucket: c.Bucket, N: c.N})
		}
	}
	return out
}

// othersInFlight returns the attempts in flight of the fleet's record of
// the other replicas, read at now (their starts are at most flightBuckets
// milliseconds before it), as a Learner reads them
// (latency.Learner.SetOthersInFlight).
func othersInFlight(fleetCounts []fleet.LatencyCount, now time.Time) []latency.Flight {
	var out []latency.Flight
	ms := now.UnixMilli()
	for _, c := range fleetCounts {
		if c.Class < flightClass || c.N <= 0 {
			continue
		}
		age := ((ms-int64(c.Bucket))%flightBuckets + flightBuckets) % flightBuckets
		out = append(out, latency.Flight{Class: c.Class - flightClass, Start: time.UnixMilli(ms - age), N: c.N})
	}
	return out
}

// othersSpans returns the throttle windows' spans of the fleet's record of
// the other replicas, summed by start (availability.setOthers).
func othersSpans(fleetCounts []fleet.LatencyCount) []spanCounts {
	var out []spanCounts
	for _, c := range fleetCounts {
		kind := c.Class - throttleClass
		if kind < 0 || kind > 3 || c.N <= 0 {
			continue
		}
		start := time.Unix(int64(c.Bucket), 0)
		i := slices.IndexFunc(out, func(x spanCounts) bool { return x.start.Equal(start) })
		if i < 0 {
			i = len(out)
			out = append(out, spanCounts{start: start})
		}
		*out[i].counts()[kind] += c.N
	}
	return out
}

// failingFor records the fleet's count of the model's failures in a row
// that a lease brought back at now, and returns how long this replica has
// seen that run: since the first lease that brought it back (a count that
// fell since the last is a new run, an answer having ended the one
// before), 0 when there is none.
func (l *modelLease) failingFor(now time.Time, failures int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case failures == 0:
		l.runFailures, l.runSince = 0, time.Time{}
		return 0
	case l.runFailures == 0 || failures < l.runFailures:
		l.runSince = now
	}
	l.runFailures = failures
	return now.Sub(l.runSince)
}

// refuse records that the fleet grants nothing before until, for dim.
func (l *modelLease) refuse(until time.Time, dim string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refusedUntil, l.refusedDim = until, dim
}

// refused returns until when, and for which dimension, the fleet grants
// nothing, as it said at its last refusal (a time in the past when it may
// grant).
func (l *modelLease) refused() (time.Time, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.refusedUntil, l.refusedDim
}

// failure records a counted failure of the model, to report: of a
// request sent at sent, a draw of its own unless sent before the latest
// draw's until (its own until being until: circuit.Breaker.Draw).
func (l *modelLease) failure(sent, until time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failed++
	l.failedSince = window.Earlier(l.failedSince, sent)
	if !sent.Before(l.drawsUntil) {
		l.draws++
		l.drawsUntil = until
	}
}

// answer records an answer of the model at now, to report; the failures
// not yet reported came before it and are reported no more. It returns
// whether to report it at once: the fleet counts failures the answer ends.
func (l *modelLease) answer(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.answered = window.Later(l.answered, now)
	l.lastAnswer = window.Later(l.lastAnswer, now)
	l.failed, l.draws, l.failedSince, l.drawsUntil = 0, 0, time.Time{}, time.Time{}
	return l.fleetFailures > 0
}

// report fills r (its DayEnd set) with what the model has to tell the fleet
// at now (its token debt, requests sent alone, leased requests that lapsed
// unsent in r's day, outcomes) and clears it; reported then says how the
// round trip went.
func (l *modelLease) report(now time.Time, r *fleet.LeaseRequest) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lapse(now)
	r.Debt, r.Alone, r.Failures, r.Answered = l.debt, l.unleased, l.failed, l.answered
	r.Draws, r.FailedSince, r.DrawsUntil = l.draws, l.failedSince, l.drawsUntil
	if l.unusedDay.Equal(r.DayEnd) {
		r.Unused, r.UnusedTokens = l.unused, l.unusedTokens
	}
	l.debt, l.unleased, l.failed, l.draws, l.failedSince, l.answered = 0, 0, 0, 0, time.Time{}, time.Time{}
	l.unused, l.unusedTokens = 0, 0
}

// reported puts back what r reported when it did not reach the store (ok
// false), and records the fleet's count of failures l brought back when it
// did. A round trip that timed out (lost) may have reached the store: what
// the store must not count twice is then not put back (the failures, which
// would open breakers early, and the lapsed requests given back, which
// would let the fleet past its quota), and what it may (the token debt and
// the requests sent alone, counted against the limits, and the latest
// answer) is.
func (l *modelLease) reported(ok, lost bool, r fleet.LeaseRequest, fl fleet.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok {
		l.debt += r.Debt
		l.unleased += r.Alone
		l.answered = window.Later(l.answered, r.Answered)
		if lost {
			return
		}
		if r.Failures > 0 {
			l.failed += r.Failures
			l.draws += r.Draws
			l.failedSince = window.Earlier(l.failedSince, r.FailedSince)
		}
		if r.Unused > 0 && (l.unused == 0 || l.unusedDay.Equal(r.DayEnd)) {
			l.unused, l.unusedTokens, l.unusedDay = l.unused+r.Unused, l.unusedTokens+r.UnusedTokens, r.DayEnd
		}
		return
	}
	l.fleetFailures = fl.Failures
}

// lapse moves what the lease holds, when it lapsed at now, to what is to be
// given back (only the last day's: a new day's count starts afresh).
func (l *modelLease) lapse(now time.Time) {
	if l.requests == 0 || now.Before(l.until) {
		return
	}
	if !l.unusedDay.Equal(l.day) {
		l.unused, l.unusedTokens = 0, 0
	}
	l.unused += l.requests
	l.unusedTokens += l.tokens
	l.unusedDay = l.day
	l.requests, l.tokens = 0, 0
}

// sentAlone records a request sent with tokens input tokens on the
// Client's own share, to report.
func (l *modelLease) sentAlone(tokens int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unleased++
	l.debt += max(tokens, 0)
}

// use takes one request and tokens from the lease at now, if it holds
// them. A call's first try counts it for the batch size (first).
func (l *modelLease) use(now time.Time, tokens int, first bool) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if first {
		l.count(now)
	}
	l.lapse(now)
	if l.requests == 0 || l.tokens < tokens {
		return false
	}
	l.requests--
	l.tokens -= tokens
	return true
}

// count records one request used at now, for the batch size.
func (l *modelLease) count(now time.Time) {
	switch s := now.Unix(); {
	case s == l.second:
	case s == l.second+1:
		l.second, l.lastUses, l.uses = s, l.uses, 0
	default:
		l.second, l.lastUses, l.uses = s, 0, 0
	}
	l.uses++
}

// batch returns how many requests to lease, for its asker: about what a
// second uses (the last one, this one so far, or the calls waiting for
// this lease, whichever is most), at most maxLeaseBatch, and at most a
// quarter of this replica's share of each limit eff (over replicas, with
// tokens per request; RPD's too): what a lease holds beyond the calls that
// take it is held from the project's window until it lapses and is given
// back, which a quota the fleet nearly fills cannot spare. At least one.
func (l *modelLease) batch(eff [numDims]int, tokens, replicas int) int {
	waiting := int(l.waiting.Load())
	l.mu.Lock()
	b := min(max(1+waiting, l.lastUses, l.uses), maxLeaseBatch)
	l.mu.Unlock()
	share := func(limit, per int) int { return limit / (4 * max(replicas, 1) * max(per, 1)) }
	if eff[dimRPM] > 0 {
		b = min(b, share(eff[dimRPM], 1))
	}
	if eff[dimTPM] > 0 {
		b = min(b, share(eff[dimTPM], tokens))
	}
	if eff[dimRPD] > 0 {
		b = min(b, share(eff[dimRPD], 1))
	}
	return max(b, 1)
}

// fill adds what a lease granted at now, counted in the Pacific day ending
// day, beyond the one request its asker uses at once to what the lease
// holds (leases asked for at once by concurrent calls add up), and keeps it
// all until leaseFor after now.
func (l *modelLease) fill(now, day time.Time, requests, tokens int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lapse(now)
	l.requests += requests
	l.tokens += tokens
	l.until, l.day = now.Add(leaseFor), day
}

// giveBack returns one request and its tokens to the lease: the request was
// not sent after all.
func (l *modelLease) giveBack(tokens int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests++
	l.tokens += tokens
}

// owe adds the input tokens a response reported beyond the estimate leased
// for it, to count with the next lease.
func (l *modelLease) owe(extra int) {
	if extra <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.debt += extra
}

// aloneLimiter returns the limiter of the model while the store is
// unreachable: lim's effective limits each divided by replicas.
func (l *modelLease) aloneLimiter(eff [numDims]int, replicas int) *limiter {
	var div [numDims]int
	for d, v := range eff {
		if v > 0 {
			div[d] = max(1, v/replicas)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.alone == nil || l.aloneFor != div {
		if l.alone == nil {
			l.alone = newLimiter(Limits{}, 1)
		}
		l.alone.mu.Lock()
		for d, v := range div {
			l.alone.setLimit(quotaDim(d), v)
		}
		l.alone.mu.Unlock()
		l.aloneFor = div
	}
	return l.alone
}

// fleetAdmit takes from the fleet's limits the request a call is about to
// send to m, with its input tokens: from the model's lease, else from the
// store in one round trip. It returns stepGo when the request may go,
// having set a.leased or a.alone; or, having recorded why, stepNext (the
// fleet's limits make it wait while another model can answer, or past the
// deadline) or stepStop (the caller's context ended during a wait).
func (call *call[R]) fleetAdmit(ctx context.Context, sl *retrySlot, m *modelState, tokens int, a *admission) (step, error) {
	c, f := call.c, call.c.fleet
	eff := m.lim.limits()
	if eff == ([numDims]int{}) {
		if f.due(call.now) {
			if l, _ := c.sync(ctx, m, fleet.LeaseRequest{}); l.Facts != nil { // facts and heartbeat; nothing to lease
				return call.unblocked(sl, m)
			}
		}
		return stepGo, nil
	}
	if m.lease.use(call.now, tokens, true) {
		a.leased, a.leasedTokens = true, tokens
		return stepGo, nil
	}
	m.lease.waiting.Add(1)
	m.lease.leasing.Lock()
	m.lease.waiting.Add(-1)
	locked := true
	defer func() {
		if locked {
			m.lease.leasing.Unlock()
		}
	}()
	for {
		if m.lease.use(call.now, tokens, false) { // leased by the call this one waited for
			a.leased, a.leasedTokens = true, tokens
			return stepGo, nil
		}
		now := call.now
		until, dim := m.lease.refused()
		if !until.After(now) {
			day := pacific.NextMidnight(now)
			r := fleet.LeaseRequest{Requests: m.lease.batch(eff, tokens, f.share()), Tokens: tokens, RPM: eff[dimRPM], TPM: eff[dimTPM], RPD: eff[dimRPD], DayEnd: day}
			nm := call.fallThrough(m, tokens, &r)
			l, ok := c.roundTrip(ctx, m, nm, r, 0)
			if ok && l.Next != nil && l.Requests == 0 {
				bookNext(nm, now, day, tokens, *l.Next)
			}
			if !ok && ctx.Err() == nil && call.hasNext(m) && f.health.state(time.Now()) == StateClosed {
				// Slow or failing, not yet known down (the store's breaker
				// closed): another model answers rather than this one
				// spend, uncoordinated, a request the fleet may have
				// granted to another replica.
				err := &ModelError{Model: m.name, Verdict: Verdict{Class: ClassLocalRateLimit, Scope: ScopeModel}, Err: errFleetSlow}
				call.skip(m, err, sl.delay)
				return stepNext, err
			}
			if !ok {
				return call.aloneAdmit(ctx, sl, m, tokens, eff, a)
			}
			if l.Facts != nil {
				if next, err := call.unblocked(sl, m); next != stepGo {
					m.lease.fill(now, day, l.Requests, l.Requests*tokens)
					return next, err
				}
			}
			if l.Requests > 0 {
				m.lease.fill(now, day, l.Requests-1, (l.Requests-1)*tokens)
				a.leased, a.leasedTokens = true, tokens
				return stepGo, nil
			}
			until, dim = now.Add(max(l.RetryAfter, time.Millisecond)), l.Dimension
			m.lease.refuse(until, dim)
		}
		wait := until.Sub(now)
		next := call.hasNext(m)
		if next || !until.Before(call.deadline) {
			err := localLimitError(m.name, &RateLimitError{Dimension: strings.ToUpper(dim), Until: until, wait: wait, skipped: next}, now)
			call.skip(m, err, sl.delay)
			return stepNext, err
		}
		// The wait is not made holding leasing: the calls queued behind
		// it would wait for it past their own deadlines.
		m.lease.leasing.Unlock()
		locked = false
		err := call.sleep(ctx, wait)
		m.lease.waiting.Add(1)
		m.lease.leasing.Lock()
		m.lease.waiting.Add(-1)
		locked = true
		if err != nil {
			return stepStop, call.unsent(m, err, sl.delay+call.now.Sub(now))
		}
		sl.delay += wait
	}
}

// fallThrough sets r.Next to the lease request of the model the call goes
// to should m's lease be refused (nextAfter), when that model has fleet
// limits, and returns it; nil, r unchanged, when there is none. The store
// then grants it in the same round trip as m's refusal (bookNext), and
// the call's admission of it is served from its lease.
func (call *call[R]) fallThrough(m *modelState, tokens int, r *fleet.LeaseRequest) *modelState {
	nm := call.nextAfter(m)
	if nm == nil {
		return nil
	}
	eff := nm.lim.limits()
	if eff == ([numDims]int{}) {
		return nil
	}
	r.Next = &fleet.LeaseRequest{Requests: nm.lease.batch(eff, tokens, call.c.fleet.share()), Tokens: tokens,
		RPM: eff[dimRPM], TPM: eff[dimTPM], RPD: eff[dimRPD], DayEnd: r.DayEnd}
	return nm
}

// bookNext books on nm's lease what the store answered at now for nm, the
// model after one whose lease it refused: the requests granted (each with
// tokens input tokens, counted in the Pacific day ending day), all of them
// for the calls to come, the call that asked included; or the refusal,
// kept until its RetryAfter as nm's own round trip would keep it.
func bookNext(nm *modelState, now, day time.Time, tokens int, l fleet.Lease) {
	switch {
	case l.Requests > 0:
		nm.lease.fill(now, day, l.Requests, l.Requests*tokens)
	case l.Dimension != "":
		nm.lease.refuse(now.Add(max(l.RetryAfter, time.Millisecond)), l.Dimension)
	}
}

// unblocked checks again, once the fleet's facts were applied, what admit
// checked before asking the fleet: it returns stepGo when m may still take
// the call's request, else stepNext having recorded why (the project or m
// cooling down, m's breaker open).
func (call *call[R]) unblocked(sl *retrySlot, m *modelState) (step, error) {
	err := call.c.projectCooling(call.now)
	if err == nil {
		err = m.cooling(call.now)
	}
	if err == nil && m.breakers[call.endpoint].state(call.now) == StateOpen {
		err = m.openErr
	}
	if err != nil {
		call.skip(m, err, sl.delay)
		return stepNext, err
	}
	return stepGo, nil
}

// aloneAdmit admits a request on the model's limits divided by the
// replicas' share (fleet.share), the store being unreachable, counts it
// uncoordinated, and keeps it to report: the fleet's windows count it when
// the store answers again.
func (call *call[R]) aloneAdmit(ctx context.Context, sl *retrySlot, m *modelState, tokens int, eff [numDims]int, a *admission) (step, error) {
	f := call.c.fleet
	lim := m.lease.aloneLimiter(eff, f.share())
	if next, err := call.reserve(ctx, sl, m, lim, tokens, &a.alone); next != stepGo {
		return next, err
	}
	f.uncoordinated.Add(1)
	m.lease.sentAlone(tokens)
	return stepGo, nil
}

// sync makes one round trip to the store for m with r (its Requests,
// Tokens, limits and Probe set by the caller; the rest filled here):
// leasing, counting the model's debt, registering the replica, and applying
// the facts that changed. ok is false when the store did not answer.
func (c *Client) sync(ctx context.Context, m *modelState, r fleet.LeaseRequest) (fleet.Lease, bool) {
	return c.roundTrip(ctx, m, nil, r, 0)
}

// address fills r's project, replica, model and the project's version
// this replica last saw, and its day's end at now when not set.
func (f *fleetLink) address(r *fleet.LeaseRequest, m *modelState, now time.Time) {
	r.Project, r.Replica, r.ReplicaTTL, r.Model = f.project, f.replica, replicaTTL, m.name
	r.Version = f.version.Load()
	if r.DayEnd.IsZero() {
		r.DayEnd = pacific.NextMidnight(now)
	}
}

// roundTrip is sync, with r.Next (set by the caller, its model next) filled
// and reported as r is, and bounded by warmUp when positive (see
// fleet.call). A round trip that answers also publishes the facts learned
// while the store was unreachable.
func (c *Client) roundTrip(ctx context.Context, m, next *modelState, r fleet.LeaseRequest, warmUp time.Duration) (fleet.Lease, bool) {
	f := c.fleet
	now := time.Now()
	f.address(&r, m, now)
	m.lease.report(now, &r)
	r.Awaiting = m.breakers[endpointGenerate].awaitingUntil(now, r.Requests > 0)
	if next != nil {
		r.Next.Model = next.name
		next.lease.report(now, r.Next)
		r.Next.Awaiting = next.breakers[endpointGenerate].awaitingUntil(now, r.Next.Requests > 0)
	}
	shared := m.lease.shareLatency(now, false)
	if shared {
		r.Latency, r.Latencies = m.record(now), true
	}
	var spent Micros
	spent, r.SpendDay, r.SpendMonth = c.spending.report(now)
	r.Spent = int64(spent)
	var l fleet.Lease
	lost := false // timed out or given up: the store may have run it
	ok := f.callWithin(ctx, c, warmUp, true, func(ctx context.Context) (err error) {
		l, err = f.store.Lease(ctx, r)
		lost = err != nil && ctx.Err() != nil
		return err
	})
	m.lease.reported(ok, lost, r, l)
	if ok {
		m.lease.awaits(r.Awaiting)
		if next != nil {
			next.lease.awaits(r.Next.Awaiting)
		}
	}
	if next != nil {
		var ln fleet.Lease
		if ok && l.Next != nil {
			ln = *l.Next
		}
		next.lease.reported(ok && l.Next != nil, lost, *r.Next, ln)
	}
	c.spending.reported(ok, r, l)
	if !ok {
		return fleet.Lease{}, false
	}
	if shared {
		m.readRecords(l.Latency, now)
	}
	f.replicas.Store(int64(max(1, l.Replicas)))
	f.peak.saw(max(1, l.Replicas), now)
	c.publishPending(ctx)
	if l.Facts != nil {
		// Applied, then the version stored: a concurrent round trip (a
		// notification's, another call's) asks with the old version until
		// the facts are applied, so it gets them and applies them itself
		// rather than go on before they are. Applying facts twice changes
		// nothing. No lock: apply reports to hooks, which may call the
		// Client.
		c.apply(ctx, l.Facts)
		f.version.Store(l.Version)
	}
	c.heard(m, l, now)
	c.fleetDead(ctx, m, l)
	if next != nil && l.Next != nil {
		c.heard(next, *l.Next, now)
		c.fleetDead(ctx, next, *l.Next)
	}
	return l, true
}

// heard makes what the fleet heard of m, as lease l at now says, this
// Client's, as one process hears every answer and waits for every request
// in flight: the model's latest answer to any replica (for the rules of a
// model that never answered or went silent, and the Client's outage rule,
// which no answer of any model ends), and until when another replica
// awaits an answer of it sent while it was unheard (its breaker's dead
// rule waits for it, as for its own).
func (c *Client) heard(m *modelState, l fleet.Lease, now time.Time) {
	br := m.breakers[endpointGenerate]
	if !l.Answered.IsZero() {
		br.heardAt(l.Answered, now)
		c.answers.SawBy(window.Earlier(l.Answered, now))
	}
	br.awaitedElsewhere(l.Awaiting)
}

// fleetDead opens m's generate breaker when the fleet's failures say the
// model is dead as the breaker's own rule would on one process's: at least
// FailureThreshold in a row across the fleet, lasting half of DeadAfter
// (as this replica's leases saw them: failingFor), and no replica answered
// for DeadAfter, or none ever did, with none of the fleet's requests sent
// while the model was unheard still in flight (this replica's: circuit.
// Breaker.Awaiting; the others': fleet.Lease.Awaiting) and, when one did,
// the run one that the model would hardly make answering as this replica
// saw it answer (circuit.Breaker.RunUnlikely), counted in draws across the fleet (fleet.Lease.Draws:
// requests the replicas sent together are one, as one process counts
// them); or this Client is in an outage (inOutage). It opens for
// the breaker's own open period (MinOpenFor from closed, doubled for each
// failed probe since), or OpenFor in an outage, as one process's rules do,
// and the opening is published as the Client's own. A fleet of replicas
// each seeing a part of the traffic so opens as soon as one process would,
// and a burst after a quiet spell, whose fast 503s come back before its
// answers, does not open it, even when the model's last word before the
// spell was a failure.
func (c *Client) fleetDead(ctx context.Context, m *modelState, l fleet.Lease) {
	s := c.cfg.breaker
	now := time.Now()
	failing := m.lease.failingFor(now, l.Failures)
	if l.Failures < s.FailureThreshold {
		return
	}
	br := m.breakers[endpointGenerate]
	silent := s.DeadAfter < 0 || l.Answered.IsZero() || now.Sub(l.Answered) >= s.DeadAfter && 2*failing >= s.DeadAfter
	outage := c.inOutage(now)
	if !silent && !outage {
		return
	}
	draws := l.Draws
	if draws == 0 { // a SharedState that does not count draws: each failure is one
		draws = l.Failures
	}
	if br.state(now) != StateClosed || !outage && (br.awaiting(now) || now.Before(l.Awaiting) || // this replica's answers to the burst, or another's, may be on their way
		!l.Answered.IsZero() && !br.runUnlikely(draws)) { // a flaky model's run, counted in draws as one process counts it
		return
	}
	var tr *transition
	if outage {
		if tr = br.tripForOutage(now); tr != nil { // an outage's opening, as one process's: its first answer ends it (outageOver)
			c.outageOpen.Add(1)
		}
	} else {
		tr = br.trip(now) // for its own open period, as one process's rule opens it
	}
	c.stateChanged(ctx, m.name, endpointGenerate, tr)
	c.publishTransition(ctx, m, endpointGenerate, br, tr)
}

// apply makes the fleet's facts this Client's: cool-downs, open and closed
// breakers, learned limits. Reported as the Client's own changes are
// (hooks, logs, metrics), never published again.
func (c *Client) apply(ctx context.Context, facts []fleet.Fact) {
	now := time.Now()
	for _, fact := range facts {
		if fact.Model == "" {
			// A project cool-down seen before this Client's CheckCascade
			// last cleared its own is older than what the listing said.
			if fact.Kind == fleet.FactCoolDown && !c.project.clearedSince(fact.At) && c.project.set(fact.Until, Class(fact.Reason)) {
				c.cooledDown(ctx, CoolDownEvent{Until: fact.Until, Reason: Class(fact.Reason)})
			}
			continue
		}
		m := c.model(fact.Model)
		switch fact.Kind {
		case fleet.FactCoolDown:
			if m.cool.set(fact.Until, Class(fact.Reason)) {
				c.cooledDown(ctx, CoolDownEvent{Model: m.name, Until: fact.Until, Reason: Class(fact.Reason)})
			}
		case fleet.FactOpen, fleet.FactClosed:
			e, ok := endpointNamed(fact.Endpoint)
			if !ok {
				continue
			}
			var tr *transition
			if fact.Kind == fleet.FactOpen {
				c.spaceEarlyProbes(fact.At)
				tr = m.breakers[e].openTill(now, fact.At, fact.Until, fact.Outage)
				if fact.Outage && m.breakers[e].openForOutage(now) { // this replica's first answer ends it, as the opener's ends its own
					c.outageOpen.Add(1)
				}
			} else {
				tr = m.breakers[e].closeSince(now, fact.At)
			}
			c.stateChanged(ctx, m.name, e, tr)
		case fleet.FactLimit:
			if d, ok := dimNamed(fact.Dimension); ok {
				m.lim.learn(d, fact.Limit)
			}
		case fleet.FactMissing:
			if m.cool.set(coolDownForever, Class(fact.Reason)) {
				c.cooledDown(ctx, CoolDownEvent{Model: m.name, Until: coolDownForever, Reason: Class(fact.Reason)})
			}
		case fleet.FactListed:
			m.cool.clearRecheck()
		case fleet.FactRecordWanted:
			if m.lease.want(fact.Until) && fact.Until.After(now) && m.lease.unshared() {
				c.shareRecord(ctx, m, true)
			}
		}
	}
}

// publish tells the fleet a fact, in one round trip; a failure is the
// store's (counted, and the Client carries on alone), and the fact is kept
// to publish at the first round trip that answers.
func (c *Client) publish(ctx context.Context, fact fleet.Fact) {
	f := c.fleet
	if f == nil {
		return
	}
	if !f.call(ctx, c, func(ctx context.Context) error { return f.store.Publish(ctx, f.project, fact) }) {
		f.pendingMu.Lock()
		defer f.pendingMu.Unlock()
		if f.pending == nil {
			f.pending = make(map[fleet.FactKey]fleet.Fact)
		}
		k := fact.Key()
		if old, ok := f.pending[k]; !ok || fact.Replaces(old) {
			f.pending[k] = fact
		}
	}
}

// publishPending publishes the facts learned while the store was
// unreachable that are still in force, each in one round trip.
func (c *Client) publishPending(ctx context.Context) {
	f := c.fleet
	f.pendingMu.Lock()
	pending := f.pending
	f.pending = nil
	f.pendingMu.Unlock()
	now := time.Now()
	for _, fact := range pending {
		if fact.End().After(now) {
			c.publish(ctx, fact)
		}
	}
}

// publishTransition tells the fleet that a breaker of m opened or closed on
// this Client's own outcomes.
func (c *Client) publishTransition(ctx context.Context, m *modelState, e endpoint, br *breaker, tr *transition) {
	if c.fleet == nil || tr == nil {
		return
	}
	switch State(tr.To) {
	case StateOpen:
		c.publish(ctx, fleet.Fact{Kind: fleet.FactOpen, Model: m.name, Endpoint: e.String(), At: tr.At, Until: br.openUntil(), Outage: br.openForOutage(tr.At)})
	case StateClosed:
		c.publish(ctx, fleet.Fact{Kind: fleet.FactClosed, Model: m.name, Endpoint: e.String(), At: tr.At})
	}
}

// reportOutcome counts an outcome of m's generate endpoint for the fleet,
// and reports it at once when it can change the fleet's verdict: a failure
// while m's breaker is closed, an answer while the fleet counts failures or
// that changed the breaker's state (a probe closed it). Other outcomes ride
// on the next round trip.
func (c *Client) reportOutcome(ctx context.Context, m *modelState, e endpoint, br *breaker, p permit, o outcome, changed bool, now time.Time) {
	if c.fleet == nil || e != endpointGenerate {
		return
	}
	switch o {
	case outcomeSuccess:
		if !m.lease.answer(now) && !changed {
			return
		}
	case outcomeFailure, outcomeOutage:
		m.lease.failure(br.draw(p, now))
		if br.state(now) != StateClosed {
			return
		}
	default:
		return
	}
	c.sync(ctx, m, fleet.LeaseRequest{})
}

// reportAwaiting tells the fleet at now that this replica awaits the
// answer of a request to m sent while the model was unheard (it never
// answered, or not for DeadAfter), unless its latest report says it
// awaits one for half of DeadAfter or more already: the other replicas
// must not take the model for dead on their failures while answers may be
// on their way (fleetDead), as one process does not on its own. It
// reports whether it made a round trip.
func (c *Client) reportAwaiting(ctx context.Context, m *modelState, now time.Time) bool {
	if c.fleet == nil || m.lease.awaitsPast(now.Add(c.cfg.breaker.DeadAfter/2)) {
		return false
	}
	c.sync(ctx, m, fleet.LeaseRequest{})
	return true
}

// fleetProbe asks the fleet for m's probe slot of the call's endpoint, for a
// probe permit the breaker just granted. It reports false when another
// replica holds it (the call then treats the model as open); true when the
// slot is this Client's, or the store is unreachable (the Client then
// probes on its own).
func (call *call[R]) fleetProbe(ctx context.Context, m *modelState) bool {
	c := call.c
	hold := max(min(m.timeout, call.deadline.Sub(call.now)), time.Second)
	l, ok := c.sync(ctx, m, fleet.LeaseRequest{Requests: 1, Probe: hold, Endpoint: call.endpoint.String()})
	return !ok || l.Requests > 0
}

// endpointNamed returns the endpoint whose String is s.
func endpointNamed(s string) (endpoint, bool) {
	for e := range numEndpoints {
		if e.String() == s {
			return e, true
		}
	}
	return 0, false
}

// dimNamed returns the quota dimension named s ("rpm", "tpm", "rpd", in any
// case).
func dimNamed(s string) (quotaDim, bool) {
	for d := range numDims {
		if strings.EqualFold(d.String(), s) {
			return d, true
		}
	}
	return 0, false
}

// wantRecord tells the fleet, at now, that an attempt to m sent before m
// learned its deadlines waits and that the fleet's record does not teach
// them (fleet.FactRecordWanted), unless the fleet wants m's record already
// as this replica knows: the replicas holding answers of m not yet shared
// share them at once (apply), and at their attempts' ends for
// recordWantedFor (call.shareEnd), so that a stall on a replica that sees
// one call in twenty is cut as soon as the fleet's answers teach its cut,
// not at the answering replicas' next round trips, twenty calls later.
// Without a Subscriber store, replicas hear it at their next round trip.
// None when alone or while the store fails.
func (c *Client) wantRecord(ctx context.Context, m *modelState, now time.Time) {
	f := c.fleet
	if f.replicas.Load() < 2 || f.health.state(now) != StateClosed || m.lease.wanted(now) {
		return
	}
	until := now.Add(recordWantedFor)
	m.lease.want(until)
	c.publish(ctx, fleet.Fact{Kind: fleet.FactRecordWanted, Model: m.name, At: now, Until: until})
}

// shareRecord makes a round trip that shares m's record of answer times
// and its attempts in flight with the fleet and reads the other replicas'
// (readRecords), when shareLatencyEvery has passed since the last that
// did or now (shareEnd); nothing else (no lease, no outcome, no fact). A
// replica alone, or whose store is failing (its breaker not closed), makes
// none. A replica that sees one call in twenty learns a model's first
// deadlines from the fleet's answers while its own first attempts are out
// (cutOnceLearned's watch calls it each shareLatencyEvery), and counts the
// others' long attempts still out, as one process counts its own: their
// first answers, their fastest, alone would cut the long answers of a
// model slow on every request.
func (c *Client) shareRecord(ctx context.Context, m *modelState, now bool) {
	f := c.fleet
	at := time.Now()
	if f.replicas.Load() < 2 || f.health.state(at) != StateClosed || !m.lease.shareLatency(at, now) {
		return // alone, no one reads it; the store failing, its next round trip carries it
	}
	r := fleet.LeaseRequest{Latency: m.record(at), Latencies: true, Awaiting: m.lease.awaited()} // Awaiting: the store keeps the latest report's; the same, not none
	f.address(&r, m, at)
	var l fleet.Lease
	if f.callWithin(ctx, c, 0, false, func(ctx context.Context) (err error) {
		l, err = f.store.Lease(ctx, r)
		return err
	}) {
		m.readRecords(l.Latency, at)
	}
}
