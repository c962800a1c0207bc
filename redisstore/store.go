package redisstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
)

// Store is a fleet.SharedState on Redis. It is safe for concurrent
// use; each method is one round trip (one EVALSHA, or EVAL the first time a
// server sees the script). It holds no state of its own: Stores on the same
// Redis with the same key prefix share everything. Create it with New; the
// zero value is not usable.
type Store struct {
	rdb        redis.UniversalClient
	prefix     string
	watchesCtx bool // rdb ends a command when its context ends (ContextTimeoutEnabled)
	settings   fleet.StoreSettings
	err        error // why the Store cannot serve (made without a client); nil when it can
}

var (
	_ fleet.SharedState  = (*Store)(nil)
	_ fleet.Subscriber   = (*Store)(nil)
	_ fleet.SettledState = (*Store)(nil)
)

// errNoClient is the error of a Store made without a Redis client.
var errNoClient = errors.New("redisstore: New(nil): pass a go-redis client (redis.NewClient, redis.NewClusterClient, redis.NewFailoverClient)")

// New returns a Store keeping the fleet's state in rdb, which may be a
// *redis.Client, a *redis.ClusterClient or a failover client. The Store
// never closes rdb.
//
// Give rdb ContextTimeoutEnabled: true (redis.Options): the Client bounds
// each call to the store by a context deadline of tens of milliseconds, and
// without that option go-redis does not end a command at its context's
// deadline but at its ReadTimeout (3s by default), so a paused or
// partitioned Redis would hold the call. Without it the Store still returns
// at the deadline, and lets the command finish in the background within
// rdb's own timeouts, at the cost of a goroutine per call.
//
// A nil rdb (or a typed nil, such as a nil *redis.Client) makes a Store
// that geminiguard.New refuses with an error, and whose methods return it.
func New(rdb redis.UniversalClient, opts ...Option) *Store {
	s := &Store{rdb: rdb, prefix: "geminiguard"}
	if rv := reflect.ValueOf(rdb); rdb == nil || rv.Kind() == reflect.Pointer && rv.IsNil() {
		s.rdb, s.err = nil, errNoClient
	} else {
		s.watchesCtx = watchesCtx(rdb)
	}
	for _, o := range opts {
		o.apply(s)
	}
	return s
}

// StoreSettings implements fleet.SettledState: the bounds and the
// alone period WithTimeouts, WithWarmUp, WithFailures and WithAloneFor set
// (zero: geminiguard's defaults), and an error for a Store made without a
// client.
func (s *Store) StoreSettings() (fleet.StoreSettings, error) {
	return s.settings, s.err
}

