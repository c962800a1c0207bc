// Package fleet is the contract between a geminiguard Client and the store
// its fleet of replicas shares (geminiguard.WithSharedState): SharedState
// and its optional interfaces, the requests and facts they carry, and
// NewMemoryState, a store in memory. It is for store authors (package
// redisstore implements it on Redis) and for tests; a Client's user needs
// only a store and geminiguard.WithSharedState. It imports nothing of geminiguard, so
// amounts and failure classes appear here as their integers: Spent,
// DaySpent and MonthSpent are geminiguard.Micros, Fact.Reason a
// geminiguard.Class.
package fleet

import (
	"context"
	"time"
)

// SharedState is where the replicas of a fleet — Clients of one Google
// project in many processes — keep what the project's quota and models
// taught any of them: fleet-wide request and token counts, cool-downs,
// open breakers and learned limits. geminiguard.WithSharedState gives it to a Client;
// package redisstore implements it on Redis, and NewMemoryState in memory
// (Clients of one process, tests).
//
// An implementation must be safe for concurrent use, must make each method
// one atomic step of the shared state (a round trip to a server at most:
// the Client calls Lease on its hot path), and must return promptly when
// ctx ends: the Client gives each call a deadline of tens of milliseconds
// and, on any error, carries on alone (see geminiguard.WithSharedState), so an error
// never fails a user's call. Times in the state are the store's own clock
// where the store has one (windows, expiries), so replicas' clocks may
// disagree by a little.
type SharedState interface {
	// Lease takes, for all of r's dimensions at once, up to r.Requests
	// requests of the model's fleet-wide limits and r.Tokens input tokens
	// for each (when it grants none, those of r.Next's model, in the same
	// step), registers r.Replica as live, and returns the project's facts
	// when they changed since r.Version. See LeaseRequest and Lease.
	Lease(ctx context.Context, r LeaseRequest) (Lease, error)
	// Publish records f as the project's, merged with what is there by
	// FactKind's rules, and moves the project's version on when it changed
	// anything, so that every replica's next Lease returns the facts.
	Publish(ctx context.Context, project string, f Fact) error
}

// Subscriber is a SharedState that tells a Client at once that a project's
// facts changed. Without it a replica hears of another's facts at its next
// round trip to the store (within a second while calls flow: a replica
// holding leased requests may send one more to a model another replica
// found exhausted or dead); with it, a replica reads the facts as soon as
// they change. geminiguard.WithSharedState uses it when the store has it. redisstore's
// Store (Redis pub/sub) and NewMemoryState's store are Subscribers.
type Subscriber interface {
	// Subscribe calls changed after each Publish, by any replica, that
	// changed project's facts, until stop is called. Once stop returns, no
	// call of changed starts (one under way may still end); the store's
	// goroutines for the subscription have ended. changed may be called
	// from any goroutine (the publisher's, one of the store's) and may call
	// the store. A subscription that breaks (the store unreachable) may miss
	// changes: replicas then hear of them at their next round trip.
	Subscribe(project string, changed func()) (stop func())
}

// FactSubscriber is a Subscriber that also tells what changed: the fact a
// Publish merged (as the store keeps it: At filled in when it was zero)
// and the project's version before and after it, so that a replica at the
// version before applies the fact without a round trip (geminiguard.
// WithSharedState uses it when the store has it; a replica at another
// version reads the facts, as a Subscriber's does). Each fact a replica
// publishes would otherwise cost every replica a round trip. redisstore's
// Store and NewMemoryState's store are FactSubscribers.
type FactSubscriber interface {
	Subscriber
	// SubscribeFacts is Subscribe with the change given: changed gets the
	// fact and the versions from and to (from 0: the project had no fact
	// in force); to is 0 when the store cannot tell the change (a message
	// of a publisher of another format): the replica then reads the facts.
	SubscribeFacts(project string, changed func(f Fact, from, to uint64)) (stop func())
}

