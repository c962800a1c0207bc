package geminiguard_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

// newFleet builds n Clients on one fake, one project, sharing store (none
// when nil), each given opts.
func newFleet(t *testing.T, srv *geminitest.Server, n int, store fleet.SharedState, opts ...geminiguard.Option) []*geminiguard.Client {
	t.Helper()
	if store != nil {
		opts = append(opts, geminiguard.WithSharedState(store))
	}
	fleet := make([]*geminiguard.Client, n)
	for i := range fleet {
		fleet[i] = newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithStartupCheck(false)}, opts...)...)
		t.Cleanup(func() { fleet[i].Close() })
	}
	return fleet
}

// newSeededFleet is newFleet with each Client drawing its retry jitter
// from a seeded source of its own (WithJitterSource: nothing else may draw
// from a Client's source), so that a fleet's run repeats.
func newSeededFleet(t *testing.T, srv *geminitest.Server, n int, store fleet.SharedState, opts ...geminiguard.Option) []*geminiguard.Client {
	t.Helper()
	fleet := make([]*geminiguard.Client, n)
	for i := range fleet {
		fleet[i] = newFleet(t, srv, 1, store, append(opts, geminiguard.WithJitterSource(rand.NewPCG(1, 2+uint64(i))))...)[0]
	}
	return fleet
}

// callSteadily makes perMinute calls a minute for minutes, each on the next
// of the fleet's Clients in turn, waits for them all and returns how many
// failed. Inside a synctest bubble the minutes are fake.
func callSteadily(t *testing.T, fleet []*geminiguard.Client, minutes, perMinute int) int64 {
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range minutes * perMinute {
		c := fleet[i%len(fleet)]
		wg.Go(func() {
			if _, _, err := ask(t.Context(), c, ""); err != nil {
				failed.Add(1)
			}
		})
		time.Sleep(time.Minute / time.Duration(perMinute))
	}
	wg.Wait()
	return failed.Load()
}

// rateLimited adds up the server 429s the fleet's Clients got from model.
func rateLimited(fleet []*geminiguard.Client, model string) int64 {
	var n int64
	for _, c := range fleet {
		for _, m := range c.Stats().Models {
			if m.Model == model {
				n += m.Failures[geminiguard.ClassRateLimit] + m.Failures[geminiguard.ClassDailyQuota]
			}
		}
	}
	return n
}

// TestFleetSharesTheProjectQuota: 10 replicas, each given the project's
// RPM (30), send 1.5 times that quota for 3 minutes. On their own they
// overshoot it 10 times over and collect the server's 429s; sharing the
// state, the fleet gets none, every call is answered, and the primary
// serves what its quota allows at the headroom.
func TestFleetSharesTheProjectQuota(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
	}{{"alone", false}, {"shared", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(
					geminitest.Model{Name: pro, Latency: 500 * time.Millisecond, Quota: geminitest.Quota{RPM: 30}},
					geminitest.Model{Name: flash, Latency: 200 * time.Millisecond},
				)
				var store fleet.SharedState
				if tc.shared {
					store = fleet.NewMemoryState()
				}
				fleet := newFleet(t, srv, 10, store, geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 30}))
				const minutes, perMinute = 3, 45 // 1.5 × the quota
				failed := callSteadily(t, fleet, minutes, perMinute)
				upstream429 := rateLimited(fleet, pro)
				proAnswers := srv.Hits(pro, geminitest.VerbGenerate) - int(upstream429)
				t.Logf("%s: %d server 429s, %d calls failed, the primary answered %d of %d", tc.name, upstream429, failed, proAnswers, minutes*perMinute)
				if !tc.shared {
					require.Greater(t, upstream429, int64(0), "replicas on their own overshoot the project's quota")
					return
				}
				assert.Zero(t, upstream429, "server 429s")
				assert.Zero(t, failed, "failed calls")
				// 0.8 × 30 a minute; the last minute's sends may fall in a
				// window the test stops short of.
				assert.GreaterOrEqual(t, float64(proAnswers), 0.95*0.8*30*minutes, "the primary serves what its quota allows")
				assert.LessOrEqual(t, proAnswers, 24*minutes)
				st := fleet[0].Stats().Fleet
				assert.True(t, st.Connected)
				assert.Equal(t, 10, st.Replicas)
			})
		})
	}
}

// TestFleetDailyQuotaSeenByOneReplicaHoldsForAll: one replica's daily-quota
// 429 keeps the primary out for every replica: the fleet sends it one
// request, not one per replica.
func TestFleetDailyQuotaSeenByOneReplicaHoldsForAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.DailyQuota}}},
			geminitest.Model{Name: flash},
		)
		fleet := newFleet(t, srv, 5, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))
		for round := range 3 {
			for i, c := range fleet {
				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err, "round %d replica %d", round, i)
				assert.Equal(t, flash, rec.Model, "round %d replica %d", round, i)
			}
			time.Sleep(time.Minute)
		}
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbGenerate), "requests the fleet sent the exhausted primary")
		for i, c := range fleet {
			assert.False(t, c.Stats().Models[0].CoolDownUntil.IsZero(), "replica %d cools the primary down", i)
		}
	})
}

// TestFleetOpenBreakerStopsTheOtherReplicas: once one replica's breaker
// opens on a dead primary, the others send it nothing until the open
// period ends; then the fleet sends one probe, not one per replica, and
// once it succeeds every replica is closed again.
func TestFleetOpenBreakerStopsTheOtherReplicas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var dead atomic.Bool
		dead.Store(true)
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: time.Second, Decide: func(geminitest.Request, int) geminitest.Step {
				if dead.Load() {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{}
			}},
			geminitest.Model{Name: flash},
		)
		const openFor = 30 * time.Second
		fleet := newFleet(t, srv, 5, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 3, OpenFor: openFor, DeadAfter: -1}),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
		for fleet[0].Stats().Models[0].State != geminiguard.StateOpen {
			_, _, err := ask(t.Context(), fleet[0], "")
			require.NoError(t, err)
		}
		opened := srv.Hits(pro, geminitest.VerbGenerate)
		require.Equal(t, 3, opened)
		time.Sleep(time.Second) // past the others' next read of the fleet's facts
		for i, c := range fleet[1:] {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, flash, rec.Model, "replica %d", i+1)
			assert.Equal(t, geminiguard.StateOpen, c.Stats().Models[0].State, "replica %d", i+1)
		}
		assert.Equal(t, opened, srv.Hits(pro, geminitest.VerbGenerate), "requests to the open primary from the other replicas")

		dead.Store(false)
		time.Sleep(openFor)
		var wg sync.WaitGroup
		for _, c := range fleet {
			wg.Go(func() {
				_, _, err := ask(t.Context(), c, "")
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, opened+1, srv.Hits(pro, geminitest.VerbGenerate), "one probe for the fleet")
		time.Sleep(time.Second)
		for i, c := range fleet {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, pro, rec.Model, "replica %d after the probe", i)
		}
	})
}

