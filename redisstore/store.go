package redisstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
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
	_ fleet.SharedState    = (*Store)(nil)
	_ fleet.Subscriber     = (*Store)(nil)
	_ fleet.FactSubscriber = (*Store)(nil)
	_ fleet.SettledState   = (*Store)(nil)
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

// Lease implements fleet.SharedState.Lease in one round trip, r.Next
// included. It returns ctx's error when ctx ended, an error for an empty
// r.Project, and Redis's or the connection's error wrapped otherwise.
func (s *Store) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return fleet.Lease{}, err
	}
	if r.Project == "" {
		return fleet.Lease{}, errNoProject
	}
	la := leaseArgsPool.Get().(*leaseArgs)
	la.build(s.prefix, r.Project, &r)
	res, err := await(ctx, s.watchesCtx, func() (fleet.Lease, error) {
		defer leaseArgsPool.Put(la) // here: await may return before fn does
		reply, err := s.rdb.Do(ctx, la.cmd()...).Text()
		if redis.HasErrorPrefix(err, "NOSCRIPT") {
			la.args[0], la.args[1] = "eval", &leaseSource
			reply, err = s.rdb.Do(ctx, la.cmd()...).Text()
		}
		if err != nil {
			return fleet.Lease{}, fmt.Errorf("redisstore: lease: %w", err)
		}
		return parseLease(reply, r.Next != nil)
	})
	return res, err
}

// leaseSource is leaseLua, for EVAL the first time a server sees it.
var leaseSource = leaseLua

// Lease's command: "evalsha", the hash, the number of keys, the keys, and
// one packed argument (see leaseLua).
const (
	leaseProjectKeys = 5 // version, facts, replicas, the day's and the month's spend
	leaseModelKeys   = 5 // a model's window, RPD counter, probe slot, health, the replicas' records of its answer times
	leaseMaxKeys     = leaseProjectKeys + 2*leaseModelKeys
	leaseHead        = 3 // "evalsha", the hash, the number of keys
)

// leaseKeyCounts are the numbers of keys of a Lease without and with
// LeaseRequest.Next, as the command sends them.
var leaseKeyCounts = [...]string{strconv.Itoa(leaseProjectKeys + leaseModelKeys), strconv.Itoa(leaseMaxKeys)}

// leaseArgs is one Lease's command, built in buffers reused across Leases
// (leaseArgsPool): the keys and the packed argument are substrings of one
// string, and the command's arguments point to them, so that a Lease boxes
// nothing and allocates its text once.
type leaseArgs struct {
	buf    []byte
	keys   [leaseMaxKeys]string
	packed string
	record string // the second argument: LeaseRequest.Latencies and Latency (see leaseLua)
	args   [leaseHead + leaseMaxKeys + 2]any
	n      int // keys in use
}

var leaseArgsPool = sync.Pool{New: func() any { return new(leaseArgs) }}

// cmd returns the command's arguments.
func (la *leaseArgs) cmd() []any {
	return la.args[:leaseHead+la.n+2]
}