// StoreSettings say how a Client treats the round trips to its
// SharedState. A zero field means its default; a negative one is refused
// by geminiguard.New.
type StoreSettings struct {
	// Timeout and MaxTimeout bound each round trip: the Client learns the
	// bound from the round trips' own latency (a smoothed mean plus four
	// deviations, as TCP's retransmission timer does), at least Timeout
	// and at most MaxTimeout, and doubles it after a round trip timed out,
	// until one answers. Defaults: 30ms and 250ms.
	Timeout, MaxTimeout time.Duration
	// WarmUp bounds New's first round trip, within New's context: a cold
	// connection (dial, handshake, a script the server has not seen) or a
	// busy node may take longer than a warm round trip. Default: 1s.
	WarmUp time.Duration
	// Failures is how many round trips must fail in a row, each begun
	// after the one before it failed (round trips failing together count
	// once), before the Client carries on alone. Default: 3.
	Failures int
	// AloneFor is how long the Client then carries on alone before it
	// tries the store again. Default: 2s.
	AloneFor time.Duration
}

// SettledState is a SharedState with settings of its own (redisstore's
// options). geminiguard.WithSharedState reads them once: a non-nil error says the
// store cannot serve as it was made (a redisstore.Store without a Redis
// client), and geminiguard.New fails with it.
type SettledState interface {
	SharedState
	StoreSettings() (StoreSettings, error)
}

// AnswerStore is a SharedState that also keeps the answers of idempotency
// keys (geminiguard.Idempotent), so that a key replayed on any replica of the
// fleet gets the answer another replica stored, sending nothing, and a key
// reused for a different request is refused fleet-wide. geminiguard.WithSharedState
// uses it when the store has it; without it, a key's answer is kept by the
// Client that called (calls in flight are joined per Client either way).
// redisstore's Store and NewMemoryState's store are AnswerStores. It earns
// its place as an optional interface, like Subscriber, so that a
// SharedState need not keep answers.
//
// The Client encodes an answer itself (the request's digest, the model
// that answered, the response's JSON): a store keeps the bytes as given.
// key is a hex SHA-256 of the caller's idempotency key, never the key
// itself. The Client changes neither the slice it gives StoreAnswer nor the
// one LoadAnswer returns, so a store may keep and return them. Errors
// never fail a call: the Client then keeps and looks up the key's answer
// on its own (see geminiguard.WithSharedState for the deadline and breaker around
// every call to the store).
type AnswerStore interface {
	// StoreAnswer keeps answer under project and key for ttl, replacing
	// what was there.
	StoreAnswer(ctx context.Context, project, key string, answer []byte, ttl time.Duration) error
	// LoadAnswer returns the answer stored under project and key, nil
	// when there is none or it expired.
	LoadAnswer(ctx context.Context, project, key string) ([]byte, error)
}