// TestFleetOpensADeadModelForItsOwnOpenPeriod: pro fails fast (0.3s) for
// its first 3s, then answers. Three replicas each see two of its failures
// at once (a millisecond apart):
// none opens it on its own (FailureThreshold is 5), the fleet's six do. It
// is opened for the breaker's own period (MinOpenFor, 2s, from closed), as
// one process opens it, not for OpenFor (30s): at 4s pro answers again.
func TestFleetOpensADeadModelForItsOwnOpenPeriod(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		srv := failingFast(time.Second, func(int) bool { return time.Since(start) < 3*time.Second })
		changes := &stateChanges{}
		fleet := newFleet(t, srv, 3, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()))
		var wg sync.WaitGroup
		for r, c := range fleet {
			for u := range 2 {
				wg.Go(func() {
					// 1ms apart: the replicas' reports of the failures are not at
					// one fake instant, in an order the scheduler picks (one
					// replica's report made while its second request was out
					// reached the store last, and the fleet waited for an answer
					// that had come: 1 run in 30 of the fleet tests beside two
					// busy loops)
					time.Sleep(time.Duration(2*r+u) * time.Millisecond)
					_, rec, err := ask(t.Context(), c, "")
					assert.NoError(t, err)
					assert.Equal(t, flash, rec.Model)
				})
			}
		}
		wg.Wait()
		require.Contains(t, changes.get(), pro+":open", "the fleet's six failures opened pro")

		time.Sleep(time.Until(start.Add(4 * time.Second)))
		_, rec, err := ask(t.Context(), fleet[0], "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "open for 2s: probed at 4s, and pro answered")
	})
}

// TestFleetBurstAfterAQuietSpellKeepsAModelThatAnswersMost: as
// TestBurstAfterAQuietSpellKeepsAModelThatAnswersMost, with the 20 users
// spread over four replicas sharing one store. The fleet's failures in a
// row (each burst's fast 503s, back before its answers) of a model silent
// only between bursts must not open its breaker where one process's would
// not: its failures have lasted 0.3s, not half of DeadAfter.
func TestFleetBurstAfterAQuietSpellKeepsAModelThatAnswersMost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answered, oracle := burstsAfterQuietSpells(t, false, func(srv *geminitest.Server) []*geminiguard.Client {
			return newSeededFleet(t, srv, 4, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))
		})
		assert.GreaterOrEqual(t, answered, 0.9*oracle, "pro answers about two calls in three of each burst (%.0f)", answered)
	})
}

// TestFleetBurstAfterAFailureAndAQuietSpellWaitsForTheBurstsAnswers: as
// TestBurstAfterAFailureAndAQuietSpellWaitsForTheBurstsAnswers, over four
// replicas sharing one store. The fleet's run of failures began with the
// straggler's, 15s before the next burst's fast 503s: before, they opened
// pro's breaker fleet-wide while the replicas' answers to the burst were
// on their way (28-41 of the bursts' calls answered by pro, against 65 now).
func TestFleetBurstAfterAFailureAndAQuietSpellWaitsForTheBurstsAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		answered, oracle := burstsAfterQuietSpells(t, true, func(srv *geminitest.Server) []*geminiguard.Client {
			return newSeededFleet(t, srv, 4, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))
		})
		assert.GreaterOrEqual(t, answered, 0.9*oracle, "pro answers about two calls in three of each burst (%.0f)", answered)
	})
}

// TestFleetFlakyModelsRunOfFailuresIsNotTakenForDeath: as
// TestFlakyModelsRunOfFailuresIsNotTakenForDeath, the user's calls on two
// replicas in turn. Each replica sees half of a run of failures, the fleet
// all of it: the fleet's dead rule reads the run against the model's
// record as one process's does. Before, it opened pro on any run that left
// it silent for DeadAfter (19 openings in 10 minutes), and pro answered 40
// calls of 367; now 90 of 330, the oracle's 110. The three openings left
// come of runs of 8 and 14 read against one replica's half of the record,
// which held 12 answers of 20 and 41 of 102 at those times (a model that
// answers a third of its requests).
func TestFleetFlakyModelsRunOfFailuresIsNotTakenForDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := flaky(time.Now(), 0)
		clients := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))

		calls, answered := oneUser(t, 10*time.Minute, clients...)

		assert.GreaterOrEqual(t, float64(answered), 0.75*float64(calls)/3, "pro answers about a third of the calls (%d of %d)", answered, calls)
	})
}

// flakyState is a SharedState that can be made to fail, or to hang until
// its caller gives up, and counts the calls that reached it.
type flakyState struct {
	fleet.SharedState
	mode  atomic.Int32 // 0: works, 1: fails at once, 2: hangs, 3: Lease panics
	calls atomic.Int64
}

const (
	stateWorks = iota
	stateFails
	stateHangs
	statePanics
)

func (f *flakyState) broken(ctx context.Context) error {
	f.calls.Add(1)
	switch f.mode.Load() {
	case stateFails:
		return errors.New("connection refused")
	case stateHangs:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *flakyState) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	if f.mode.Load() == statePanics {
		f.calls.Add(1)
		panic("the store's client panicked")
	}
	if err := f.broken(ctx); err != nil {
		return fleet.Lease{}, err
	}
	return f.SharedState.Lease(ctx, r)
}

func (f *flakyState) Publish(ctx context.Context, project string, fact fleet.Fact) error {
	if err := f.broken(ctx); err != nil {
		return err
	}
	return f.SharedState.Publish(ctx, project, fact)
}

// TestFleetCarriesOnAloneWhileTheStoreIsDown: with the store failing, no
// call fails; each replica keeps to its share of the limit (the limit
// divided by the replicas it last saw), counts what it let through
// uncoordinated, and rejoins once the store answers again.
func TestFleetCarriesOnAloneWhileTheStoreIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Quota: geminitest.Quota{RPM: 50}},
			geminitest.Model{Name: flash},
		)
		store := &flakyState{SharedState: fleet.NewMemoryState()}
		fleet := newFleet(t, srv, 4, store, geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 50}))
		for range 2 { // every replica registers, and a second later hears of the others: 4 live
			for _, c := range fleet {
				_, _, err := ask(t.Context(), c, "")
				require.NoError(t, err)
			}
			time.Sleep(time.Second)
		}
		require.Equal(t, 4, fleet[0].Stats().Fleet.Replicas)
		time.Sleep(2 * time.Second) // the requests leased and not used lapse

		store.mode.Store(stateFails)
		c := fleet[0]
		for range 30 {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			time.Sleep(time.Second)
		}
		st := c.Stats()
		// 0.8 × 50 = 40 a minute for the fleet, 10 for each of 4 replicas.
		assert.Equal(t, int64(10), st.Fleet.Uncoordinated, "requests let through alone")
		assert.False(t, st.Fleet.Connected)
		assert.Zero(t, rateLimited(fleet, pro))
		assert.Equal(t, 8+10, srv.Hits(pro, geminitest.VerbGenerate))
		assert.Less(t, store.calls.Load(), int64(30), "the store's breaker spares it most calls")

		store.mode.Store(stateWorks)
		time.Sleep(time.Minute)
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model)
		st = c.Stats()
		assert.True(t, st.Fleet.Connected, "rejoined")
		assert.Equal(t, int64(10), st.Fleet.Uncoordinated)
	})
}