// build writes r's command, the keys under prefix and project (as
// Store.base names them).
func (la *leaseArgs) build(prefix, project string, r *fleet.LeaseRequest) {
	b := la.buf[:0]
	var ends [leaseMaxKeys]int
	base := func() { b = append(append(append(append(b, prefix...), ":{"...), project...), "}:"...) }
	key := func(i int, parts ...string) {
		base()
		for _, p := range parts {
			b = append(b, p...)
		}
		ends[i] = len(b)
	}
	key(0, "version")
	key(1, "facts")
	key(2, "replicas")
	base()
	b = strconv.AppendInt(append(b, "spend:d:"...), unixMilli(r.SpendDay)/1000, 10)
	ends[3] = len(b)
	base()
	b = strconv.AppendInt(append(b, "spend:m:"...), unixMilli(r.SpendMonth)/1000, 10)
	ends[4] = len(b)
	models := [2]*fleet.LeaseRequest{r, r.Next}
	la.n = leaseProjectKeys
	for _, m := range models {
		if m == nil {
			continue
		}
		i := la.n
		key(i, "m:", m.Model, ":win")
		base()
		b = append(append(append(b, "m:"...), m.Model...), ":rpd:"...)
		b = strconv.AppendInt(b, unixMilli(m.DayEnd)/1000, 10)
		ends[i+1] = len(b)
		key(i+2, "m:", m.Model, ":probe:", m.Endpoint)
		key(i+3, "m:", m.Model, ":health")
		key(i+4, "m:", m.Model, ":lat")
		la.n += leaseModelKeys
	}
	keysEnd := len(b)
	num := func(v int64) { b = binary.BigEndian.AppendUint64(b, uint64(v)) }
	num(max(r.ReplicaTTL.Milliseconds(), 0))
	num(int64(r.Version))
	num(r.Spent)
	num(unixMilli(r.SpendDay))
	num(unixMilli(r.SpendMonth))
	num(max(r.Reserve, 0))
	num(max(r.DayBudget, 0))
	num(max(r.MonthBudget, 0))
	for _, m := range models {
		if m == nil {
			continue
		}
		for _, v := range [...]int{m.Requests, m.Tokens, m.Debt, m.RPM, m.TPM, m.RPD} {
			num(int64(max(v, 0)))
		}
		num(unixMilli(m.DayEnd))
		num(ceilMillis(m.Probe))
		num(int64(max(m.Failures, 0)))
		num(unixMilli(m.Answered))
		num(int64(max(m.Alone, 0)))
		num(int64(max(m.Unused, 0)))
		num(int64(max(m.UnusedTokens, 0)))
		num(int64(max(m.Draws, 0)))
		num(unixMilli(m.FailedSince))
		num(unixMilli(m.DrawsUntil))
		num(unixMilli(m.Awaiting))
	}
	b = append(b, r.Replica...)
	packedEnd := len(b)
	b = append(b, flag(r.Latencies), flag(r.Latency != nil))
	for _, c := range r.Latency {
		b = strconv.AppendInt(append(strconv.AppendInt(append(strconv.AppendInt(b, int64(c.Class), 10), ','), int64(c.Bucket), 10), ','), c.N, 10)
		b = append(b, ';')
	}
	la.buf = b
	text := string(b)
	start := 0
	for i := range la.n {
		la.keys[i], start = text[start:ends[i]], ends[i]
	}
	la.packed, la.record = text[keysEnd:packedEnd], text[packedEnd:]
	for i := range la.n {
		la.args[leaseHead+i] = &la.keys[i]
	}
	la.args[leaseHead+la.n] = &la.packed
	la.args[leaseHead+la.n+1] = &la.record
	la.args[0], la.args[1], la.args[2] = "evalsha", &leaseHash, &leaseKeyCounts[(la.n-leaseProjectKeys)/leaseModelKeys-1]
}