// LeaseRequest is what Lease asks of a project's shared state. Every count
// is of the project as a whole: the store adds up all replicas' leases.
type LeaseRequest struct {
	Project string // the project's id: a hash of the API key, or the Vertex AI project; never a key
	Replica string // the asking Client's id, unique in the fleet
	// ReplicaTTL is how long Replica counts as live after this request
	// (Lease.Replicas counts the replicas live at the store's now).
	ReplicaTTL time.Duration
	Model      string

	// Requests is the number of requests wanted (≥ 0): the store grants
	// the largest n ≤ Requests for which n more requests and n × Tokens
	// more tokens keep every limit below: RPM and TPM over the last 60
	// seconds of the store's clock, RPD over the Pacific day ending at
	// DayEnd. A limit of 0 does not limit. With Requests 0, Lease only
	// registers the replica and returns the facts.
	Requests int
	Tokens   int // input tokens per request, counted against TPM
	// Debt is input tokens used beyond what earlier leases counted
	// (responses report the real count): added to the TPM window at once,
	// never refused.
	Debt          int
	RPM, TPM, RPD int       // the fleet's limits, headroom applied; 0: none
	DayEnd        time.Time // the end (a Pacific midnight) of the day RPD, Alone and Unused count; needed when any is > 0

	// Probe, when positive, asks also for the model's half-open probe slot
	// of Endpoint, held for Probe: while another replica holds it, Lease
	// grants nothing (Lease.Dimension "probe"). A FactOpen or FactClosed of
	// that endpoint frees the slot.
	Probe    time.Duration
	Endpoint string // "generate", "embed" or "count"; with Probe

	// Version is the project's version the replica last saw: Lease
	// returns the facts when the project's differs.
	Version uint64

	// Failures is how many requests to Model failed on this replica since
	// its last report (and after Answered, when set), and Answered when
	// Model last answered it since then (zero: not since). The store keeps
	// the model's consecutive failures across the fleet: an Answered later
	// than the latest it has resets the count, then Failures are added.
	// Both are counted even when nothing is granted.
	Failures int
	Answered time.Time
	// Draws is how many of Failures are draws of their own, as the
	// replica's breaker counts a run (failures of requests sent together
	// count once: they met the model in the same moment); FailedSince is
	// when the earliest of Failures' requests was sent, and DrawsUntil when
	// a request sent from then on is a draw of its own after the replica's
	// latest. The store counts the model's run across the fleet in draws
	// too: it adds Draws, less one when FailedSince is before the fleet's
	// DrawsUntil (the first of them met the model in a draw counted
	// already), counts a run's first failure as a draw, and keeps the
	// latest DrawsUntil of a report with Draws or that starts the run (one
	// with none ends no draw: the replica's draw, its report overtaken by
	// that one, is still its own); an Answered that resets the failures
	// resets both.
	Draws       int
	FailedSince time.Time
	DrawsUntil  time.Time
	// Awaiting is until when the replica waits for the answer of a
	// request to Model that it sent while the model was unheard (it never
	// answered, or not for a while), zero when none is in flight: the
	// store keeps each replica's latest report, and Lease.Awaiting tells
	// the others, whose failures alone must not take such a model for
	// dead while its answers may be on their way.
	Awaiting time.Time

	// Latency, when not nil, is this replica's record of Model, by class
	// and bucket (the Client's encoding; the store only adds them up): its
	// answer times, and its throttle's recent requests and answers (the
	// classes from 1024 on, by the Unix second their span began). The
	// store keeps each replica's latest, in place of the one before, for
	// ReplicaTTL. Latencies asks for the other replicas' records of
	// Model, summed (Lease.Latency), so that a replica that starts, or
	// sees a share of the traffic, learns from the fleet's answers and
	// throttles on its failures as one process would. Neither applies to
	// Next.
	Latency   []LatencyCount
	Latencies bool

	// Spent is what this replica's priced responses cost since its last
	// report (geminiguard.WithBudget), less the reservations (Reserve) of
	// the requests settled since, spent in the Pacific day ending SpendDay
	// and the Pacific month ending SpendMonth: the store adds it to the
	// project's spend of that day and that month (a negative Spent gives
	// back what reservations held beyond the real cost; a window's spend
	// never goes below zero), and Lease.DaySpent and MonthSpent return
	// them. A zero SpendDay or SpendMonth reads and counts nothing for that
	// window.
	Spent      int64 // micro-dollars (a geminiguard.Micros)
	SpendDay   time.Time
	SpendMonth time.Time
	// Reserve, when positive, is the estimated cost of a request about to
	// be sent, to reserve against the project's budgets DayBudget and
	// MonthBudget (0: no limit) in the windows SpendDay and SpendMonth,
	// after Spent is counted: the store adds Reserve to both windows'
	// spend when each window's spend is below its budget, else adds
	// nothing and names the window that refused in Lease.BudgetRefused.
	// The replica settles it with a later Spent (the real cost less
	// Reserve), so a fleet spends at most its budget plus one request's
	// estimate per request admitted at once.
	Reserve                int64 // micro-dollars (a geminiguard.Micros)
	DayBudget, MonthBudget int64 // micro-dollars (geminiguard.Micros); 0: none

	// Alone is how many requests this replica sent to Model on its own,
	// the store unreachable, since its last report (their input tokens
	// come as Debt): the store counts them in the RPM window and the RPD
	// day ending at DayEnd at once, never refused, so that the fleet does
	// not grant them again.
	Alone int
	// Unused is how many requests earlier leases granted in the Pacific
	// day ending at DayEnd lapsed unsent, with UnusedTokens input tokens:
	// the store takes them off the RPM and TPM windows and that day's RPD
	// count (none below zero), so that other replicas may send them.
	Unused, UnusedTokens int

	// Next, when not nil, is the request for the model the call goes to
	// should Model grant nothing (the next of its cascade), so that a call
	// the first model refuses falls through in the same round trip. Its
	// model's fields are read as this request's are — Model, Requests,
	// Tokens, Debt, RPM, TPM, RPD, DayEnd, Probe, Endpoint, Failures,
	// Answered, Draws, FailedSince, DrawsUntil, Awaiting, Alone, Unused
	// and UnusedTokens — and the rest is the first request's, counted once
	// (the replica, the version, the spend, the reservation); Next.Next
	// is ignored. In the same atomic step, the store counts Next's report
	// (Debt, Alone, Unused, Failures, Answered, Draws, Awaiting) in every
	// case, and evaluates Next.Requests only when this request asked for
	// requests and was granted none (refused by a limit or the probe
	// slot): a first model that grants takes nothing of the next one's
	// limits.
	Next *LeaseRequest
}