// TestFleetStorePanicDuringAProbeLeavesTheStoreUsable: a store whose
// Lease panics on the round trip that probes it after carrying on alone
// (its breaker half-open) panics the caller, and the store's breaker is
// settled all the same: once the store works again the replica rejoins.
func TestFleetStorePanicDuringAProbeLeavesTheStoreUsable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro})
		store := &flakyState{SharedState: fleet.NewMemoryState()}
		c := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 1000}))[0]
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)

		store.mode.Store(stateFails)
		for range 5 {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			time.Sleep(10 * time.Millisecond)
		}
		require.False(t, c.Stats().Fleet.Connected, "carrying on alone")
		time.Sleep(3 * time.Second) // past AloneFor: the next round trip probes the store

		store.mode.Store(statePanics)
		calls := store.calls.Load()
		assert.Panics(t, func() { _, _, _ = ask(t.Context(), c, "") })
		require.Equal(t, calls+1, store.calls.Load(), "the probe reached the store")

		store.mode.Store(stateWorks)
		time.Sleep(3 * time.Second)
		for range 3 {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			time.Sleep(time.Second)
		}
		assert.True(t, c.Stats().Fleet.Connected, "rejoined: the panicked probe gave its slot back")
	})
}

// TestFleetHangingStoreDelaysACallOnce: a store that stops answering (Redis
// paused) delays the calls that find it so by the store's bound, doubled
// after each timeout (30, 60, 120 ms: one slow round trip is not a store
// that failed); after the third the calls do not wait for the store at all.
func TestFleetHangingStoreDelaysACallOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 100 * time.Millisecond})
		store := &flakyState{SharedState: fleet.NewMemoryState()}
		fleet := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 1000}))
		c := fleet[0]
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		store.mode.Store(stateHangs)
		var took []time.Duration
		for range 5 {
			start := time.Now()
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			took = append(took, time.Since(start))
		}
		assert.Equal(t, []time.Duration{130 * time.Millisecond, 160 * time.Millisecond, 220 * time.Millisecond, 100 * time.Millisecond, 100 * time.Millisecond}, took)
	})
}

// TestFleetLeasesCutRoundTrips: at a steady load, a replica leases
// requests in batches: far fewer round trips to the store than calls.
func TestFleetLeasesCutRoundTrips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 100 * time.Millisecond})
		fleet := newFleet(t, srv, 1, fleet.NewMemoryState(), geminiguard.WithCascade(pro), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 100_000}))
		c := fleet[0]
		const calls = 2000
		var wg sync.WaitGroup
		for range calls { // 100 calls a second for 20 s
			wg.Go(func() {
				_, _, err := ask(t.Context(), c, "")
				assert.NoError(t, err)
			})
			time.Sleep(10 * time.Millisecond)
		}
		wg.Wait()
		st := c.Stats().Fleet
		t.Logf("%d round trips for %d calls", st.RoundTrips, calls)
		assert.LessOrEqual(t, float64(st.RoundTrips)/calls, 0.1, "round trips per call")
	})
}

// fleetRoundTrips adds up the round trips the fleet's Clients made to their
// shared state.
func fleetRoundTrips(fleet []*geminiguard.Client) int64 {
	var n int64
	for _, c := range fleet {
		n += c.Stats().Fleet.RoundTrips
	}
	return n
}

// TestFleetRefusedLeaseFallsThroughInOneRoundTrip: 40 replicas, each
// calling every 40 s (so that no lease outlives a call), send 1.5 times
// the primary's quota. A call whose primary lease the saturated quota
// refuses gets the secondary's lease in the same round trip: one round
// trip per call, not two for the calls the secondary answers, and still
// no server 429 and every call answered.
func TestFleetRefusedLeaseFallsThroughInOneRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: 500 * time.Millisecond, Quota: geminitest.Quota{RPM: 20}},
			geminitest.Model{Name: flash, Latency: 200 * time.Millisecond, Quota: geminitest.Quota{RPM: 1000}},
		)
		fleet := newFleet(t, srv, 40, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash),
			geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 20}), geminiguard.WithLimits(flash, geminiguard.Limits{RPM: 1000}))
		warmUps := fleetRoundTrips(fleet) // New's, one per replica
		const minutes, perMinute = 3, 60  // 3.75 × the primary's 16 at headroom
		failed := callSteadily(t, fleet, minutes, perMinute)
		calls := minutes * perMinute
		trips := fleetRoundTrips(fleet) - warmUps
		proAnswers, flashAnswers := srv.Hits(pro, geminitest.VerbGenerate), srv.Hits(flash, geminitest.VerbGenerate)
		t.Logf("%d calls: %d round trips (%.3f a call) beside %d warm-ups; the primary answered %d, the secondary %d",
			calls, trips, float64(trips)/float64(calls), warmUps, proAnswers, flashAnswers)
		assert.Zero(t, rateLimited(fleet, pro)+rateLimited(fleet, flash), "server 429s")
		assert.Zero(t, failed, "failed calls")
		assert.LessOrEqual(t, proAnswers, 16*minutes, "the primary within its quota at headroom")
		assert.GreaterOrEqual(t, float64(proAnswers), 0.9*16*minutes, "the primary serves what its quota allows")
		assert.Equal(t, calls, proAnswers+flashAnswers, "every call answered, by one request")
		assert.LessOrEqual(t, float64(trips)/float64(calls), 1.05, "round trips per call: a refused primary lease falls through to the secondary's")
	})
}

// TestOTelFleetFigures: a dashboard sees a replica carrying on alone: the
// uncoordinated requests, the failed round trips, and connected at 0.
func TestOTelFleetFigures(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro})
		store := &flakyState{SharedState: fleet.NewMemoryState()}
		tel := newTelemetry()
		c := newFleet(t, srv, 1, store, append(tel.opts, geminiguard.WithCascade(pro), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 100}))...)[0]
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		store.mode.Store(stateFails)
		for range 5 {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
		}
		ms := tel.metrics(t)
		assert.Equal(t, map[string]int64{"": 5}, counts(t, ms, "geminiguard.fleet.uncoordinated", "{request}"))
		// New's warm-up, the first call's lease, then three failures.
		assert.Equal(t, map[string]int64{"": 5}, counts(t, ms, "geminiguard.fleet.round_trips", "{call}"), "the store's breaker spares it the calls after the third failure")
		assert.Equal(t, map[string]int64{"": 3}, counts(t, ms, "geminiguard.fleet.failures", "{call}"))
		connected := ms["geminiguard.fleet.connected"].Data.(metricdata.Gauge[int64]).DataPoints
		require.Len(t, connected, 1)
		assert.Zero(t, connected[0].Value)
	})
}

