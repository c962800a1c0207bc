// Command fleet runs a fleet of geminiguard Clients — replicas of one
// service, all on one Google project — against the embedded fake Gemini,
// whose primary model enforces the project's per-minute quota across all of
// them, and prints what sharing the replicas' state changes. A burst of
// calls at twice the primary's quota, spread over the replicas, is played
// twice on fresh fakes:
//
//   - alone: each replica is given the project's limits and trusts its own
//     count, so together they overshoot the quota and collect the server's
//     429s;
//   - fleet: the replicas share their state (WithSharedState) on Redis, so
//     the limits are counted fleet-wide: no 429s, and the secondary takes
//     what the primary's quota cannot.
//
// When the redis-server binary is on PATH the program starts one itself (a
// free loopback port, a temporary directory, no persistence; stopped at
// exit, Ctrl-C included), and then plays a third part: Redis killed in the
// middle of the burst and restarted, the calls still answered while the
// replicas carry on alone, counted as uncoordinated, until they rejoin
// (not with -redis: the program kills only a Redis it started).
// Without redis-server it says so and shares the state in memory
// (fleet.NewMemoryState). The burst takes a few seconds of real time:
// Redis's clock is real.
//
//	go run ./examples/fleet                          # 10 replicas, a redis-server of its own
//	go run ./examples/fleet -replicas 20
//	go run ./examples/fleet -redis 127.0.0.1:6379    # an existing Redis
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/redisserver"
	"github.com/geminiguard/geminiguard/redisstore"
)

// The cascade every replica is given.
const (
	primary   = "gemini-2.5-flash"
	secondary = "gemini-2.5-flash-lite"
)

func main() {
	replicas := flag.Int("replicas", 10, "the number of replicas (Clients) sharing the project")
	addr := flag.String("redis", "", "use the Redis at this host:port rather than starting a redis-server")
	flag.Parse()
	log.SetOutput(io.Discard) // the genai SDK logs through the standard logger; the table says it all

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *replicas, *addr); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		stop()
		os.Exit(1)
	}
}

// run plays the burst alone and as a fleet with n replicas, sharing the
// state on the Redis at addr, on a redis-server it starts when addr is
// empty, or in memory when there is none, and prints the table.
func run(ctx context.Context, out io.Writer, n int, addr string) error {
	if n < 1 {
		return fmt.Errorf("-replicas %d: use at least 1", n)
	}
	d := defaultBurst
	d.replicas = n
	redis.SetLogger(quiet{}) // go-redis logs the dials refused while Redis is killed; the table counts them
	var srv *redisserver.Process
	shared := func() fleet.SharedState { return fleet.NewMemoryState() }
	where := "in memory (fleet.NewMemoryState)"
	if addr == "" {
		var (
			stop func()
			err  error
		)
		srv, stop, err = startRedis(ctx)
		switch {
		case errors.Is(err, exec.ErrNotFound):
			fmt.Fprintln(out, "redis-server not found on PATH (apt-get install -y redis-server, or -redis host:port): sharing the state in memory with fleet.NewMemoryState() instead")
		case err != nil:
			return err
		default:
			defer stop()
			addr = srv.Addr()
		}
	}
	if addr != "" {
		rdb := redis.NewClient(&redis.Options{Addr: addr})
		defer rdb.Close()
		if err := rdb.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis at %s: %w", addr, err)
		}
		// A prefix of each part's own, so that the counts of an earlier
		// part, or an earlier run on the same Redis, do not count against it.
		shared = func() fleet.SharedState {
			return redisstore.New(rdb, redisstore.WithPrefix("geminiguard-fleetdemo-"+rand.Text()[:8]))
		}
		where = "on Redis at " + addr
		if srv != nil {
			where = "on a redis-server of its own at " + addr
		}
	}
	fmt.Fprintf(out, "%d replicas of one project; primary %s: quota %d RPM, WithLimits RPM %d (80%% headroom: %d); secondary %s\n",
		d.replicas, primary, d.rpm, d.rpm, d.rpm*8/10, secondary)
	fmt.Fprintf(out, "%d calls in %v (%.0f× the primary's per-minute quota), state shared %s\n\n",
		d.calls, d.spread, float64(d.calls)/float64(d.rpm), where)

	var results []result
	for _, a := range []struct {
		name   string
		shared fleet.SharedState
		outage *redisserver.Process
	}{
		{"alone", nil, nil},
		{"fleet", shared(), nil},
		{"fleet, Redis killed", shared(), srv},
	} {
		if a.name == "fleet, Redis killed" && srv == nil {
			continue
		}
		res, err := d.play(ctx, a.name, a.shared, a.outage)
		if err != nil {
			return err
		}
		results = append(results, res)
	}
	if err := writeTable(out, results); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nalone: each replica keeps under the project's limits by its own count: together they overshoot the quota.\n"+
		"fleet: the limits are the fleet's, counted in the shared state; the secondary takes what the quota cannot.\n")
	if len(results) == 3 {
		r := results[2]
		fmt.Fprintf(out, "Redis killed: after call %d, restarted (empty: no persistence) after call %d, then one more call per replica\n"+
			"once their breakers on Redis let them try it again (and more to any still alone). Every call was answered: the replicas went on alone (each for\n"+
			"2s after three failed round trips) on 1/%d of the limits, not knowing what the fleet had spent this minute\n"+
			"(%d requests uncoordinated, %d server 429s); %d of %d replicas were back on Redis at the end.\n",
			d.calls/8, d.calls/2, d.replicas, r.uncoordinated, r.serverLimited, r.connected, d.replicas)
	}
	return nil
}

