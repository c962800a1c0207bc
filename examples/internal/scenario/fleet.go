package scenario

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

// The fleet scenarios (issue 11): one project's quota shared by replicas,
// each a geminiguard Client in its own process, played as Clients of one
// run on one fake, in fake time.
const (
	// fleetReplicas is the size of the fleets.
	fleetReplicas = 20
	// fleetPrimaryRPM and fleetSecondaryRPM are fleet429's project quotas.
	fleetPrimaryRPM   = 150
	fleetSecondaryRPM = 600
	// fleetRun is fleet429's span: long enough for a steady state.
	fleetRun = 5 * time.Minute
	// fleetHeadroom is geminiguard's default WithHeadroom: the share of a
	// quota a Client uses, and the oracle too in the fleet scenarios.
	fleetHeadroom = 0.8
	// fleetRoundTrip is the simulated round trip to the shared state: what
	// a Redis in the same zone costs.
	fleetRoundTrip = time.Millisecond
)

// Fleet429 is one project's quota met by 20 replicas: the calls come at 1.5
// times the primary's quota, spread evenly over the replicas, and the fake
// enforces the project's quotas across all of them.
func Fleet429() *Scenario {
	sc := fleet429Script(fleetReplicas)
	sc.Arms = []Arm{
		fleetArm("project limit each", fleetReplicas, eachProjectLimit),
		fleetArm(fmt.Sprintf("limit ÷ %d", fleetReplicas), fleetReplicas, dividedLimit),
		fleetArm("fleet", fleetReplicas, sharedFleet),
		headroomOracleArm(fleetHeadroom),
	}
	return sc
}

// Fleet429Scale is Fleet429's script and calls met by fleets of each of
// sizes sharing their state (arms "<n> fleet"), beside the oracle: how
// round trips per call grow with the fleet.
func Fleet429Scale(sizes ...int) *Scenario {
	sc := fleet429Script(sizes...)
	sc.Name = "fleet429Scale"
	for _, n := range sizes {
		sc.Arms = append(sc.Arms, fleetArm(fmt.Sprintf("%d fleet", n), n, sharedFleet))
	}
	sc.Arms = append(sc.Arms, headroomOracleArm(fleetHeadroom))
	return sc
}

// fleet429Script is Fleet429 without its arms, summarised for fleets of
// sizes.
func fleet429Script(sizes ...int) *Scenario {
	const seed = 1150
	perMinute := fleetPrimaryRPM * 3 / 2
	calls := perMinute * int(fleetRun/time.Minute)
	sc := &Scenario{
		Name: "fleet429",
		Summary: fmt.Sprintf("%s replicas of one project (primary %d RPM, secondary %d RPM); %d calls a minute (1.5× the primary's quota) for %v, spread over the replicas",
			replicaCounts(sizes), fleetPrimaryRPM, fleetSecondaryRPM, perMinute, fleetRun),
		Anchor: "issue 11: 20 replicas each given the project's 150 RPM got 100 server 429s in 5 minutes; fleet mode: 0 server 429s, 100% success, the primary used for ≥ 95% of what its quota allows at headroom 0.8",
		Models: []Model{
			{Name: flash, Latency: flashLatency, Quota: geminitest.Quota{RPM: fleetPrimaryRPM}},
			{Name: lite, Latency: liteLatency, Quota: geminitest.Quota{RPM: fleetSecondaryRPM}},
		},
		Workload: Workload{Arrivals: evenly(calls, time.Minute/time.Duration(perMinute))},
		Measures: []Measure{
			{Name: "primary use", Format: "%.1f%%", Of: primaryUse},
			{Name: "round trips/call", Format: "%.3f", Of: roundTripsPerCall},
			{Name: "call round trips/call", Format: "%.3f", Of: callRoundTripsPerCall},
		},
	}
	sc.Script = healthy(seed, sc)
	return sc
}