// TestFleetModelListedAgainIsClearedFleetWide: a 404 on one replica keeps
// the model out for every replica until a CheckCascade lists it again; that
// listing ends it for the whole fleet, and no replica brings it back from
// the shared state.
func TestFleetModelListedAgainIsClearedFleetWide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.NotFound}}},
			geminitest.Model{Name: flash},
		)
		fleet := newFleet(t, srv, 3, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))
		for i, c := range fleet {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, flash, rec.Model, "replica %d while the primary is missing", i)
		}
		require.Equal(t, 1, srv.Hits(pro, geminitest.VerbGenerate), "one 404 for the fleet")

		_, err := fleet[0].CheckCascade(t.Context()) // the fake lists the primary: it is back
		require.NoError(t, err)
		for range 2 {
			for i, c := range fleet {
				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err)
				assert.Equal(t, pro, rec.Model, "replica %d once the primary is listed again", i)
			}
			time.Sleep(2 * time.Second) // past every replica's next read of the fleet's facts
		}
	})
}

// TestFleetSharesTheBudget: with a shared state, WithBudget is the
// project's: two replicas with a daily budget of 10,000 micro-dollars spend
// it together (5 calls of 2,000), not 10,000 each.
func TestFleetSharesTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := fleet.NewMemoryState()
		a, srv := budgetClient(t, geminiguard.Budget{PerDay: 10_000, SteerAt: 1}, geminiguard.WithSharedState(store), geminiguard.WithStartupCheck(false))
		b := newClient(t, srv, nil, geminiguard.WithCascade(dearModel, cheapModel),
			geminiguard.WithPrices(dearModel, geminiguard.Price{Input: 1 * geminiguard.Dollar, Output: 10 * geminiguard.Dollar}),
			geminiguard.WithPrices(cheapModel, geminiguard.Price{Input: 0.50 * geminiguard.Dollar, Output: 5 * geminiguard.Dollar}),
			geminiguard.WithBudget(geminiguard.Budget{PerDay: 10_000, SteerAt: 1}),
			geminiguard.WithSharedState(store), geminiguard.WithStartupCheck(false))
		spendCalls(t, a, 3)
		time.Sleep(1500 * time.Millisecond) // past a's report of its spend, due within a second
		spendCalls(t, b, 2)
		time.Sleep(1500 * time.Millisecond)
		requireRefused(t, b, srv)
		requireRefused(t, a, srv)
		assert.Equal(t, 5, srv.Hits(dearModel, geminitest.VerbGenerate), "the fleet spent its one budget")
		assert.Equal(t, geminiguard.Micros(10_000), a.Stats().Budget.SpentToday, "the project's spend")
	})
}

// TestFleetFactLearnedAlonePublishedOnRejoin: a daily quota one replica
// learns while the store fails is published at its first round trip back,
// so that the other replica sends the exhausted primary nothing.
func TestFleetFactLearnedAlonePublishedOnRejoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro},
			geminitest.Model{Name: flash},
		)
		store := &flakyState{SharedState: fleet.NewMemoryState()}
		fleet := newFleet(t, srv, 2, store, geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 100}))
		store.mode.Store(stateFails)
		srv.Script(pro, geminitest.Step{Fault: geminitest.DailyQuota})
		_, rec, err := ask(t.Context(), fleet[0], "")
		require.NoError(t, err)
		require.Equal(t, flash, rec.Model, "the primary's daily quota, learned alone")

		store.mode.Store(stateWorks)
		time.Sleep(time.Minute) // the store's breaker lets the replica try again
		_, rec, err = ask(t.Context(), fleet[0], "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		_, rec, err = ask(t.Context(), fleet[1], "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model, "the other replica heard of the daily quota")
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbGenerate), "requests to the exhausted primary")
	})
}

// TestFleetProjectNamesTheFleet: Clients with different keys are one fleet
// when WithProject names their project, two without.
func TestFleetProjectNamesTheFleet(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: pro})
	store := fleet.NewMemoryState()
	client := func(key string, opts ...geminiguard.Option) *geminiguard.Client {
		c := newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithAPIKey(key), geminiguard.WithStartupCheck(false),
			geminiguard.WithCascade(pro), geminiguard.WithSharedState(store)}, opts...)...)
		t.Cleanup(func() { c.Close() })
		return c
	}
	a, b := client("key-one"), client("key-two")
	assert.NotEqual(t, geminiguard.ProjectOf(a), geminiguard.ProjectOf(b), "two keys, two fleets by default")
	a, b = client("key-one", geminiguard.WithProject("my-project")), client("key-two", geminiguard.WithProject("my-project"))
	assert.Equal(t, geminiguard.ProjectOf(a), geminiguard.ProjectOf(b), "one named project, one fleet")
	assert.NotContains(t, geminiguard.ProjectOf(a), "my-project", "a hash, not the id")
	_, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey("k"), geminiguard.WithProject(""))
	assert.ErrorContains(t, err, "WithProject")
	_, err = geminiguard.New(t.Context(), geminiguard.WithAPIKey("k"), geminiguard.WithFleetSize(-1))
	assert.ErrorContains(t, err, "WithFleetSize")
}

// lostReplyState is a SharedState that, once armed, runs the first Lease
// that reports failures and then loses its reply: the caller's bound runs
// out as if the answer never came back.
type lostReplyState struct {
	fleet.SharedState
	armed atomic.Bool
}

func (s *lostReplyState) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	l, err := s.SharedState.Lease(ctx, r)
	if r.Failures > 0 && s.armed.CompareAndSwap(true, false) {
		<-ctx.Done()
		return fleet.Lease{}, ctx.Err()
	}
	return l, err
}

// TestFleetLostReplyCountsFailuresOnce: a report whose reply was lost (the
// store counted it, the round trip timed out) is not sent again, so the
// fleet counts each failure once: two failures do not open a breaker of
// threshold 3, and the primary gets the next call.
func TestFleetLostReplyCountsFailuresOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}},
			geminitest.Model{Name: flash})
		store := &lostReplyState{SharedState: fleet.NewMemoryState()}
		c := newFleet(t, srv, 1, store, geminiguard.WithCascade(pro, flash),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 3, OpenFor: time.Hour, DeadAfter: -1}),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))[0]
		store.armed.Store(true)
		for i := range 2 {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			require.Equal(t, flash, rec.Model, "call %d", i)
		}
		require.False(t, store.armed.Load(), "the first failure's report lost its reply")
		require.Equal(t, 2, srv.Hits(pro, geminitest.VerbGenerate))
		assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State, "two failures of a threshold of three")
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, 3, srv.Hits(pro, geminitest.VerbGenerate), "the primary gets the third call")
	})
}