// Lease is Lease's answer.
type Lease struct {
	Requests int // requests granted, 0 ≤ Requests ≤ LeaseRequest.Requests, each with LeaseRequest.Tokens tokens
	// RetryAfter is, when nothing was granted, how long until the
	// dimension that refused may grant one request; Dimension names it:
	// "rpm", "tpm", "rpd" or "probe".
	RetryAfter time.Duration
	Dimension  string
	Replicas   int    // replicas live at the store's now, the asking one included
	Version    uint64 // the project's version
	// Facts holds every fact of the project in force when Version differs
	// from LeaseRequest.Version (possibly none); nil otherwise.
	Facts []Fact
	// Failures is Model's consecutive failures across the fleet, this
	// request's report included, Draws how many of them are draws of their
	// own (LeaseRequest.Draws; at least one when Failures is), and
	// Answered when Model last answered any replica (zero: never, or not in
	// the last hour).
	Failures int
	Draws    int
	Answered time.Time
	// Awaiting is the latest LeaseRequest.Awaiting that another replica
	// reported and that is later than the store's now (zero: none).
	Awaiting time.Time
	// DaySpent and MonthSpent are the project's spend in the windows
	// LeaseRequest.SpendDay and SpendMonth name, this report and the
	// reservations in force (this one's when granted) included; 0 for a
	// window not named.
	DaySpent, MonthSpent int64 // micro-dollars (geminiguard.Micros)
	// BudgetRefused is, when LeaseRequest.Reserve was refused, the window
	// whose budget is spent: "day" or "month" (the month when both are);
	// "" when it was reserved or none was asked.
	BudgetRefused string
	// Latency is, when LeaseRequest.Latencies, the records of Model that
	// the other replicas reported within their ReplicaTTL, summed by class
	// and bucket; nil otherwise.
	Latency []LatencyCount
	// Next is, when LeaseRequest.Next was given, the answer for its
	// model: Requests (0 unless the first model granted none),
	// RetryAfter and Dimension when Next.Requests were refused, Failures,
	// Draws, Answered and Awaiting; its other fields are zero. Nil when no Next was
	// asked.
	Next *Lease
}

// LatencyCount is N answers (or abandoned attempts, or requests of a
// throttle's span) of a model in one bucket of one class of a replica's
// record (LeaseRequest.Latency): Class and Bucket are from 0 to 2³¹−1. The
// store keeps them without reading them.
type LatencyCount struct {
	Class, Bucket int
	N             int64
}

// FactKind says what a Fact records and how Publish merges it with what the
// project has.
type FactKind uint8