// FleetOutage is fullOutage's script and calls (one every 0.5s, every
// model down from 60s to 180s) sent by one process, by 20 replicas on
// their own, and by 20 replicas sharing their state: each replica sends
// every 20th call.
func FleetOutage() *Scenario {
	sc := fleetOutageScript(fleetReplicas)
	sc.Arms = []Arm{
		GeminiguardArm("one process"),
		fleetArm(fmt.Sprintf("%d alone", fleetReplicas), fleetReplicas, eachProjectLimit),
		fleetArm(fmt.Sprintf("%d fleet", fleetReplicas), fleetReplicas, sharedFleet),
	}
	return sc
}

// FleetOutageScale is FleetOutage's script and calls sent by one process
// and by fleets of each of sizes sharing their state (arms "<n> fleet"):
// how the fleet's load during the outage grows with its size.
func FleetOutageScale(sizes ...int) *Scenario {
	sc := fleetOutageScript(sizes...)
	sc.Name = "fleetOutageScale"
	sc.Arms = []Arm{GeminiguardArm("one process")}
	for _, n := range sizes {
		sc.Arms = append(sc.Arms, fleetArm(fmt.Sprintf("%d fleet", n), n, sharedFleet))
	}
	return sc
}

// fleetOutageScript is FleetOutage without its arms, summarised for fleets
// of sizes.
func fleetOutageScript(sizes ...int) *Scenario {
	sc := FullOutage()
	sc.Name = "fleetOutage"
	sc.Summary = fmt.Sprintf("fullOutage's script and calls (every model answers 503 from 60s to 180s; a call every 0.5s) sent by one process, or spread over %s replicas", replicaCounts(sizes))
	sc.Anchor = "issue 11: in a 2-minute full outage 20 replicas sent 1,370 upstream requests against 69 from one process; fleet mode: ≤ 1.5× one process's"
	sc.Measures = append([]Measure{
		{Name: "outage req", Format: "%.0f", Of: outageRequests},
		{Name: "round trips/call", Format: "%.3f", Of: roundTripsPerCall},
	}, sc.Measures...)
	return sc
}