// TestFleetWaveAfterASilenceGoesThroughTheReplicaHoldingTheProbe: as
// TestWaveAfterASilenceMeetsTheModelTogether, with six users on each of
// two replicas sharing one store. Pro fails fast from 20s to 130s: its
// four bad waves open it (two did, when the fleet counted its run in
// requests: TestFleetWavesMeetingABadSpellTogetherAreOneDrawEach; one
// process's three do, its record of outcomes holding twice a replica's).
// The wave after its bad spell meets half-open breakers after a silence on
// both; the fleet grants its probe slot to one replica, whose six calls
// all go to pro (the door; one before), while the other's, refused the
// slot, go to flash: the fleet sends an open model one replica's calls,
// not every replica's.
func TestFleetWaveAfterASilenceGoesThroughTheReplicaHoldingTheProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const users, waves, every = 6, 7, 30 * time.Second
		start := time.Now()
		srv := failingFastBetween(start, 20*time.Second, 130*time.Second)
		replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))

		byPro := make([][2]int, waves) // per wave, per replica: calls pro answered
		for _, w := range callInWaves(t, replicas, users, waves, every, time.Millisecond, start) {
			if w.rec.Model == pro {
				byPro[w.wave][w.replica]++
			}
		}

		door := byPro[5]
		assert.ElementsMatch(t, []int{users, 0}, door[:], "one replica's wave meets pro: %v", byPro)
		assert.Equal(t, [][2]int{{users, users}, {0, 0}, {0, 0}, {0, 0}, {0, 0}, door, {users, users}}, byPro)
	})
}

// TestFleetWavesMeetingABadSpellTogetherAreOneDrawEach: as
// TestWavesMeetingABadSpellTogetherAreOneDrawEach, with six users on each
// of two replicas sharing one store. The fleet counts its run in draws as
// one process does: the twelve requests of a wave, sent together from two
// replicas, are one draw, and two waves in a row in bad spells do not make
// a flaky model dead. Before, the fleet counted the run in requests (24
// failures in a row) and opened pro as one process did before it counted
// draws.
func TestFleetWavesMeetingABadSpellTogetherAreOneDrawEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const users, waves = 6, 60
		start := time.Now()
		spells := newBadSpells(start, waves)
		srv := failingFast(time.Second, spells.bad)
		changes := &stateChanges{}
		replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash),
			geminiguard.WithHooks(changes.hooks()))

		answered := 0
		for _, w := range callInWaves(t, replicas, users, waves, spellWaves, 0, start) {
			if w.rec.Model == pro {
				answered++
			}
		}
		oracle := 2 * users * spells.goodWaves()
		t.Logf("pro answered %d calls of the oracle's %d; its breakers opened from closed %d times", answered, oracle, changes.trips(pro))

		assert.LessOrEqual(t, changes.trips(pro), 2, "pro's breaker opened from closed at most once (on each replica), in the seven bad waves in a row")
		assert.GreaterOrEqual(t, float64(answered), 0.75*float64(oracle), "pro answers the waves that meet a good spell (%d calls of the oracle's %d)", answered, oracle)
	})
}

// TestFleetReplicaLearnsAnswerTimesFromTheOthers: replica A's calls teach
// it pro's answer times (1s); then replica B's first call to pro stalls
// (60s). B shares the fleet's record of pro's answer times, so its attempt
// is cut where A's would be and flash answers it within seconds. Before,
// a replica learned from its own answers only, and B, which had none,
// waited the stall out. Hedging is off: the cut is what this pins (a
// replica hedges too, TestFleetReplicaHedgesAStallAsOneProcessDoes).
func TestFleetReplicaLearnsAnswerTimesFromTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var stallNext atomic.Bool
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second,
			Decide: func(geminitest.Request, int) geminitest.Step {
				if stallNext.CompareAndSwap(true, false) {
					return geminitest.Step{Latency: time.Minute}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 500 * time.Millisecond})
		replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), hedgingOff)
		a, b := replicas[0], replicas[1]

		for i := range 12 {
			_, rec, err := ask(t.Context(), a, "")
			require.NoError(t, err)
			require.Equal(t, pro, rec.Model, "call %d", i)
		}
		time.Sleep(2 * time.Second) // A's record shared on its next round trip
		_, _, err := ask(t.Context(), a, "")
		require.NoError(t, err)

		stallNext.Store(true)
		began := time.Now()
		_, rec, err := ask(t.Context(), b, "")
		took := time.Since(began)
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model, "B's stalled attempt to pro cut, flash answers")
		assert.Less(t, took, 5*time.Second, "cut at the fleet's learned deadline, not waited out")
	})
}

// TestFleetReplicasFirstStallIsCutOnceTheOthersAnswer: replica B's first
// call to pro stalls (a minute), sent before pro answered anything; replica
// A's calls meanwhile answer in 1s each. One process would cut its stall
// at the deadlines its other calls' answers teach. B now hears A's answers
// while its attempt is out (it reads the fleet's record each second while
// an attempt of a model it has not learned waits, and A shares its record
// at each answer while the model's deadlines are learned), so its stall is
// cut within seconds and flash answers. Before, a replica read the fleet's
// record only on its own round trips, which its next call makes: B waited
// the stall out.
func TestFleetReplicasFirstStallIsCutOnceTheOthersAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second,
			Decide: func(geminitest.Request, int) geminitest.Step {
				if calls.Add(1) == 1 {
					return geminitest.Step{Latency: time.Minute}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 500 * time.Millisecond})
		replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), hedgingOff)
		a, b := replicas[0], replicas[1]

		var stalled sync.WaitGroup
		var model string
		var took time.Duration
		began := time.Now()
		stalled.Go(func() {
			_, rec, err := ask(t.Context(), b, "")
			assert.NoError(t, err)
			model, took = rec.Model, time.Since(began)
		})
		synctest.Wait() // B's request to pro is out
		for i := range 8 {
			_, rec, err := ask(t.Context(), a, "")
			require.NoError(t, err)
			require.Equal(t, pro, rec.Model, "A's call %d", i)
		}
		stalled.Wait()
		assert.Equal(t, flash, model, "B's stalled attempt to pro cut, flash answers")
		assert.Less(t, took, 15*time.Second, "cut once A's answers teach the deadlines, not waited out")
	})
}