// burst is the load a part plays: calls prompts spread evenly over spread,
// sent round-robin by replicas Clients, the primary's quota rpm.
type burst struct {
	replicas, rpm, calls int
	spread               time.Duration
}

// defaultBurst is twice a 60 RPM quota in three seconds.
var defaultBurst = burst{replicas: 10, rpm: 60, calls: 120, spread: 3 * time.Second}

// rejoinAfter is how long after Redis's restart every replica's breaker on
// Redis (open for 2s after three failures) lets it try Redis again.
const rejoinAfter = 2500 * time.Millisecond

// rejoinWithin bounds how long the replicas still alone after rejoinAfter
// are given calls, one every rejoinAfter/10, until they are back on Redis.
const rejoinWithin = 10 * time.Second

// result is one part's figures, added up over its replicas.
type result struct {
	name           string
	calls, ok      int
	serverLimited  int64 // the server's 429s, as the Clients' Stats count them
	primaryAnswers int   // calls the primary answered
	roundTrips     int64 // calls to the shared state
	uncoordinated  int64 // requests let through while the shared state was unreachable
	replicasSeen   int   // the most live replicas any Client saw
	connected      int   // Clients whose shared state answered their last call to it
}

// play sends b's calls through b.replicas Clients on a fresh fake, sharing
// shared (none when nil). With outage, Redis is killed after an eighth of
// the calls and restarted after half of them (long enough for every
// replica to see three round trips fail and go on alone); once the burst is over
// and the replicas' breakers on Redis (open for 2s after three failures) have
// let them try Redis again, each replica sends one more call, which
// rejoins the fleet.
func (b burst) play(ctx context.Context, name string, shared fleet.SharedState, outage *redisserver.Process) (result, error) {
	srv := geminitest.New(
		geminitest.Model{Name: primary, Latency: 80 * time.Millisecond, Quota: geminitest.Quota{RPM: b.rpm}},
		geminitest.Model{Name: secondary, Latency: 40 * time.Millisecond},
	)
	opts := []geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key),
		geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(srv.HTTPClient()),
		geminiguard.WithStartupCheck(false),
		geminiguard.WithCascade(primary, secondary),
		geminiguard.WithLimits(primary, geminiguard.Limits{RPM: b.rpm}), // the project's limits, not a share
	}
	if shared != nil {
		opts = append(opts, geminiguard.WithSharedState(shared))
	}
	fleet := make([]*geminiguard.Client, 0, b.replicas)
	defer func() {
		for _, c := range fleet {
			c.Close()
		}
	}()
	for range b.replicas {
		c, err := geminiguard.New(ctx, opts...)
		if err != nil {
			return result{}, err
		}
		fleet = append(fleet, c)
	}

	var wg sync.WaitGroup
	var ok, fromPrimary atomic.Int64
	tick := time.NewTicker(b.spread / time.Duration(b.calls))
	defer tick.Stop()
	sent := 0
	var restarted time.Time
	ask := func(c *geminiguard.Client) {
		var rec geminiguard.CallRecord
		if _, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text("Say hi"), nil); err != nil {
			return
		}
		ok.Add(1)
		if rec.Model == primary {
			fromPrimary.Add(1)
		}
	}
send:
	for ; sent < b.calls; sent++ {
		if sent > 0 {
			select {
			case <-ctx.Done():
				break send
			case <-tick.C:
			}
		}
		if outage != nil {
			switch sent {
			case b.calls / 8:
				outage.Kill()
			case b.calls / 2:
				if err := outage.Restart(ctx); err != nil {
					return result{}, err
				}
				restarted = time.Now()
			}
		}
		c := fleet[sent%len(fleet)]
		wg.Go(func() { ask(c) })
	}
	wg.Wait()
	if outage != nil && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(restarted.Add(rejoinAfter))):
		}
		for _, c := range fleet {
			wg.Go(func() { ask(c) })
			sent++
		}
		wg.Wait()
		// A replica whose breaker on Redis opened late, or whose first try
		// found Redis still cold, tries again with its next calls.
		deadline := time.Now().Add(rejoinWithin)
		for _, c := range fleet {
			for !c.Stats().Fleet.Connected && time.Now().Before(deadline) && ctx.Err() == nil {
				time.Sleep(rejoinAfter / 10)
				ask(c)
				sent++
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}

	res := result{name: name, calls: sent, ok: int(ok.Load()), primaryAnswers: int(fromPrimary.Load())}
	for _, c := range fleet {
		st := c.Stats()
		for _, m := range st.Models {
			res.serverLimited += m.Failures[geminiguard.ClassRateLimit]
		}
		res.roundTrips += st.Fleet.RoundTrips
		res.uncoordinated += st.Fleet.Uncoordinated
		res.replicasSeen = max(res.replicasSeen, st.Fleet.Replicas)
		if st.Fleet.Connected {
			res.connected++
		}
	}
	return res, nil
}

// writeTable prints one row per part.
func writeTable(w io.Writer, results []result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "part\tcalls\tsuccess\tserver 429s\tprimary answers\tround trips/call\tuncoordinated\treplicas seen\t")
	for _, r := range results {
		seen := "-"
		if r.replicasSeen > 0 {
			seen = fmt.Sprint(r.replicasSeen)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f%%\t%d\t%d\t%.2f\t%d\t%s\t\n", r.name, r.calls, 100*float64(r.ok)/float64(max(r.calls, 1)),
			r.serverLimited, r.primaryAnswers, float64(r.roundTrips)/float64(max(r.calls, 1)), r.uncoordinated, seen)
	}
	return tw.Flush()
}

// quiet is a go-redis logger that prints nothing.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}