// replicaCounts returns sizes as a summary says them: "20", "20, 50 or 100".
func replicaCounts(sizes []int) string {
	s := make([]string, len(sizes))
	for i, n := range sizes {
		s[i] = strconv.Itoa(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// fleetMode is how the replicas of a fleetArm know the project's quota.
type fleetMode int

const (
	// eachProjectLimit gives each replica the project's limits, shared
	// with nobody: what a user does today.
	eachProjectLimit fleetMode = iota
	// dividedLimit gives each replica the project's limits divided by the
	// number of replicas (at least 1).
	dividedLimit
	// sharedFleet gives each replica the project's limits and one shared
	// state (WithSharedState), a NewMemoryState behind a simulated round
	// trip (roundTripState).
	sharedFleet
)

// fleetArm is replicas geminiguard Clients as GeminiguardArm builds them,
// each with its own jitter seed, on one fake (one project): call i goes to
// replica i mod replicas. mode says what limits they are given and whether
// they share their state.
func fleetArm(name string, replicas int, mode fleetMode) Arm {
	return Arm{Name: name, New: func(ctx context.Context, env Env) (Caller, error) {
		f := &fleetCaller{}
		var opts []geminiguard.Option
		if mode == sharedFleet {
			f.store = &roundTripState{next: fleet.NewMemoryState(), trip: fleetRoundTrip}
			opts = append(opts, geminiguard.WithSharedState(f.store))
		}
		if mode == dividedLimit {
			for _, m := range env.Scenario.Models {
				if q := m.Quota; q.RPM > 0 || q.TPM > 0 || q.RPD > 0 {
					opts = append(opts, geminiguard.WithLimits(m.Name, geminiguard.Limits{
						RPM: divided(q.RPM, replicas), TPM: divided(q.TPM, replicas), RPD: divided(q.RPD, replicas)}))
				}
			}
		}
		for i := range replicas {
			// Replica 0 draws as GeminiguardArm does; the others from
			// seeds of their own, as processes do.
			c, err := GeminiguardArm(name, slices.Concat(opts, []geminiguard.Option{geminiguard.WithJitterSource(rand.NewPCG(1, uint64(2+i)))})...).New(ctx, env)
			if err != nil {
				return nil, fmt.Errorf("replica %d: %w", i, err)
			}
			f.replicas = append(f.replicas, c.(*guardCaller))
		}
		if f.store != nil {
			f.warmUps = f.store.trips.Load()
		}
		return f, nil
	}}
}

// divided returns limit ÷ n, at least 1; 0 (no limit) stays 0.
func divided(limit, n int) int {
	if limit == 0 {
		return 0
	}
	return max(1, limit/n)
}

// fleetCaller sends call i through replica i mod len(replicas).
type fleetCaller struct {
	replicas []*guardCaller
	store    *roundTripState // nil unless the replicas share their state
	warmUps  int64           // the store's round trips when the replicas were made: New's warm-ups
}

func (f *fleetCaller) Generate(ctx context.Context, call int) Outcome {
	return f.replicas[call%len(f.replicas)].Generate(ctx, call)
}

func (f *fleetCaller) Stream(ctx context.Context, call int) Outcome {
	return f.replicas[call%len(f.replicas)].Stream(ctx, call)
}

// Close closes the replicas' Clients.
func (f *fleetCaller) Close() error {
	var errs []error
	for _, r := range f.replicas {
		errs = append(errs, r.Close())
	}
	return errors.Join(errs...)
}

// figures reports the fleet's round trips to its shared state and the
// replicas' Stats.Fleet (FigRoundTrips, FigStoreFailures, FigUncoordinated).
func (f *fleetCaller) figures() map[string]float64 {
	out := make(map[string]float64)
	if f.store != nil {
		out[FigRoundTrips] = float64(f.store.trips.Load())
		out[FigWarmUps] = float64(f.warmUps)
	}
	for _, r := range f.replicas {
		st := r.c.Stats().Fleet
		out[FigStoreFailures] += float64(st.Failures)
		out[FigUncoordinated] += float64(st.Uncoordinated)
	}
	return out
}

// The names of ArmRun.Figures that fleet arms report.
const (
	FigRoundTrips    = "round trips"    // calls to the shared state (Lease and Publish)
	FigWarmUps       = "warm-ups"       // of them, those New made (one per replica) before the first call
	FigStoreFailures = "store failures" // of them, those that failed or timed out (Stats.Fleet.Failures)
	FigUncoordinated = "uncoordinated"  // requests let through alone while the store was unreachable
)

// figureReporter is a Caller that reports figures of its own after a run
// (ArmRun.Figures).
type figureReporter interface {
	figures() map[string]float64
}

// roundTripState is a SharedState that costs a round trip: each call waits
// half of trip before and half after the state it wraps answers, in the
// bubble's fake time, and is counted. Safe for concurrent use.
type roundTripState struct {
	next  fleet.SharedState
	trip  time.Duration
	trips atomic.Int64
}

// travel waits half a round trip, or until ctx ends.
func (s *roundTripState) travel(ctx context.Context) error {
	t := time.NewTimer(s.trip / 2)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (s *roundTripState) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	s.trips.Add(1)
	if err := s.travel(ctx); err != nil {
		return fleet.Lease{}, err
	}
	l, err := s.next.Lease(ctx, r)
	if err != nil {
		return fleet.Lease{}, err
	}
	if err := s.travel(ctx); err != nil {
		return fleet.Lease{}, err
	}
	return l, nil
}

func (s *roundTripState) Publish(ctx context.Context, project string, f fleet.Fact) error {
	s.trips.Add(1)
	if err := s.travel(ctx); err != nil {
		return err
	}
	if err := s.next.Publish(ctx, project, f); err != nil {
		return err
	}
	return s.travel(ctx)
}

// Subscribe passes on the notifications of the state it wraps, as
// SubscribeFacts.
func (s *roundTripState) Subscribe(project string, changed func()) (stop func()) {
	return s.SubscribeFacts(project, func(fleet.Fact, uint64, uint64) { changed() })
}

// SubscribeFacts passes on the changes the state it wraps tells (when a
// fleet.FactSubscriber, as redisstore's Store is; none otherwise), each
// half a round trip after the Publish that made it, in a goroutine of its
// own, as a Redis pub/sub message reaches a replica; none starts once stop
// returns.
func (s *roundTripState) SubscribeFacts(project string, changed func(f fleet.Fact, from, to uint64)) (stop func()) {
	var (
		mu      sync.Mutex // guards stopped and Adds to pending
		stopped bool
		pending sync.WaitGroup // the notifications under way
	)
	sub, ok := s.next.(fleet.FactSubscriber)
	if !ok {
		return func() {}
	}
	stopNext := sub.SubscribeFacts(project, func(f fleet.Fact, from, to uint64) {
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		pending.Add(1)
		time.AfterFunc(s.trip/2, func() {
			defer pending.Done()
			mu.Lock()
			live := !stopped
			mu.Unlock()
			if live {
				changed(f, from, to)
			}
		})
	})
	return func() {
		stopNext()
		mu.Lock()
		stopped = true
		mu.Unlock()
		pending.Wait()
	}
}

// headroomOracleArm is OracleArm keeping each model's RPM quota at
// headroom × it: the best a client can do that keeps the Client's margin.
func headroomOracleArm(headroom float64) Arm {
	oracle := OracleArm()
	return Arm{Name: oracle.Name, New: func(ctx context.Context, env Env) (Caller, error) {
		sc := *env.Scenario
		sc.Models = append([]Model(nil), sc.Models...)
		for i := range sc.Models {
			sc.Models[i].Quota.RPM = int(headroom * float64(sc.Models[i].Quota.RPM))
		}
		env.Scenario = &sc
		return oracle.New(ctx, env)
	}}
}

// allowed returns how many requests model m's RPM quota allows at
// fleetHeadroom over the workload's span (whole minutes, rounded up).
func allowed(sc *Scenario, m Model) float64 {
	arr := sc.Workload.Arrivals
	if len(arr) == 0 || m.Quota.RPM == 0 {
		return math.NaN()
	}
	minutes := math.Ceil(float64(arr[len(arr)-1]+1) / float64(time.Minute))
	return math.Floor(fleetHeadroom*float64(m.Quota.RPM)) * minutes
}

// primaryUse is the calls the primary answered, as a percentage of what
// its quota allows at fleetHeadroom over the workload's span.
func primaryUse(sc *Scenario, r *ArmRun) float64 {
	n := 0
	for _, c := range r.Calls {
		if c.OK && sc.primary(c.Outcome) {
			n++
		}
	}
	return 100 * float64(n) / allowed(sc, sc.Models[0])
}

// roundTripsPerCall is the fleet's round trips to its shared state per
// call; NaN for an arm without one.
func roundTripsPerCall(_ *Scenario, r *ArmRun) float64 {
	n, ok := r.Figures[FigRoundTrips]
	if !ok || len(r.Calls) == 0 {
		return math.NaN()
	}
	return n / float64(len(r.Calls))
}

// callRoundTripsPerCall is roundTripsPerCall without New's warm-up round
// trips (one per replica, before any call): the round trips the calls
// made; NaN for an arm without a shared state.
func callRoundTripsPerCall(_ *Scenario, r *ArmRun) float64 {
	n, ok := r.Figures[FigRoundTrips]
	if !ok || len(r.Calls) == 0 {
		return math.NaN()
	}
	return (n - r.Figures[FigWarmUps]) / float64(len(r.Calls))
}

// outageRequests is the upstream requests sent during sc's window.
func outageRequests(sc *Scenario, r *ArmRun) float64 {
	n := 0
	for _, u := range r.Upstream {
		if sc.inWindow(u.At) {
			n++
		}
	}
	return float64(n)
}