// TestFleetStallOfOneCallerOverManyReplicasIsCutOnceTheFleetsAnswersReachIt:
// one user calls twenty replicas in turn, pro answering in 1s; its
// fifteenth call stalls a minute. Fourteen replicas hold an answer each,
// which would ride on each one's next round trip, twenty calls later: none
// was shared when the stall went out, and the stalled replica, reading the
// fleet's record each second, learns nothing from it. It now asks the
// fleet for its records (fleet.FactRecordWanted); the replicas holding
// answers share them at once, and the stall is cut as one process cuts
// it: flash answers within seconds, where the stall was waited out.
func TestFleetStallOfOneCallerOverManyReplicasIsCutOnceTheFleetsAnswersReachIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const replicas, stalled = 20, 14
		var calls atomic.Int64
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: 700 * time.Millisecond,
			Decide: func(geminitest.Request, int) geminitest.Step {
				if calls.Add(1) == stalled+1 {
					return geminitest.Step{Latency: time.Minute}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 500 * time.Millisecond})
		fleet := newSeededFleet(t, srv, replicas, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), hedgingOff)
		warmUps := fleetRoundTrips(fleet)
		for i := range stalled + 1 {
			began := time.Now()
			_, rec, err := ask(t.Context(), fleet[i], "")
			require.NoError(t, err)
			if i < stalled {
				require.Equal(t, pro, rec.Model, "call %d", i)
				continue
			}
			took := time.Since(began)
			assert.Equal(t, flash, rec.Model, "the stalled attempt to pro cut, flash answers")
			assert.Less(t, took, 10*time.Second, "cut once the fleet's answers reach the stalled replica, not waited out")
		}
		trips := fleetRoundTrips(fleet) - warmUps
		t.Logf("%d calls: %d round trips beside %d warm-ups", stalled+1, trips, warmUps)
		assert.LessOrEqual(t, trips, int64(2*(stalled+1)+replicas+10), "each call's two (its read of the facts, its report of a request to a model it has not heard), a notification's each, the stalled replica's reads")
	})
}

// TestFleetReplicaHedgesAStallAsOneProcessDoes: as
// TestStallOfAModelThatStallsOftenIsHedgedAtItsAnswersP95, the calls spread
// over two replicas sharing one store. A stall is hedged to flash at pro's
// answers' p95 (1s and a bit), answered 0.8s later, as one process hedges
// it. Before, a replica never hedged: each stall waited its cut (twice
// the median, 2s and more) before flash was asked. A flash with limits is
// leased through the shared state, which a hedge does not ask: its stalls
// are cut as before, and no request goes to flash outside a lease.
func TestFleetReplicaHedgesAStallAsOneProcessDoes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []geminiguard.Option
		hedged func(t *testing.T, hedged int, stalled []time.Duration)
	}{
		{"flash without limits", nil, func(t *testing.T, hedged int, stalled []time.Duration) {
			assert.GreaterOrEqual(t, hedged, 5, "within the replicas' hedge budgets, stalls are hedged at the answers' p95: %v", stalled)
		}},
		{"flash's quota leased through the fleet", []geminiguard.Option{geminiguard.WithLimits(flash, geminiguard.Limits{RPM: 1000})}, func(t *testing.T, hedged int, stalled []time.Duration) {
			assert.Zero(t, hedged, "no hedge to a model whose quota the fleet leases: %v", stalled)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(stallEvery(pro, time.Second, 5, 45*time.Second), geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
				replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), append([]geminiguard.Option{geminiguard.WithCascade(pro, flash)}, tc.opts...)...)
				for i := range 20 {
					_, _, err := ask(t.Context(), replicas[i%2], "")
					require.NoError(t, err)
				}
				var stalled []time.Duration
				for i := range 60 {
					start := time.Now()
					_, rec, err := ask(t.Context(), replicas[i%2], "")
					require.NoError(t, err)
					if rec.Model == flash {
						stalled = append(stalled, time.Since(start))
					}
				}
				require.NotEmpty(t, stalled, "every fifth request stalls: flash answers those calls")
				hedged := 0
				for _, d := range stalled {
					if d < 2*time.Second {
						hedged++ // hedged at pro's p95, answered 0.8s later
					}
				}
				tc.hedged(t, hedged, stalled)
			})
		})
	}
}

// answerOnItsWay is a fake whose pro answers its first request in 3s and
// fails the next six fast (0.3s), then answers all in 3s; flash answers in
// 0.2s.
func answerOnItsWay() *geminitest.Server {
	return geminitest.New(geminitest.Model{Name: pro, Latency: 3 * time.Second,
		Decide: func(_ geminitest.Request, i int) geminitest.Step {
			if i >= 1 && i <= 6 {
				return geminitest.Step{Fault: geminitest.Overloaded, Latency: 300 * time.Millisecond}
			}
			return geminitest.Step{}
		}}, geminitest.Model{Name: flash, Latency: 200 * time.Millisecond})
}

// TestFleetWaitsForAnswersOnTheirWayToAnotherReplica: at the start,
// replica A's request to pro is on its way (pro answers in 3s), while the
// other replicas' first requests fail fast: six failures in a row of a
// model that never answered. One process waits for the answer of a request
// sent before its failures. Before, the replica with nothing in flight took
// the model for dead and opened it for every replica: by the fleet's rule
// when the failures are spread (three on each of B and C), by its own
// breaker's when they are its own (six on B). Each replica now reports the
// answers it awaits (fleet.LeaseRequest.Awaiting), and both rules wait for
// A's (fleet.Lease.Awaiting; circuit.Breaker.AwaitedElsewhere).
func TestFleetWaitsForAnswersOnTheirWayToAnotherReplica(t *testing.T) {
	for _, tc := range []struct {
		name           string
		failing, calls int // replicas after A, and each one's calls
	}{
		{"the fleet's rule", 2, 3},
		{"a replica's own breaker", 1, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := answerOnItsWay()
				changes := &stateChanges{}
				replicas := newSeededFleet(t, srv, 1+tc.failing, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()))

				var wg sync.WaitGroup
				wg.Go(func() {
					_, rec, err := ask(t.Context(), replicas[0], "")
					assert.NoError(t, err)
					assert.Equal(t, pro, rec.Model, "A's first call")
				})
				time.Sleep(50 * time.Millisecond)
				for _, c := range replicas[1:] {
					wg.Go(func() {
						for range tc.calls {
							_, _, err := ask(t.Context(), c, "")
							assert.NoError(t, err)
						}
					})
				}
				wg.Wait()
				require.Equal(t, 7, srv.Hits(pro, geminitest.VerbGenerate), "A's request and six that failed")

				assert.Zero(t, changes.trips(pro), "pro opened nowhere: %v", changes.get())
				_, rec, err := ask(t.Context(), replicas[1], "")
				require.NoError(t, err)
				assert.Equal(t, pro, rec.Model, "B's next call goes to pro, which answered A")
			})
		})
	}
}