// watchesCtx reports whether rdb ends a command when its context ends.
func watchesCtx(rdb redis.UniversalClient) bool {
	switch c := rdb.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// await returns fn's result, or ctx's error as soon as ctx ends when the
// client does not watch ctx itself (watches false): fn then finishes in a
// goroutine of its own, its result dropped.
func await[T any](ctx context.Context, watches bool, fn func() (T, error)) (T, error) {
	if watches {
		return fn()
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

// Option configures a Store.
type Option interface {
	apply(*Store)
}

type optionFunc func(*Store)

func (f optionFunc) apply(s *Store) { f(s) }

// WithTimeouts sets the bounds of each round trip a Client makes to the
// Store: the Client learns the bound from the round trips' latency, at
// least least and at most most (fleet.StoreSettings). Raise them for
// a Redis across zones or regions, whose p99 or a GC pause may pass 30 ms.
// Default: 30ms and 250ms.
func WithTimeouts(least, most time.Duration) Option {
	return optionFunc(func(s *Store) { s.settings.Timeout, s.settings.MaxTimeout = least, most })
}

// WithWarmUp sets the bound of New's first round trip to the Store (a cold
// connection: dial, TLS, HELLO, the scripts loaded), within New's context.
// Default: 1s.
func WithWarmUp(d time.Duration) Option {
	return optionFunc(func(s *Store) { s.settings.WarmUp = d })
}

// WithFailures sets how many round trips must fail in a row (round trips
// failing together count once) before a Client carries on alone. Default:
// 3.
func WithFailures(n int) Option {
	return optionFunc(func(s *Store) { s.settings.Failures = n })
}

// WithAloneFor sets how long a Client carries on alone, once the Store
// failed, before it tries the Store again. Default: 2s.
func WithAloneFor(d time.Duration) Option {
	return optionFunc(func(s *Store) { s.settings.AloneFor = d })
}

// WithPrefix sets the prefix of every key the Store writes, so that
// several fleets (or tests) share one Redis without sharing state. Keys are
// prefix:{project}:…; the prefix should not contain braces, which would
// move the keys' hash tag off the project (they still share one slot).
// Default: "geminiguard".
func WithPrefix(prefix string) Option {
	return optionFunc(func(s *Store) { s.prefix = prefix })
}

// errNoProject is returned for an empty project id, which cannot make a
// hash tag.
var errNoProject = errors.New("redisstore: empty project id: give each Client's project an id")

// base returns the keys' common start for project: prefix:{project}:.
func (s *Store) base(project string) string {
	return s.prefix + ":{" + project + "}:"
}

// Lease implements fleet.SharedState.Lease in one round trip. It
// returns ctx's error when ctx ended, an error for an empty r.Project, and
// Redis's or the connection's error wrapped otherwise.
func (s *Store) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return fleet.Lease{}, err
	}
	if r.Project == "" {
		return fleet.Lease{}, errNoProject
	}
	base := s.base(r.Project)
	model := base + "m:" + r.Model + ":"
	dayEnd := unixMilli(r.DayEnd)
	keys := []string{
		base + "version",
		base + "facts",
		base + "replicas",
		model + "win",
		model + "rpd:" + strconv.FormatInt(dayEnd/1000, 10),
		model + "probe:" + r.Endpoint,
		model + "health",
		base + "spend:d:" + strconv.FormatInt(unixMilli(r.SpendDay)/1000, 10),
		base + "spend:m:" + strconv.FormatInt(unixMilli(r.SpendMonth)/1000, 10),
	}
	res, err := await(ctx, s.watchesCtx, func() ([]any, error) {
		return leaseScript.Run(ctx, s.rdb, keys,
			r.Replica,
			max(r.ReplicaTTL.Milliseconds(), 0),
			max(r.Requests, 0),
			max(r.Tokens, 0),
			max(r.Debt, 0),
			max(r.RPM, 0), max(r.TPM, 0), max(r.RPD, 0),
			dayEnd,
			ceilMillis(r.Probe),
			strconv.FormatUint(r.Version, 10),
			max(r.Failures, 0),
			unixMilli(r.Answered),
			r.Spent,
			unixMilli(r.SpendDay),
			unixMilli(r.SpendMonth),
			max(r.Alone, 0),
			max(r.Unused, 0),
			max(r.UnusedTokens, 0),
			max(r.Reserve, 0),
			max(r.DayBudget, 0), max(r.MonthBudget, 0),
		).Slice()
	})
	if err != nil {
		return fleet.Lease{}, fmt.Errorf("redisstore: lease: %w", err)
	}
	return parseLease(res)
}

// unixMilli returns t in unix milliseconds, 0 for the zero time.
func unixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// ceilMillis returns d in whole milliseconds, rounded up; 0 for d ≤ 0.
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// parseLease reads leaseScript's answer.
func parseLease(res []any) (fleet.Lease, error) {
	bad := func(what string) (fleet.Lease, error) {
		return fleet.Lease{}, fmt.Errorf("redisstore: lease: unexpected answer from the script (%s): check that the server runs Redis 7 or Valkey", what)
	}
	if len(res) < 11 {
		return bad("length")
	}
	granted, ok1 := res[0].(int64)
	retry, ok2 := res[1].(int64)
	dim, ok3 := res[2].(string)
	replicas, ok4 := res[3].(int64)
	version, ok5 := res[4].(string)
	hasFacts, ok6 := res[5].(int64)
	failures, ok7 := res[6].(int64)
	answered, ok8 := res[7].(int64)
	daySpent, ok9 := res[8].(int64)
	monthSpent, ok10 := res[9].(int64)
	refused, ok11 := res[10].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 || !ok7 || !ok8 || !ok9 || !ok10 || !ok11 {
		return bad("types")
	}
	v, err := strconv.ParseUint(version, 10, 64)
	if err != nil {
		return bad("version")
	}
	l := fleet.Lease{
		Requests:      int(granted),
		RetryAfter:    time.Duration(retry) * time.Microsecond,
		Dimension:     dim,
		Replicas:      int(replicas),
		Version:       v,
		Failures:      int(failures),
		DaySpent:      daySpent,
		MonthSpent:    monthSpent,
		BudgetRefused: refused,
	}
	if answered > 0 {
		l.Answered = time.UnixMilli(answered)
	}
	if hasFacts == 0 {
		return l, nil
	}
	l.Facts = make([]fleet.Fact, 0, len(res)-11)
	for _, raw := range res[11:] {
		s, ok := raw.(string)
		if !ok {
			return bad("fact")
		}
		var w wireFact
		if err := json.Unmarshal([]byte(s), &w); err != nil {
			return bad("fact: " + err.Error())
		}
		l.Facts = append(l.Facts, w.fact())
	}
	return l, nil
}

// Publish implements fleet.SharedState.Publish in one round trip. A
// zero f.At is Redis's now. It returns ctx's error when ctx ended, an error
// for an empty project, and Redis's or the connection's error wrapped
// otherwise.
func (s *Store) Publish(ctx context.Context, project string, f fleet.Fact) error {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return err
	}
	if project == "" {
		return errNoProject
	}
	raw, err := json.Marshal(wireOf(f))
	if err != nil {
		return fmt.Errorf("redisstore: publish: %w", err)
	}
	base := s.base(project)
	keys := []string{base + "version", base + "facts", base + "m:" + f.Model + ":probe:" + f.Endpoint}
	_, err = await(ctx, s.watchesCtx, func() (struct{}, error) {
		return struct{}{}, publishScript.Run(ctx, s.rdb, keys, fieldOf(f), raw, base+"changed").Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: publish: %w", err)
	}
	return nil
}

// Subscribe implements fleet.Subscriber on Redis pub/sub: Publish
// tells the channel prefix:{project}:changed, and a goroutine of the
// subscription reads it and calls changed. Subscribe returns at once: the
// goroutine subscribes, each try bounded by the Store's warm-up bound
// (WithWarmUp), and tries again after a pause (doubling from 100 ms to 5 s)
// until Redis answers or stop is called; go-redis re-subscribes after a
// lost connection. What was published meanwhile is missed (the Client then
// reads it at its next round trip). stop ends the subscription and waits
// for its goroutine. A Store made without a client never calls changed.
func (s *Store) Subscribe(project string, changed func()) (stop func()) {
	if s.err != nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ps := s.rdb.Subscribe(ctx) // no channel yet: no round trip
		defer ps.Close()
		channel := s.base(project) + "changed"
		for pause := subscribeFirstPause; ; pause = min(2*pause, subscribeMaxPause) {
			tctx, tcancel := context.WithTimeout(ctx, cmp.Or(s.settings.WarmUp, time.Second))
			err := ps.Subscribe(tctx, channel)
			tcancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
		ch := ps.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-ch:
				if !ok {
					return
				}
				changed()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// The pauses between tries of a subscription.
const (
	subscribeFirstPause = 100 * time.Millisecond
	subscribeMaxPause   = 5 * time.Second
)

// fieldOf returns the facts hash's field of f: what f replaces, one per
// kind group, model and endpoint or dimension (FactOpen and FactClosed
// share a group, and so do FactMissing and FactListed).
func fieldOf(f fleet.Fact) string {
	group, sub := f.Kind, ""
	switch f.Kind {
	case fleet.FactOpen, fleet.FactClosed:
		group, sub = fleet.FactOpen, f.Endpoint
	case fleet.FactMissing, fleet.FactListed:
		group = fleet.FactMissing
	case fleet.FactLimit:
		sub = f.Dimension
	}
	return strconv.Itoa(int(group)) + "\n" + f.Model + "\n" + sub
}

// wireFact is a Fact as stored: times in unix milliseconds (0: zero time).
// Times are float64 because Lua re-encodes a fact whose At it fills in.
type wireFact struct {
	Kind      fleet.FactKind `json:"k"`
	Model     string         `json:"m"`
	Endpoint  string         `json:"e"`
	At        float64        `json:"at"`
	Until     float64        `json:"u"`
	Reason    int            `json:"r"`
	Dimension string         `json:"d"`
	Limit     int            `json:"l"`
}

func wireOf(f fleet.Fact) wireFact {
	return wireFact{
		Kind: f.Kind, Model: f.Model, Endpoint: f.Endpoint,
		At: unixMillis(f.At), Until: unixMillis(f.Until),
		Reason: f.Reason, Dimension: f.Dimension, Limit: f.Limit,
	}
}

func (w wireFact) fact() fleet.Fact {
	return fleet.Fact{
		Kind: w.Kind, Model: w.Model, Endpoint: w.Endpoint,
		At: fromMillis(w.At), Until: fromMillis(w.Until),
		Reason: w.Reason, Dimension: w.Dimension, Limit: w.Limit,
	}
}

func unixMillis(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMilli())
}

func fromMillis(ms float64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(int64(math.Round(ms)))
}
