// Package sharedtest is the conformance suite of fleet.SharedState:
// Run checks an implementation against the interface's contract (the doc
// comments of package fleet), in real time and without sleeping, so that the
// in-memory state and the Redis store behave the same.
package sharedtest

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard/fleet"
)

// slack bounds how far the store's clock and this process's may disagree
// (the same machine) plus the time a step takes.
const slack = 2 * time.Second

// Run runs the suite. newStore returns an empty state each time it is
// called (its own projects), cleaned up by t.
func Run(t *testing.T, newStore func(t *testing.T) fleet.SharedState) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, fleet.SharedState)
	}{
		{"RPMGrantsThenRefuses", rpmGrantsThenRefuses},
		{"PartialGrant", partialGrant},
		{"FallsThroughToNext", fallsThroughToNext},
		{"TPMAndDebt", tpmAndDebt},
		{"RequestLargerThanTPM", requestLargerThanTPM},
		{"RPDAndNewDay", rpdAndNewDay},
		{"AloneCountsAtOnce", aloneCountsAtOnce},
		{"UnusedGivenBack", unusedGivenBack},
		{"LongestWaitNamesDimension", longestWaitNamesDimension},
		{"ModelsAndProjectsApart", modelsAndProjectsApart},
		{"ConcurrentLeasesNeverOvergrant", concurrentLeasesNeverOvergrant},
		{"ProbeSlot", probeSlot},
		{"CoolDownMerge", coolDownMerge},
		{"OpenClosedMerge", openClosedMerge},
		{"LimitMerge", limitMerge},
		{"MissingListedMerge", missingListedMerge},
		{"RecordWantedMerge", recordWantedMerge},
		{"FailuresAcrossReplicas", failuresAcrossReplicas},
		{"DrawsAcrossReplicas", drawsAcrossReplicas},
		{"LatencyAcrossReplicas", latencyAcrossReplicas},
		{"AwaitingAcrossReplicas", awaitingAcrossReplicas},
		{"SpendAcrossReplicas", spendAcrossReplicas},
		{"SpendReservedAgainstBudget", spendReservedAgainstBudget},
		{"SubscribersHearChanges", subscribersHearChanges},
		{"SubscribersHearFacts", subscribersHearFacts},
		{"EndedFactsAbsent", endedFactsAbsent},
		{"FactsByVersion", factsByVersion},
		{"AtDefaultsToNow", atDefaultsToNow},
		{"Replicas", replicas},
		{"CancelledContext", cancelledContext},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

const (
	project = "p-5f1c"
	model   = "gemini-3.5-flash"
)

func lease(t *testing.T, s fleet.SharedState, r fleet.LeaseRequest) fleet.Lease {
	t.Helper()
	if r.Project == "" {
		r.Project = project
	}
	if r.Model == "" {
		r.Model = model
	}
	if r.Replica == "" {
		r.Replica = "r1"
		r.ReplicaTTL = time.Minute
	}
	l, err := s.Lease(context.Background(), r)
	require.NoError(t, err)
	return l
}

func publish(t *testing.T, s fleet.SharedState, f fleet.Fact) {
	t.Helper()
	require.NoError(t, s.Publish(context.Background(), project, f))
}

// refused asserts that l granted nothing for dim, with a wait in (0, max].
func refused(t *testing.T, l fleet.Lease, dim string, max time.Duration) {
	t.Helper()
	assert.Zero(t, l.Requests, "requests granted")
	assert.Equal(t, dim, l.Dimension)
	assert.Greater(t, l.RetryAfter, time.Duration(0), "RetryAfter")
	assert.LessOrEqual(t, l.RetryAfter, max, "RetryAfter")
}

func rpmGrantsThenRefuses(t *testing.T, s fleet.SharedState) {
	r := fleet.LeaseRequest{Requests: 1, RPM: 5}
	for i := range 5 {
		l := lease(t, s, r)
		require.Equal(t, 1, l.Requests, "lease %d", i+1)
		assert.Empty(t, l.Dimension)
		assert.Zero(t, l.RetryAfter)
	}
	refused(t, lease(t, s, r), "rpm", time.Minute)
	// Asking for nothing is not refused.
	l := lease(t, s, fleet.LeaseRequest{RPM: 5})
	assert.Zero(t, l.Requests)
	assert.Empty(t, l.Dimension)
}

func partialGrant(t *testing.T, s fleet.SharedState) {
	assert.Equal(t, 7, lease(t, s, fleet.LeaseRequest{Requests: 7, RPM: 10}).Requests)
	assert.Equal(t, 3, lease(t, s, fleet.LeaseRequest{Requests: 10, RPM: 10}).Requests)
	refused(t, lease(t, s, fleet.LeaseRequest{Requests: 10, RPM: 10}), "rpm", time.Minute)
}

// fallsThroughToNext: a request the first model refuses is evaluated for
// Next in the same step; a first model that grants takes nothing of the
// next's limits; Next's report counts either way.
func fallsThroughToNext(t *testing.T, s fleet.SharedState) {
	const next = "gemini-3.5-flash-lite"
	day := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	r := fleet.LeaseRequest{Requests: 2, RPM: 2, DayEnd: day,
		Next: &fleet.LeaseRequest{Model: next, Requests: 3, Tokens: 10, RPM: 10, TPM: 1000, RPD: 10, DayEnd: day}}
	l := lease(t, s, r)
	assert.Equal(t, 2, l.Requests, "the first model grants")
	require.NotNil(t, l.Next, "Next's answer, whatever the first model's")
	assert.Zero(t, l.Next.Requests, "a first model that grants takes nothing of the next's")
	assert.Empty(t, l.Next.Dimension)

	r.Next.Failures = 2
	l = lease(t, s, r)
	refused(t, l, "rpm", time.Minute)
	require.NotNil(t, l.Next)
	assert.Equal(t, 3, l.Next.Requests, "refused by the first model: Next granted in the same step")
	assert.Empty(t, l.Next.Dimension)
	assert.Zero(t, l.Next.RetryAfter)
	assert.Equal(t, 2, l.Next.Failures, "Next's failures, counted")
	assert.Zero(t, l.Failures, "the first model's failures apart")

	// Next's report counts even when the first model grants (a request
	// asking nothing of the first model evaluates nothing of Next).
	l = lease(t, s, fleet.LeaseRequest{Requests: 0, Next: &fleet.LeaseRequest{Model: next, Requests: 3, RPM: 10, Alone: 2, Debt: 20}})
	assert.Zero(t, l.Next.Requests, "nothing asked of the first model: nothing of Next")
	assert.Equal(t, 5, lease(t, s, fleet.LeaseRequest{Model: next, Requests: 10, Tokens: 10, RPM: 10, TPM: 1000, RPD: 10, DayEnd: day}).Requests,
		"3 granted through the first model's refusal and 2 sent alone: 5 of 10")

	// Both refused: Next's refusal names its dimension.
	l = lease(t, s, r)
	refused(t, l, "rpm", time.Minute)
	require.NotNil(t, l.Next)
	refused(t, *l.Next, "rpm", time.Minute)
	assert.Zero(t, lease(t, s, r).Next.Requests, "the next model's window is full")
}

func tpmAndDebt(t *testing.T, s fleet.SharedState) {
	r := fleet.LeaseRequest{Requests: 5, Tokens: 300, TPM: 1000}
	assert.Equal(t, 3, lease(t, s, r).Requests, "900 of 1000 tokens")
	r.Requests = 1
	refused(t, lease(t, s, r), "tpm", time.Minute)

	// Debt counts at once, even with nothing asked, and is never refused.
	r2 := fleet.LeaseRequest{Model: "m2", Tokens: 100, TPM: 1000, Debt: 500}
	l := lease(t, s, r2)
	assert.Zero(t, l.Requests)
	assert.Empty(t, l.Dimension)
	r2.Debt, r2.Requests = 0, 10
	assert.Equal(t, 5, lease(t, s, r2).Requests, "500 tokens left after a debt of 500")
	r2.Debt, r2.Requests = 2000, 1
	refused(t, lease(t, s, r2), "tpm", time.Minute)
	r2.Debt = 0
	refused(t, lease(t, s, r2), "tpm", time.Minute) // the refused lease's debt still counted
}

func requestLargerThanTPM(t *testing.T, s fleet.SharedState) {
	refused(t, lease(t, s, fleet.LeaseRequest{Requests: 1, Tokens: 5000, TPM: 1000}), "tpm", time.Minute)
}

func rpdAndNewDay(t *testing.T, s fleet.SharedState) {
	day1 := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	r := fleet.LeaseRequest{Requests: 2, RPD: 3, DayEnd: day1}
	assert.Equal(t, 2, lease(t, s, r).Requests)
	assert.Equal(t, 1, lease(t, s, r).Requests)
	l := lease(t, s, r)
	refused(t, l, "rpd", 3*time.Hour)
	assert.InDelta(t, time.Until(day1).Seconds(), l.RetryAfter.Seconds(), slack.Seconds(), "RetryAfter ≈ DayEnd − now")

	// The next day counts afresh.
	r.DayEnd = day1.Add(24 * time.Hour)
	assert.Equal(t, 2, lease(t, s, r).Requests)
}

// aloneCountsAtOnce: requests a replica sent alone count in the RPM window
// and the day at once, even with nothing asked, and are never refused.
func aloneCountsAtOnce(t *testing.T, s fleet.SharedState) {
	day := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	l := lease(t, s, fleet.LeaseRequest{Alone: 7, Debt: 700, DayEnd: day})
	assert.Zero(t, l.Requests)
	assert.Empty(t, l.Dimension)
	assert.Equal(t, 3, lease(t, s, fleet.LeaseRequest{Requests: 5, RPM: 10, DayEnd: day}).Requests, "7 of 10 sent alone")
	assert.Equal(t, 4, lease(t, s, fleet.LeaseRequest{Model: "m2", Requests: 5, Tokens: 100, TPM: 1000, Alone: 6, Debt: 600, DayEnd: day}).Requests,
		"the debt of requests sent alone counts before the grant")
	assert.Equal(t, 2, lease(t, s, fleet.LeaseRequest{Model: "m3", Alone: 8, DayEnd: day, Requests: 5, RPD: 10}).Requests, "8 of 10 today sent alone")
	assert.Zero(t, lease(t, s, fleet.LeaseRequest{Alone: 20, DayEnd: day, Requests: 1, RPM: 10}).Requests, "never refused: the window is over")
}

// unusedGivenBack: leased requests that lapsed unsent leave the RPM and TPM
// windows and the day, never below zero.
func unusedGivenBack(t *testing.T, s fleet.SharedState) {
	day := time.Now().Add(3 * time.Hour).Truncate(time.Second)
	r := fleet.LeaseRequest{Requests: 10, Tokens: 100, RPM: 10, TPM: 2000, RPD: 12, DayEnd: day}
	assert.Equal(t, 10, lease(t, s, r).Requests)
	r.Requests = 1
	refused(t, lease(t, s, r), "rpm", time.Minute)
	r.Unused, r.UnusedTokens, r.Requests = 4, 400, 10
	assert.Equal(t, 4, lease(t, s, r).Requests, "4 given back")
	r.Unused, r.UnusedTokens, r.Requests = 50, 5000, 12
	assert.Equal(t, 10, lease(t, s, r).Requests, "all given back, none below zero: RPM (10) limits, not RPD (12)")
}

func longestWaitNamesDimension(t *testing.T, s fleet.SharedState) {
	r := fleet.LeaseRequest{Requests: 3, RPM: 3, RPD: 3, DayEnd: time.Now().Add(2 * time.Hour).Truncate(time.Second)}
	assert.Equal(t, 3, lease(t, s, r).Requests)
	refused(t, lease(t, s, r), "rpd", 2*time.Hour)
}

func modelsAndProjectsApart(t *testing.T, s fleet.SharedState) {
	r := fleet.LeaseRequest{Requests: 2, RPM: 2}
	assert.Equal(t, 2, lease(t, s, r).Requests)
	refused(t, lease(t, s, r), "rpm", time.Minute)
	r.Model = "other-model"
	assert.Equal(t, 2, lease(t, s, r).Requests, "another model")
	r.Model, r.Project = "", "other-project"
	assert.Equal(t, 2, lease(t, s, r).Requests, "another project")
}

func concurrentLeasesNeverOvergrant(t *testing.T, s fleet.SharedState) {
	const workers, each, rpm = 8, 10, 50
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		granted int
		errs    []error
	)
	for w := range workers {
		wg.Go(func() {
			for range each {
				l, err := s.Lease(context.Background(), fleet.LeaseRequest{
					Project: project, Model: model, Replica: fmt.Sprint("r", w), ReplicaTTL: time.Minute,
					Requests: 1, RPM: rpm,
				})
				mu.Lock()
				granted += l.Requests
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Empty(t, errs)
	assert.Equal(t, rpm, granted, "requests granted to %d workers asking %d each", workers, each)
}

func probeSlot(t *testing.T, s fleet.SharedState) {
	a := fleet.LeaseRequest{Replica: "a", ReplicaTTL: time.Minute, Requests: 1, Probe: 10 * time.Second, Endpoint: "generate"}
	b := a
	b.Replica = "b"
	require.Equal(t, 1, lease(t, s, a).Requests, "a takes the slot")
	refused(t, lease(t, s, b), "probe", 10*time.Second)
	assert.Equal(t, 1, lease(t, s, a).Requests, "the holder may ask again")

	other := b
	other.Endpoint = "embed"
	assert.Equal(t, 1, lease(t, s, other).Requests, "another endpoint's slot")
	plain := b
	plain.Probe, plain.Endpoint = 0, ""
	assert.Equal(t, 1, lease(t, s, plain).Requests, "a request without a probe is not held back")

	now := time.Now().Truncate(time.Millisecond)
	publish(t, s, fleet.Fact{Kind: fleet.FactOpen, Model: model, Endpoint: "generate", At: now, Until: now.Add(30 * time.Second)})
	require.Equal(t, 1, lease(t, s, b).Requests, "FactOpen freed the slot; b takes it")
	refused(t, lease(t, s, a), "probe", 10*time.Second)
	publish(t, s, fleet.Fact{Kind: fleet.FactClosed, Model: model, Endpoint: "generate", At: now.Add(time.Millisecond)})
	assert.Equal(t, 1, lease(t, s, a).Requests, "FactClosed freed the slot")
}

// facts returns l's facts in a comparable form, sorted.
func facts(l fleet.Lease) []string {
	var out []string
	for _, f := range l.Facts {
		out = append(out, show(f))
	}
	sort.Strings(out)
	return out
}

func show(f fleet.Fact) string {
	ms := func(t time.Time) int64 {
		if t.IsZero() {
			return 0
		}
		return t.UnixMilli()
	}
	return fmt.Sprintf("kind=%d model=%q endpoint=%q at=%d until=%d reason=%d dim=%q limit=%d",
		f.Kind, f.Model, f.Endpoint, ms(f.At), ms(f.Until), f.Reason, f.Dimension, f.Limit)
}

func shows(fs ...fleet.Fact) []string {
	var out []string
	for _, f := range fs {
		out = append(out, show(f))
	}
	sort.Strings(out)
	return out
}

// current returns the project's version and facts.
func current(t *testing.T, s fleet.SharedState) (uint64, []string) {
	t.Helper()
	l := lease(t, s, fleet.LeaseRequest{Version: ^uint64(0)})
	require.NotNil(t, l.Facts, "facts for a version that differs")
	return l.Version, facts(l)
}

// recordWantedMerge: a FactRecordWanted is replaced by a later Until only,
// is apart from a cool-down of the same model, and ends at its Until.
func recordWantedMerge(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	w := fleet.Fact{Kind: fleet.FactRecordWanted, Model: model, At: now, Until: now.Add(10 * time.Second)}
	cool := fleet.Fact{Kind: fleet.FactCoolDown, Model: model, At: now, Until: now.Add(time.Minute)}
	publish(t, s, w)
	publish(t, s, cool)
	v1, got := current(t, s)
	assert.Equal(t, shows(w, cool), got, "apart from the model's cool-down")

	earlier := w
	earlier.At, earlier.Until = now.Add(time.Second), now.Add(5*time.Second)
	publish(t, s, earlier)
	v2, got := current(t, s)
	assert.Equal(t, v1, v2, "an earlier Until changes nothing")
	assert.Equal(t, shows(w, cool), got)

	later := w
	later.At, later.Until = now.Add(2*time.Second), now.Add(12*time.Second)
	publish(t, s, later)
	v3, got := current(t, s)
	assert.NotEqual(t, v2, v3, "a later Until moves the version on: the replicas hear it")
	assert.Equal(t, shows(later, cool), got, "a later Until replaces")

	ended := fleet.Fact{Kind: fleet.FactRecordWanted, Model: "other", At: now.Add(-time.Minute), Until: now.Add(-time.Second)}
	publish(t, s, ended)
	_, got = current(t, s)
	assert.Equal(t, shows(later, cool), got, "a fact past its Until is not in force")
}

func coolDownMerge(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	c := fleet.Fact{Kind: fleet.FactCoolDown, Model: model, At: now, Until: now.Add(10 * time.Minute), Reason: 3}
	v0, _ := current(t, s)
	publish(t, s, c)
	v1, got := current(t, s)
	assert.NotEqual(t, v0, v1, "version moves on a new fact")
	assert.Equal(t, shows(c), got)

	earlier := c
	earlier.Until = now.Add(5 * time.Minute)
	publish(t, s, earlier)
	v2, got := current(t, s)
	assert.Equal(t, v1, v2, "an earlier Until changes nothing")
	assert.Equal(t, shows(c), got)

	later := c
	later.Until, later.Reason = now.Add(20*time.Minute), 4
	publish(t, s, later)
	v3, got := current(t, s)
	assert.NotEqual(t, v2, v3)
	assert.Equal(t, shows(later), got, "a later Until replaces")

	whole := fleet.Fact{Kind: fleet.FactCoolDown, At: now, Until: now.Add(time.Minute)}
	publish(t, s, whole)
	_, got = current(t, s)
	assert.Equal(t, shows(later, whole), got, "the project's cool-down is apart from the model's")
}

// latestAtWins checks the rule two kinds share (FactOpen and FactClosed,
// FactMissing and FactListed): first, published at now, stays against a
// second published with an earlier At, and is replaced by one with a later
// At, which it returns.
func latestAtWins(t *testing.T, s fleet.SharedState, first, second fleet.Fact, now time.Time) fleet.Fact {
	t.Helper()
	publish(t, s, first)
	v1, got := current(t, s)
	assert.Equal(t, shows(first), got)

	stale := second
	stale.At = now.Add(-time.Second)
	publish(t, s, stale)
	v2, got := current(t, s)
	assert.Equal(t, v1, v2, "an older %s changes nothing", kindNames[second.Kind])
	assert.Equal(t, shows(first), got)

	later := second
	later.At = now.Add(time.Second)
	publish(t, s, later)
	v3, got := current(t, s)
	assert.NotEqual(t, v2, v3)
	assert.Equal(t, shows(later), got, "a later %s replaces the %s", kindNames[second.Kind], kindNames[first.Kind])
	return later
}

// kindNames names the kinds latestAtWins checks, for its messages.
var kindNames = map[fleet.FactKind]string{
	fleet.FactOpen: "FactOpen", fleet.FactClosed: "FactClosed",
	fleet.FactMissing: "FactMissing", fleet.FactListed: "FactListed",
}

func openClosedMerge(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	open := fleet.Fact{Kind: fleet.FactOpen, Model: model, Endpoint: "generate", At: now, Until: now.Add(30 * time.Second)}
	closed := latestAtWins(t, s, open, fleet.Fact{Kind: fleet.FactClosed, Model: model, Endpoint: "generate"}, now)

	reopen := open
	reopen.At = now.Add(500 * time.Millisecond)
	publish(t, s, reopen)
	_, got := current(t, s)
	assert.Equal(t, shows(closed), got, "a FactOpen older than the FactClosed changes nothing")

	embed := open
	embed.Endpoint = "embed"
	embed.Outage = true // kept as given
	publish(t, s, embed)
	_, got = current(t, s)
	assert.Equal(t, shows(closed, embed), got, "endpoints are apart")
}

// subscribersHearChanges: a Subscriber's changed runs after a Publish that
// changed the facts, and not after its stop.
func subscribersHearChanges(t *testing.T, s fleet.SharedState) {
	sub, ok := s.(fleet.Subscriber)
	if !ok {
		t.Skip("not a Subscriber")
	}
	heard := func() (chan struct{}, func()) {
		ch := make(chan struct{}, 16)
		stop := sub.Subscribe(project, func() { ch <- struct{}{} })
		return ch, stop
	}
	until := time.Now().Add(time.Minute)
	first, stopFirst := heard()
	publishUntilHeard(t, s, first, &until, "a new fact")
	stopFirst()
	for len(first) > 0 { // those heard before stop
		<-first
	}

	second, stopSecond := heard()
	defer stopSecond()
	publishUntilHeard(t, s, second, &until, "a later Until")
	assert.Empty(t, first, "changed called after stop")
}

// subscribersHearFacts: a FactSubscriber's changed gets the fact as the
// store keeps it and the project's versions before and after it, so that a
// replica at the version before applies it without a round trip; a publish
// that changes nothing tells nothing.
func subscribersHearFacts(t *testing.T, s fleet.SharedState) {
	sub, ok := s.(fleet.FactSubscriber)
	if !ok {
		t.Skip("not a FactSubscriber")
	}
	type change struct {
		fact     fleet.Fact
		from, to uint64
	}
	ch := make(chan change, 64)
	stop := sub.SubscribeFacts(project, func(f fleet.Fact, from, to uint64) { ch <- change{f, from, to} })
	defer stop()
	now := time.Now().Truncate(time.Millisecond)
	until := now.Add(time.Minute)
	heard := publishUntilHeard(t, s, ch, &until, "a new fact")
	for len(ch) > 0 { // later publishes of the loop, heard meanwhile
		heard = <-ch
	}
	v, got := current(t, s)
	assert.Equal(t, v, heard.to, "the version after the change")
	assert.Equal(t, got, shows(heard.fact), "the fact as kept")

	opened := fleet.Fact{Kind: fleet.FactOpen, Model: model, Endpoint: "generate", Until: now.Add(time.Hour)} // At: the store's now
	publish(t, s, opened)
	select {
	case c := <-ch:
		assert.Equal(t, v, c.from, "the version before it")
		v2, facts := current(t, s)
		assert.Equal(t, v2, c.to)
		assert.Contains(t, facts, show(c.fact), "the fact as kept, its At the store's")
		assert.False(t, c.fact.At.IsZero())
	case <-time.After(5 * time.Second):
		t.Fatal("the opening not heard within 5s")
	}
	publish(t, s, fleet.Fact{Kind: fleet.FactCoolDown, Model: model, At: now, Until: now.Add(time.Second)}) // an earlier Until: no change
	select {
	case c := <-ch:
		t.Fatalf("a publish that changed nothing told: %+v", c)
	case <-time.After(100 * time.Millisecond):
	}
}

// publishUntilHeard publishes a model's cool-down, its Until (*until) a
// millisecond later each time (a change every time), until ch hears one,
// and returns what it heard: a subscription may start after Subscribe
// returns (redisstore's subscribes in the background). It fails the test
// after 5s.
func publishUntilHeard[T any](t *testing.T, s fleet.SharedState, ch <-chan T, until *time.Time, what string) T {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		*until = until.Add(time.Millisecond)
		publish(t, s, fleet.Fact{Kind: fleet.FactCoolDown, Model: model, At: until.Add(-time.Hour), Until: *until})
		select {
		case v := <-ch:
			return v
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%s: changed not called within 5s", what)
		}
	}
}

func spendAcrossReplicas(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Second)
	day, month := now.Add(time.Hour), now.Add(48*time.Hour)
	a := fleet.LeaseRequest{Project: project, Replica: "a", ReplicaTTL: time.Minute, Model: model, SpendDay: day, SpendMonth: month}
	b := a
	b.Replica, b.Model = "b", "other-model"

	a.Spent = 300
	l := lease(t, s, a)
	assert.Equal(t, int64(300), l.DaySpent)
	assert.Equal(t, int64(300), l.MonthSpent)
	b.Spent = 200
	l = lease(t, s, b)
	assert.Equal(t, int64(500), l.DaySpent, "the project's spend, whatever the model")
	assert.Equal(t, int64(500), l.MonthSpent)

	a.Spent, a.SpendDay = 50, day.Add(24*time.Hour)
	l = lease(t, s, a)
	assert.Equal(t, int64(50), l.DaySpent, "a new day starts from nothing")
	assert.Equal(t, int64(550), l.MonthSpent, "the month goes on")

	a.Spent, a.SpendDay, a.SpendMonth = 0, time.Time{}, time.Time{}
	l = lease(t, s, a)
	assert.Zero(t, l.DaySpent, "no window named: nothing read")
	assert.Zero(t, l.MonthSpent)
}

func spendReservedAgainstBudget(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Second)
	day, month := now.Add(time.Hour), now.Add(48*time.Hour)
	a := fleet.LeaseRequest{Project: project, Replica: "a", ReplicaTTL: time.Minute, Model: model, SpendDay: day, SpendMonth: month, DayBudget: 1000, MonthBudget: 5000}
	b := a
	b.Replica = "b"

	a.Reserve = 600
	l := lease(t, s, a)
	assert.Empty(t, l.BudgetRefused, "below the budget: reserved")
	assert.Equal(t, int64(600), l.DaySpent, "the reservation counts in the day")
	assert.Equal(t, int64(600), l.MonthSpent, "and in the month")
	b.Reserve = 600
	l = lease(t, s, b)
	assert.Empty(t, l.BudgetRefused, "600 < 1000: reserved, one estimate past the budget")
	assert.Equal(t, int64(1200), l.DaySpent)
	b.Reserve = 100
	l = lease(t, s, b)
	assert.Equal(t, "day", l.BudgetRefused, "the day's budget is held by reservations")
	assert.Equal(t, int64(1200), l.DaySpent, "a refused reservation adds nothing")

	a.Reserve, a.Spent = 100, 200-600 // a's request cost 200: 400 given back
	l = lease(t, s, a)
	assert.Empty(t, l.BudgetRefused, "the settlement is counted before the reservation")
	assert.Equal(t, int64(900), l.DaySpent, "600 held by b, 200 spent by a, 100 reserved")
	assert.Equal(t, int64(900), l.MonthSpent)

	a.Reserve, a.Spent = 0, -5000
	l = lease(t, s, a)
	assert.Zero(t, l.DaySpent, "a give-back never takes a window below zero")
	a.Reserve, a.MonthBudget = 100, 0
	a.DayBudget = 0
	l = lease(t, s, a)
	assert.Empty(t, l.BudgetRefused, "no budget: reserved")
	assert.Equal(t, int64(100), l.DaySpent)
}

// replicasOfModel returns requests of three replicas, "a", "b" and "c",
// for model of project, each live for a minute, asking for nothing.
func replicasOfModel() (a, b, c fleet.LeaseRequest) {
	a = fleet.LeaseRequest{Project: project, Replica: "a", ReplicaTTL: time.Minute, Model: model}
	b, c = a, a
	b.Replica, c.Replica = "b", "c"
	return a, b, c
}

func failuresAcrossReplicas(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	a, b, _ := replicasOfModel()

	l := lease(t, s, a)
	assert.Zero(t, l.Failures)
	assert.True(t, l.Answered.IsZero(), "no answer reported yet")

	a.Failures = 2
	assert.Equal(t, 2, lease(t, s, a).Failures)
	b.Failures = 3
	l = lease(t, s, b)
	assert.Equal(t, 5, l.Failures, "failures add up across replicas")

	a.Failures, a.Answered = 1, now
	l = lease(t, s, a)
	assert.Equal(t, 1, l.Failures, "a later answer resets the count, then the failures are added")
	assert.True(t, now.Equal(l.Answered), "answered %v, want %v", l.Answered, now)

	b.Failures, b.Answered = 2, now.Add(-time.Second)
	l = lease(t, s, b)
	assert.Equal(t, 3, l.Failures, "an answer older than the latest resets nothing")
	assert.True(t, now.Equal(l.Answered))

	other := a
	other.Model, other.Failures, other.Answered = "other-model", 0, time.Time{}
	assert.Zero(t, lease(t, s, other).Failures, "models are apart")
}

func drawsAcrossReplicas(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	a, b, _ := replicasOfModel()
	failed := func(r fleet.LeaseRequest, failures, draws int, since, until time.Duration) fleet.Lease {
		r.Failures, r.Draws, r.FailedSince, r.DrawsUntil = failures, draws, now.Add(since), now.Add(until)
		return lease(t, s, r)
	}

	l := failed(a, 3, 1, 0, 300*time.Millisecond)
	assert.Equal(t, []int{3, 1}, []int{l.Failures, l.Draws}, "a wave's three failures are one draw")
	l = failed(b, 3, 1, 0, 300*time.Millisecond)
	assert.Equal(t, []int{6, 1}, []int{l.Failures, l.Draws}, "another replica's part of the wave, sent before the fleet's draw ended, is the same draw")
	l = failed(b, 1, 0, 100*time.Millisecond, 300*time.Millisecond)
	assert.Equal(t, []int{7, 1}, []int{l.Failures, l.Draws}, "a failure that is no draw of its replica's adds none")
	l = failed(a, 4, 2, 10*time.Second, 20*time.Second)
	assert.Equal(t, []int{11, 3}, []int{l.Failures, l.Draws}, "draws sent after the fleet's latest ended are each one")
	l = failed(b, 2, 2, 15*time.Second, 20*time.Second)
	assert.Equal(t, []int{13, 4}, []int{l.Failures, l.Draws}, "the first of them met the fleet's latest draw")

	a.Answered = now.Add(time.Minute)
	l = lease(t, s, a)
	assert.Equal(t, []int{0, 0}, []int{l.Failures, l.Draws}, "an answer resets the run")
	l = failed(b, 2, 2, 10*time.Second, 12*time.Second)
	assert.Equal(t, []int{2, 2}, []int{l.Failures, l.Draws}, "and the end of its latest draw")

	a.Answered = now.Add(2 * time.Minute)
	l = failed(a, 1, 0, 2*time.Minute, 2*time.Minute)
	assert.Equal(t, []int{1, 1}, []int{l.Failures, l.Draws}, "a run's first failure is a draw")
	l = lease(t, s, b)
	assert.Equal(t, []int{1, 1}, []int{l.Failures, l.Draws}, "a report of no failures changes neither")

	// b's wave at 3m: the report of a failure that is no draw of b's
	// reaches the store before the report of b's draw, as a slower round
	// trip's can.
	l = failed(b, 1, 0, 3*time.Minute, 3*time.Minute+300*time.Millisecond)
	assert.Equal(t, []int{2, 1}, []int{l.Failures, l.Draws}, "a failure that is no draw adds none")
	l = failed(b, 1, 1, 3*time.Minute, 3*time.Minute+300*time.Millisecond)
	assert.Equal(t, []int{3, 2}, []int{l.Failures, l.Draws}, "the draw it overtook is one: a report of no draw ends none")

	a.Answered = now.Add(4 * time.Minute)
	l = failed(a, 1, 0, 4*time.Minute, 4*time.Minute+300*time.Millisecond)
	assert.Equal(t, []int{1, 1}, []int{l.Failures, l.Draws}, "a report of no draw that starts a run is its first draw")
	l = failed(a, 1, 1, 4*time.Minute, 4*time.Minute+300*time.Millisecond)
	assert.Equal(t, []int{2, 1}, []int{l.Failures, l.Draws}, "and ends it: the draw it overtook is that one")
}

func latencyAcrossReplicas(t *testing.T, s fleet.SharedState) {
	a, b, c := replicasOfModel()

	// A throttle's span: a class from 1024 on, the Unix second it began.
	const span, began = 1024, 1<<31 - 1
	a.Latency = []fleet.LatencyCount{{Class: 0, Bucket: 40, N: 3}, {Class: 4, Bucket: 95, N: 1}, {Class: span, Bucket: began, N: 7}}
	assert.Nil(t, lease(t, s, a).Latency, "not asked")
	b.Latency = []fleet.LatencyCount{{Class: 0, Bucket: 40, N: 2}, {Class: 0, Bucket: 60, N: 5}, {Class: span, Bucket: began, N: 4}}
	b.Latencies = true
	assert.ElementsMatch(t, a.Latency, lease(t, s, b).Latency, "the others' records, not its own")

	c.Latencies = true
	l := lease(t, s, c)
	assert.ElementsMatch(t, []fleet.LatencyCount{{Class: 0, Bucket: 40, N: 5}, {Class: 0, Bucket: 60, N: 5}, {Class: 4, Bucket: 95, N: 1}, {Class: span, Bucket: began, N: 11}},
		l.Latency, "summed by class and bucket")

	a.Latency = []fleet.LatencyCount{{Class: 0, Bucket: 41, N: 1}}
	lease(t, s, a)
	l = lease(t, s, c)
	assert.ElementsMatch(t, []fleet.LatencyCount{{Class: 0, Bucket: 41, N: 1}, {Class: 0, Bucket: 40, N: 2}, {Class: 0, Bucket: 60, N: 5}, {Class: span, Bucket: began, N: 4}},
		l.Latency, "a replica's latest record replaces its last")

	b.ReplicaTTL, b.Latencies = 0, false // its record lapses at once
	lease(t, s, b)
	l = lease(t, s, c)
	assert.ElementsMatch(t, []fleet.LatencyCount{{Class: 0, Bucket: 41, N: 1}}, l.Latency, "a record older than its replica's TTL is left out")

	other := c
	other.Model = "other-model"
	assert.Empty(t, lease(t, s, other).Latency, "models are apart")
}

func awaitingAcrossReplicas(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	a, b, _ := replicasOfModel()

	a.Awaiting = now.Add(time.Minute)
	assert.True(t, lease(t, s, a).Awaiting.IsZero(), "its own wait is not the others'")
	l := lease(t, s, b)
	assert.True(t, a.Awaiting.Equal(l.Awaiting), "another replica waits: %v", l.Awaiting)

	b.Awaiting = now.Add(2 * time.Minute)
	lease(t, s, b)
	a.Awaiting = time.Time{}
	l = lease(t, s, a)
	assert.True(t, b.Awaiting.Equal(l.Awaiting), "the latest of the others': %v", l.Awaiting)
	b.Awaiting = time.Time{}
	assert.True(t, lease(t, s, b).Awaiting.IsZero(), "a's wait ended with its report")

	a.Awaiting = now.Add(-slack)
	lease(t, s, a)
	assert.True(t, lease(t, s, b).Awaiting.IsZero(), "a wait that has passed is none")

	a.Awaiting = now.Add(time.Minute)
	lease(t, s, a)
	other := b
	other.Model = "other-model"
	assert.True(t, lease(t, s, other).Awaiting.IsZero(), "models are apart")
}

func missingListedMerge(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	missing := fleet.Fact{Kind: fleet.FactMissing, Model: model, At: now, Reason: 5}
	latestAtWins(t, s, missing, fleet.Fact{Kind: fleet.FactListed, Model: model}, now)

	again := missing
	again.At = now.Add(2 * time.Second)
	publish(t, s, again)
	_, got := current(t, s)
	assert.Equal(t, shows(again), got, "a later FactMissing replaces the FactListed")

	cool := fleet.Fact{Kind: fleet.FactCoolDown, Model: model, At: now, Until: now.Add(time.Minute)}
	publish(t, s, cool)
	_, got = current(t, s)
	assert.Equal(t, shows(again, cool), got, "a cool-down is apart from the model's being missing")
}

func limitMerge(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	rpm := fleet.Fact{Kind: fleet.FactLimit, Model: model, Dimension: "rpm", At: now, Limit: 100}
	publish(t, s, rpm)
	v1, got := current(t, s)
	assert.Equal(t, shows(rpm), got)

	higher := rpm
	higher.Limit = 150
	publish(t, s, higher)
	v2, got := current(t, s)
	assert.Equal(t, v1, v2, "a higher limit changes nothing")
	assert.Equal(t, shows(rpm), got)

	lower := rpm
	lower.Limit = 80
	publish(t, s, lower)
	v3, got := current(t, s)
	assert.NotEqual(t, v2, v3)
	assert.Equal(t, shows(lower), got, "a lower limit replaces")

	tpm := fleet.Fact{Kind: fleet.FactLimit, Model: model, Dimension: "tpm", At: now, Limit: 1_000_000}
	publish(t, s, tpm)
	_, got = current(t, s)
	assert.Equal(t, shows(lower, tpm), got, "dimensions are apart")
}

func endedFactsAbsent(t *testing.T, s fleet.SharedState) {
	now := time.Now().Truncate(time.Millisecond)
	v0, _ := current(t, s)
	for _, f := range []fleet.Fact{
		{Kind: fleet.FactCoolDown, Model: model, At: now.Add(-time.Hour), Until: now.Add(-time.Second)},
		{Kind: fleet.FactOpen, Model: model, Endpoint: "generate", At: now.Add(-time.Minute), Until: now.Add(-time.Second)},
		{Kind: fleet.FactClosed, Model: model, Endpoint: "embed", At: now.Add(-61 * time.Second)},
		{Kind: fleet.FactLimit, Model: model, Dimension: "rpd", At: now.Add(-25 * time.Hour), Limit: 5},
	} {
		publish(t, s, f)
	}
	v1, got := current(t, s)
	assert.Equal(t, v0, v1, "ended facts change nothing")
	assert.Empty(t, got)

	// Facts still in force by their kind's lifetime.
	closed := fleet.Fact{Kind: fleet.FactClosed, Model: model, Endpoint: "embed", At: now.Add(-50 * time.Second)}
	limit := fleet.Fact{Kind: fleet.FactLimit, Model: model, Dimension: "rpd", At: now.Add(-23 * time.Hour), Limit: 5}
	publish(t, s, closed)
	publish(t, s, limit)
	_, got = current(t, s)
	assert.Equal(t, shows(closed, limit), got)
}

func factsByVersion(t *testing.T, s fleet.SharedState) {
	fresh := lease(t, s, fleet.LeaseRequest{})
	assert.Nil(t, fresh.Facts, "an empty project at the version a new replica holds")
	l := lease(t, s, fleet.LeaseRequest{Version: fresh.Version + 1})
	assert.NotNil(t, l.Facts, "facts (none) for a version that differs")
	assert.Empty(t, l.Facts)

	now := time.Now().Truncate(time.Millisecond)
	c := fleet.Fact{Kind: fleet.FactCoolDown, Model: model, At: now, Until: now.Add(time.Hour)}
	publish(t, s, c)
	l = lease(t, s, fleet.LeaseRequest{Version: fresh.Version})
	assert.NotEqual(t, fresh.Version, l.Version)
	assert.Equal(t, shows(c), facts(l), "a replica at the old version hears the fact")
	again := lease(t, s, fleet.LeaseRequest{Version: l.Version, Requests: 1})
	assert.Nil(t, again.Facts, "nothing new at the current version")
	assert.Equal(t, l.Version, again.Version)
	assert.Equal(t, 1, again.Requests)
}

func atDefaultsToNow(t *testing.T, s fleet.SharedState) {
	before := time.Now()
	publish(t, s, fleet.Fact{Kind: fleet.FactClosed, Model: model, Endpoint: "generate"})
	l := lease(t, s, fleet.LeaseRequest{Version: ^uint64(0)})
	require.Len(t, l.Facts, 1)
	assert.WithinRange(t, l.Facts[0].At, before.Add(-slack), time.Now().Add(slack), "a zero At is the store's now")
}

func replicas(t *testing.T, s fleet.SharedState) {
	a := fleet.LeaseRequest{Replica: "a", ReplicaTTL: time.Minute}
	b := fleet.LeaseRequest{Replica: "b", ReplicaTTL: time.Minute}
	assert.Equal(t, 1, lease(t, s, a).Replicas)
	assert.Equal(t, 2, lease(t, s, b).Replicas)
	assert.Equal(t, 2, lease(t, s, a).Replicas, "a heartbeat is not a new replica")
	gone := fleet.LeaseRequest{Replica: "c", ReplicaTTL: 0}
	assert.Equal(t, 2, lease(t, s, gone).Replicas, "a replica with no TTL left is not live")
	other := a
	other.Project = "other-project"
	assert.Equal(t, 1, lease(t, s, other).Replicas, "projects are apart")
}

func cancelledContext(t *testing.T, s fleet.SharedState) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Lease(ctx, fleet.LeaseRequest{Project: project, Model: model, Replica: "a", ReplicaTTL: time.Minute, Requests: 1})
	require.ErrorIs(t, err, context.Canceled)
	err = s.Publish(ctx, project, fleet.Fact{Kind: fleet.FactCoolDown, Model: model, Until: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, context.Canceled)
	// Nothing was taken or recorded.
	l := lease(t, s, fleet.LeaseRequest{Requests: 1, RPM: 1, Version: ^uint64(0)})
	assert.Equal(t, 1, l.Requests)
	assert.Empty(t, l.Facts)
}