// flag returns '1' for true, '0' for false.
func flag(v bool) byte {
	if v {
		return '1'
	}
	return '0'
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

// leaseReply reads leaseLua's answer, the space-separated fields first.
type leaseReply struct {
	rest string
	err  bool
}

// field returns the next field ("" for "-").
func (p *leaseReply) field() string {
	f, rest, ok := strings.Cut(p.rest, " ")
	if !ok {
		p.err = true
	}
	p.rest = rest
	if f == "-" {
		return ""
	}
	return f
}

// int returns the next field as an integer.
func (p *leaseReply) int() int64 {
	v, err := strconv.ParseInt(p.field(), 10, 64)
	if err != nil {
		p.err = true
	}
	return v
}

// name returns the next field, one of the names the script answers (a
// dimension, a budget's window), as a constant: the reply is not kept.
func (p *leaseReply) name() string {
	f := p.field()
	for _, n := range [...]string{"", "rpm", "tpm", "rpd", "probe", "day", "month"} {
		if f == n {
			return n
		}
	}
	p.err = true
	return ""
}

// model reads a model's granted, retry after, dimension into l.
func (p *leaseReply) model(l *fleet.Lease) {
	l.Requests = int(p.int())
	l.RetryAfter = time.Duration(p.int()) * time.Microsecond
	l.Dimension = p.name()
}

// health reads a model's failures, draws, latest answer and the others'
// awaiting into l.
func (p *leaseReply) health(l *fleet.Lease) {
	l.Failures = int(p.int())
	l.Draws = int(p.int())
	if answered := p.int(); answered > 0 {
		l.Answered = time.UnixMilli(answered)
	}
	if awaiting := p.int(); awaiting > 0 {
		l.Awaiting = time.UnixMilli(awaiting)
	}
}

// latency reads the other replicas' records of the model's answer times:
// "-" when not asked (nil), else "=" and "class,bucket,n;" for each.
func (p *leaseReply) latency() []fleet.LatencyCount {
	f := p.field()
	rest, asked := strings.CutPrefix(f, "=")
	if !asked {
		p.err = p.err || f != "" // "-"
		return nil
	}
	out := make([]fleet.LatencyCount, 0, strings.Count(rest, ";"))
	for c := range strings.SplitSeq(rest, ";") {
		if c == "" {
			continue
		}
		parts := strings.Split(c, ",")
		if len(parts) != 3 {
			p.err = true
			return nil
		}
		class, err1 := strconv.Atoi(parts[0])
		bucket, err2 := strconv.Atoi(parts[1])
		n, err3 := strconv.ParseInt(parts[2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			p.err = true
			return nil
		}
		out = append(out, fleet.LatencyCount{Class: class, Bucket: bucket, N: n})
	}
	return out
}

// parseLease reads leaseLua's answer, with Next's when next.
func parseLease(reply string, next bool) (fleet.Lease, error) {
	p := leaseReply{rest: reply}
	var l fleet.Lease
	p.model(&l)
	l.Replicas = int(p.int())
	v, err := strconv.ParseUint(p.field(), 10, 64)
	p.err = p.err || err != nil
	l.Version = v
	hasFacts := p.int()
	p.health(&l)
	l.DaySpent, l.MonthSpent = p.int(), p.int()
	l.BudgetRefused = p.name()
	if next {
		l.Next = &fleet.Lease{}
		p.model(l.Next)
		p.health(l.Next)
	}
	l.Latency = p.latency()
	if p.err {
		return fleet.Lease{}, errors.New("redisstore: lease: unexpected answer from the script: check that the server runs Redis 7 or Valkey")
	}
	if hasFacts == 0 {
		return l, nil
	}
	l.Facts = make([]fleet.Fact, 0, strings.Count(p.rest, "\n"))
	for raw := range strings.SplitSeq(strings.TrimPrefix(p.rest, "\n"), "\n") {
		if raw == "" {
			continue
		}
		var w wireFact
		if err := json.Unmarshal([]byte(raw), &w); err != nil {
			return fleet.Lease{}, fmt.Errorf("redisstore: lease: unexpected fact from the script: %w", err)
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

// Subscribe implements fleet.Subscriber on Redis pub/sub, as
// SubscribeFacts.
func (s *Store) Subscribe(project string, changed func()) (stop func()) {
	return s.SubscribeFacts(project, func(fleet.Fact, uint64, uint64) { changed() })
}

// SubscribeFacts implements fleet.FactSubscriber on Redis pub/sub: Publish
// tells the channel prefix:{project}:changed the change ("from to fact"),
// and a goroutine of the subscription reads it and calls changed, one
// message at a time, in the order Redis ran the publishes (a message it
// cannot read, from a publisher of another format, is told with to 0).
// Subscribe returns at once: the goroutine subscribes, each try bounded by
// the Store's warm-up bound (WithWarmUp), and tries again after a pause
// (doubling from 100 ms to 5 s) until Redis answers or stop is called;
// go-redis re-subscribes after a lost connection. What was published
// meanwhile is missed (the Client then reads it at its next round trip).
// stop ends the subscription and waits for its goroutine. A Store made
// without a client never calls changed.
func (s *Store) SubscribeFacts(project string, changed func(f fleet.Fact, from, to uint64)) (stop func()) {
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
			case msg, ok := <-ch:
				if !ok {
					return
				}
				changed(parseChange(msg.Payload))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// parseChange reads a change told on a project's channel ("from to
// fact"); to is 0 when it cannot.
func parseChange(payload string) (f fleet.Fact, from, to uint64) {
	versions, raw, _ := strings.Cut(payload, " {")
	fromS, toS, ok := strings.Cut(versions, " ")
	var w wireFact
	if !ok || json.Unmarshal([]byte("{"+raw), &w) != nil {
		return fleet.Fact{}, 0, 0
	}
	from, errFrom := strconv.ParseUint(fromS, 10, 64)
	to, errTo := strconv.ParseUint(toS, 10, 64)
	if errFrom != nil || errTo != nil {
		return fleet.Fact{}, 0, 0
	}
	return w.fact(), from, to
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
	Outage    bool           `json:"o,omitempty"`
}

func wireOf(f fleet.Fact) wireFact {
	return wireFact{
		Kind: f.Kind, Model: f.Model, Endpoint: f.Endpoint,
		At: unixMillis(f.At), Until: unixMillis(f.Until),
		Reason: f.Reason, Dimension: f.Dimension, Limit: f.Limit, Outage: f.Outage,
	}
}

func (w wireFact) fact() fleet.Fact {
	return fleet.Fact{
		Kind: w.Kind, Model: w.Model, Endpoint: w.Endpoint,
		At: fromMillis(w.At), Until: fromMillis(w.Until),
		Reason: w.Reason, Dimension: w.Dimension, Limit: w.Limit, Outage: w.Outage,
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