// TestFleetReplicaThatNeverAnsweredHearsTheOthersAnswers: pro answers
// replica A's calls (1s) all along, while replica B's first five requests
// fail fast. One process hears A's answers and does not take pro for dead
// on five failures in a row of a model answering every other call; before,
// B's breaker, which had heard no answer of its own, opened pro on its
// failures alone, for the whole fleet. B's breaker now hears the fleet's
// latest answer (fleet.Lease.Answered) as one process hears all of them.
func TestFleetReplicaThatNeverAnsweredHearsTheOthersAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var bFailed atomic.Int32
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second,
			Decide: func(r geminitest.Request, _ int) geminitest.Step {
				if prompted(r, "from B") && bFailed.Add(1) <= 5 {
					return geminitest.Step{Fault: geminitest.Overloaded, Latency: 300 * time.Millisecond}
				}
				return geminitest.Step{}
			}}, geminitest.Model{Name: flash, Latency: 200 * time.Millisecond})
		changes := &stateChanges{}
		replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()))
		a, b := replicas[0], replicas[1]

		start := time.Now()
		var wg sync.WaitGroup
		answeredByProUntil(t, &wg, a, start, 15*time.Second)
		time.Sleep(3 * time.Second)
		var last geminiguard.CallRecord
		for range 6 {
			_, err := b.GenerateContent(geminiguard.RecordCall(t.Context(), &last), "", genai.Text("from B"), nil)
			require.NoError(t, err)
		}
		wg.Wait()

		assert.Zero(t, changes.trips(pro), "pro opened nowhere: %v", changes.get())
		assert.Equal(t, pro, last.Model, "B's sixth call goes to pro")
	})
}

// TestFleetReplicaHearsTheFleetsAnswersBeforeCallingAnOutage: for three
// seconds every request replica B sends fails fast, on both models, while
// pro answers replica A all along. One process that hears A's answers is in
// no outage (no model answering); before, B, hearing no answer of its own
// for two seconds, called an outage and opened both models for OpenFor
// across the fleet, and A's calls lost pro. B now hears the fleet's latest
// answers.
func TestFleetReplicaHearsTheFleetsAnswersBeforeCallingAnOutage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		fromB := func(r geminitest.Request) bool {
			return prompted(r, "from B") && time.Since(start) < 6*time.Second
		}
		decide := func(r geminitest.Request, _ int) geminitest.Step {
			if fromB(r) {
				return geminitest.Step{Fault: geminitest.Overloaded, Latency: 100 * time.Millisecond}
			}
			return geminitest.Step{}
		}
		srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, Decide: decide},
			geminitest.Model{Name: flash, Latency: 500 * time.Millisecond, Decide: decide})
		changes := &stateChanges{}
		replicas := newSeededFleet(t, srv, 2, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()))
		a, b := replicas[0], replicas[1]

		var wg sync.WaitGroup
		answeredByProUntil(t, &wg, a, start, 12*time.Second)
		time.Sleep(3 * time.Second)
		for time.Since(start) < 6*time.Second {
			b.GenerateContent(t.Context(), "", genai.Text("from B"), nil) //nolint:errcheck // B's calls fail: what matters is what they make of it
			time.Sleep(100 * time.Millisecond)                            // a user's pause: refused calls take no fake time
		}
		wg.Wait()

		assert.Zero(t, changes.trips(pro), "pro opened nowhere: %v", changes.get())
	})
}

// answeredByProUntil has c call back to back, in wg, from now until d after
// start, each call to be answered by pro.
func answeredByProUntil(t *testing.T, wg *sync.WaitGroup, c *geminiguard.Client, start time.Time, d time.Duration) {
	wg.Go(func() {
		for time.Since(start) < d {
			_, rec, err := ask(t.Context(), c, "")
			assert.NoError(t, err)
			assert.Equal(t, pro, rec.Model, "A's call at %v", time.Since(start))
		}
	})
}

// prompted reports whether r's prompt is text: which replica sent it, when
// a test's replicas prompt apart.
func prompted(r geminitest.Request, text string) bool {
	return len(r.Contents) > 0 && len(r.Contents[0].Parts) > 0 && r.Contents[0].Parts[0].Text == text
}

// TestFleetOutageOpeningEndsWithTheFirstAnswer: a call every 200ms, spread
// over the replicas in turn. Pro answers in 1s, but fails every request
// fast (0.1s) from 5s to 9s; flash answers in 4s. From 6s (pro's last
// answer of a request sent before its spell) nothing answers for more than
// two seconds while pro fails: an outage (no model answering), and pro is
// opened for OpenFor. One process ends that opening at its first answer
// after it (flash's, at about 9s): pro is then out for its own open period
// (2s from the opening) and answers again within seconds. Four replicas
// each see a quarter of pro's failures, and the fleet's rule opens it
// (fleetDead, in an outage); before, that opening was a plain one for
// OpenFor, on every replica and ended by no answer: pro was out for 30s
// while flash answered, and every call from 15s on went to flash.
func TestFleetOutageOpeningEndsWithTheFirstAnswer(t *testing.T) {
	for _, tc := range []struct {
		name     string
		replicas int
	}{{"one process", 1}, {"two replicas", 2}, {"four replicas", 4}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, Decide: func(geminitest.Request, int) geminitest.Step {
					if at := time.Since(start); at >= 5*time.Second && at < 9*time.Second {
						return geminitest.Step{Fault: geminitest.Overloaded, Latency: 100 * time.Millisecond}
					}
					return geminitest.Step{}
				}}, geminitest.Model{Name: flash, Latency: 4 * time.Second})
				changes := &stateChanges{}
				replicas := newSeededFleet(t, srv, tc.replicas, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(changes.hooks()))

				var mu sync.Mutex
				late := map[string]int{} // the model of each call sent from 15s on
				var wg sync.WaitGroup
				for i := 0; time.Since(start) < 25*time.Second; i++ {
					c, sent := replicas[i%len(replicas)], time.Since(start)
					wg.Go(func() {
						_, rec, err := ask(t.Context(), c, "")
						assert.NoError(t, err, "the call sent at %v", sent)
						if sent >= 15*time.Second {
							mu.Lock()
							late[rec.Model]++
							mu.Unlock()
						}
					})
					time.Sleep(200 * time.Millisecond)
				}
				wg.Wait()

				require.Contains(t, changes.get(), pro+":open", "the outage opened pro")
				assert.Equal(t, map[string]int{pro: late[pro]}, late, "from 15s on every call is pro's: %v", changes.get())
			})
		})
	}
}

// TestFleetThrottlesAStallingModelAsOneProcessDoes: a primary that
// stalls on every other request after its first twenty, a call a second
// spread over four replicas in turn. One process's throttle window of 30s
// holds thirty requests, and its latency rule keeps most calls off the
// primary, whose stalls cost each a hedge; each replica's held seven or
// eight, under the ten it needs to throttle, so the fleet kept sending the
// primary every call. Each replica now shares its window with its record
// of answer times (fleet.LeaseRequest.Latency), and throttles on the
// fleet's.
func TestFleetThrottlesAStallingModelAsOneProcessDoes(t *testing.T) {
	const calls = 240
	primaryRequests := func(t *testing.T, replicas int) (sent int) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(stallEvery(pro, time.Second, 2, 45*time.Second), geminitest.Model{Name: flash, Latency: 500 * time.Millisecond})
			fleet := newSeededFleet(t, srv, replicas, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))
			for i := range calls {
				_, _, err := ask(t.Context(), fleet[i%replicas], "")
				require.NoError(t, err)
				time.Sleep(time.Second)
			}
			sent = srv.Total(pro)
		})
		return sent
	}
	one, four := primaryRequests(t, 1), primaryRequests(t, 4)
	t.Logf("one %d four %d", one, four)
	assert.Less(t, one, calls*9/10, "one process throttles the primary")
	assert.LessOrEqual(t, four, one+calls/20, "four replicas send it about what one process does (one: %d of %d calls)", one, calls)
}