const (
	// FactCoolDown keeps Model (the whole project when Model is empty) out
	// of rotation until Until, for Reason: a per-minute or daily quota, a
	// spend cap, a project-wide failure. A later Until replaces an earlier
	// one; the fact ends at Until.
	FactCoolDown FactKind = iota + 1
	// FactOpen says Model's breaker of Endpoint opened at At, until Until;
	// with Outage, in an outage (no model answered the replica), which a
	// replica ends at its first answer of any model, as it ends its own.
	// The latest At of FactOpen and FactClosed wins (at the same At, the
	// later publish); a FactOpen ends at Until.
	FactOpen
	// FactClosed says Model's breaker of Endpoint closed at At (a probe
	// succeeded). It is kept for a minute, so that replicas hear it.
	FactClosed
	// FactLimit says the server stated Limit as Model's quota of Dimension
	// ("rpm", "tpm" or "rpd"). A lower limit replaces a higher one; the
	// fact is kept for a day.
	FactLimit
	// FactMissing says Model is not the project's to call since At, for
	// Reason: retired (a 404), a quota of zero, a model-scoped permission
	// error. It holds until a replica finds the model listed again
	// (FactListed). The latest At of FactMissing and FactListed wins (at
	// the same At, the later publish); a FactMissing is kept for a day.
	FactMissing
	// FactListed says a replica's geminiguard.CheckCascade found Model listed at At. It
	// is kept for a minute, so that replicas hear it.
	FactListed
	// FactRecordWanted says a replica waits for Model's first deadlines:
	// an attempt of its, sent before the answers taught them, is out past
	// the answers it knows, and the fleet's record (LeaseRequest.Latency)
	// does not teach them yet. A replica that hears it shares its record
	// of Model at once, and after its requests to Model until Until (once
	// a second at most), rather than on its next round trip. A later Until
	// replaces an earlier one; the fact ends at Until.
	FactRecordWanted
)

// Fact is one thing the fleet learned about a model or the project. See
// FactKind for which fields each kind uses.
type Fact struct {
	Kind      FactKind
	Model     string
	Endpoint  string
	At        time.Time
	Until     time.Time
	Reason    int // the geminiguard.Class of the failure behind the fact; a store keeps it as given
	Dimension string
	Limit     int
	Outage    bool // FactOpen: an outage opened the breaker; a store keeps it as given
}

// FactKey is what a fact replaces: one per kind group, model and endpoint
// or dimension. FactOpen and FactClosed share a group, and so do
// FactMissing and FactListed. A project holds one fact per FactKey.
type FactKey struct {
	group uint8
	model string
	sub   string
}

// Key returns f's FactKey.
func (f Fact) Key() FactKey {
	switch f.Kind {
	case FactOpen, FactClosed:
		return FactKey{group: uint8(FactOpen), model: f.Model, sub: f.Endpoint}
	case FactMissing, FactListed:
		return FactKey{group: uint8(FactMissing), model: f.Model}
	case FactLimit:
		return FactKey{group: uint8(FactLimit), model: f.Model, sub: f.Dimension}
	}
	return FactKey{group: uint8(f.Kind), model: f.Model}
}

// End returns when f stops being in force: FactKind says how long each
// kind is kept.
func (f Fact) End() time.Time {
	switch f.Kind {
	case FactClosed, FactListed:
		return f.At.Add(closedFactTTL)
	case FactLimit, FactMissing:
		return f.At.Add(limitFactTTL)
	}
	return f.Until
}

// Replaces reports whether f, published, replaces old, a fact of the same
// Key, by FactKind's rules.
func (f Fact) Replaces(old Fact) bool {
	switch f.Kind {
	case FactCoolDown, FactRecordWanted:
		return f.Until.After(old.Until)
	case FactOpen, FactClosed, FactMissing, FactListed:
		return !f.At.Before(old.At) // at the same At, the later publish

	case FactLimit:
		return f.Limit < old.Limit
	}
	return false
}