// TestFleetThrottlesAModelThatStoppedAnswering: pro answers in 1s, then
// from the first minute hangs on every request; twelve users spread over
// four replicas sharing one store call back to back for eleven minutes,
// and flash answers in 0.8s. Once a replica's lifted cut for pro was tested
// and waited out unanswered, and the fleet's window holds no answer of
// pro's, the replica throttles pro by the SRE book's rule over every
// request asked of it; and a replica's cut is lifted once 32 of its
// attempts in a row were cut: from the second minute, 1.007 requests a
// call and about 50 of 7,670 calls over a second (flash's 0.8s). Before,
// each replica lifted its cut only once its attempts cut outnumbered the
// answers of pro's first minute in the fleet's record (ecdbe1b: 1.09
// requests a call, 560 to 580 of 6,400 calls over a second, nearly all in
// the second and third minutes); and read over the requests sent alone,
// the fleet kept sending pro a call in four (028d41f: 1.244 requests a
// call, 1,222 of 5,013 calls over a second).
func TestFleetThrottlesAModelThatStoppedAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		srv := hangingFrom(start, time.Minute)
		fleet := newSeededFleet(t, srv, 4, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))

		var calls, requests, slow int
		for _, u := range usersCallingFleet(t, fleet, 12, start, 11*time.Minute, 0) {
			if u.began < 2*time.Minute {
				continue
			}
			calls++
			if u.took > time.Second {
				slow++
			}
			for _, a := range u.rec.Attempts {
				if !a.Skipped {
					requests++
				}
			}
		}

		t.Logf("%d calls from the second minute: %.3f requests a call, %d over 1s", calls, float64(requests)/float64(calls), slow)
		assert.LessOrEqual(t, float64(requests)/float64(calls), 1.03, "requests a call")
		assert.Less(t, slow, calls/50, "calls that waited pro's cut")
	})
}

// TestFleetInAnOutageProbesAsOneProcessDoes: pro and flash answer 503 from
// the 10th second to the 70th, a call every half second spread over twenty
// replicas in turn, the shared state telling them of each fact at once
// (a Subscriber, as redisstore's is). One process, its breakers open,
// probes one model early every AllOpenProbeEvery. Each replica kept its
// own spacing of early probes, and each fact the fleet heard was applied
// again whole: a stale opening reopened a breaker whose own probe was out
// (its outcome then lost, the fleet's probe slot held), and the replicas
// probed early each on its own clock (the fleet's outage requests 124 in
// fleetOutage's twenty replicas, against one process's 90). A replica now
// spaces its early probes from the fleet's latest opening, and a fact
// older than its breaker's latest change does not reopen it.
func TestFleetInAnOutageProbesAsOneProcessDoes(t *testing.T) {
	const from, to = 10 * time.Second, 70 * time.Second
	outageRequests := func(t *testing.T, replicas int) (sent int, found time.Duration) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			down := func(geminitest.Request, int) geminitest.Step {
				if at := time.Since(start); at >= from && at < to {
					return geminitest.Step{Fault: geminitest.Overloaded, Latency: 300 * time.Millisecond}
				}
				return geminitest.Step{}
			}
			srv := geminitest.New(geminitest.Model{Name: pro, Latency: time.Second, Decide: down}, geminitest.Model{Name: flash, Latency: 500 * time.Millisecond, Decide: down})
			opts := []geminiguard.Option{geminiguard.WithCascade(pro, flash)}
			fleet := newSeededFleet(t, srv, replicas, fleet.NewMemoryState(), opts...)
			if replicas == 1 { // one process: no shared state
				c := newClient(t, srv, nil, append(opts, geminiguard.WithStartupCheck(false), geminiguard.WithJitterSource(rand.NewPCG(1, 2)))...)
				t.Cleanup(func() { c.Close() })
				fleet[0] = c
			}
			var mu sync.Mutex
			var wg sync.WaitGroup
			found = time.Hour
			for i := 0; time.Since(start) < to+30*time.Second; i++ {
				c, sent := fleet[i%replicas], time.Since(start)
				wg.Go(func() {
					_, _, err := ask(t.Context(), c, "")
					if sent >= to && err == nil {
						mu.Lock()
						found = min(found, sent-to)
						mu.Unlock()
					}
				})
				time.Sleep(500 * time.Millisecond)
			}
			wg.Wait()
			for _, m := range []string{pro, flash} {
				for _, r := range srv.Requests(m) {
					if at := r.At.Sub(start); at >= from+5*time.Second && at < to {
						sent++
					}
				}
			}
		})
		return sent, found
	}
	one, oneFound := outageRequests(t, 1)
	twenty, twentyFound := outageRequests(t, 20)
	t.Logf("requests from 15s to 70s: one process %d, twenty replicas %d; the first call answered after the outage %v and %v after its end", one, twenty, oneFound, twentyFound)
	assert.LessOrEqual(t, twenty, one*5/4, "the fleet's early probes as one process's, not one process's each")
	assert.LessOrEqual(t, twentyFound, oneFound+5*time.Second, "the outage's end found about as soon")
}

// TestFleetHearsAFactWithoutARoundTripEach: pro is retired (a 404) under a
// fleet of ten replicas whose store tells the fact itself
// (fleet.FactSubscriber, as redisstore's and the memory store's do). Each
// replica at the version before the fact applies it as told: the fleet
// pays the one replica's call and its publish, and no other replica sends
// pro a request. Before, each notified replica read the facts in a round
// trip of its own: ten more for one fact (fleetOutage's twenty replicas
// made 3.8 round trips a call in its outage, 1.3 now).
func TestFleetHearsAFactWithoutARoundTripEach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.NotFound}}},
			geminitest.Model{Name: flash},
		)
		const replicas = 10
		fleet := newSeededFleet(t, srv, replicas, fleet.NewMemoryState(), geminiguard.WithCascade(pro, flash))
		before := fleetRoundTrips(fleet)
		_, rec, err := ask(t.Context(), fleet[0], "")
		require.NoError(t, err)
		require.Equal(t, flash, rec.Model)
		synctest.Wait()
		told := fleetRoundTrips(fleet) - before
		t.Logf("the 404's call and the fleet's hearing of it: %d round trips", told)
		assert.LessOrEqual(t, told, int64(4), "the call's own and its publish, not one a replica")
		for i, c := range fleet[1:] {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, flash, rec.Model, "replica %d", i+1)
		}
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbGenerate), "one 404 for the fleet")
	})
}
