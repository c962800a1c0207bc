package scenario

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The targets of issue 11 that fleet mode misses today, with their cause
// (see knownMisses: a run that meets one fails, to take it off).
func init() {
	knownMisses["fleet429: fleet mode makes at most one round trip per call"] = "every call makes one round trip (each replica calls 0.19 times a second, " +
		"so a lease is one request; a call the saturated primary refuses gets the secondary's lease in the same round trip), and New's warm-up round " +
		"trip, one per replica, comes on top (\"call round trips/call\" leaves it out). Below 1 needs leases that outlive a second, which a saturated quota wastes"
	knownMisses["fleet429: 200 replicas make ≤ 1.1 round trips per call"] = "every call makes one round trip (a call the saturated primary refuses gets the " +
		"secondary's lease in the same round trip), and New's warm-up round trip, one per replica, comes on top: 200 of them over 1,125 calls is 0.18 a " +
		"call (\"call round trips/call\" leaves them out). Below 1.1 with the warm-ups counted needs leases that outlive a call at one call a minute per replica, which a saturated quota wastes"
}

// logReplicas logs, for each replica of arm, the upstream requests its
// calls sent, their 429s, and the replica's own count of them, with the
// arm's figures.
func logReplicas(t *testing.T, res *Result, arm string) {
	t.Helper()
	run := res.Arm(arm)
	sent, got429 := make([]int, fleetReplicas), make([]int, fleetReplicas)
	for _, u := range run.Upstream {
		if u.Call < 0 {
			continue
		}
		sent[u.Call%fleetReplicas]++
		if u.Status == 429 {
			got429[u.Call%fleetReplicas]++
		}
	}
	var b strings.Builder
	for i := range fleetReplicas {
		fmt.Fprintf(&b, " r%d:%d/%d", i, sent[i], got429[i])
	}
	t.Logf("%s: requests/429s per replica:%s; figures: round trips %.0f, store failures %.0f, uncoordinated %.0f",
		arm, b.String(), run.Figures[FigRoundTrips], run.Figures[FigStoreFailures], run.Figures[FigUncoordinated])
}

// requestsIn returns r's upstream requests sent in [from, to).
func requestsIn(r *ArmRun, from, to time.Duration) []Upstream {
	var out []Upstream
	for _, u := range r.Upstream {
		if u.At >= from && u.At < to {
			out = append(out, u)
		}
	}
	return out
}

func TestFleet429(t *testing.T) {
	t.Parallel()
	sc := Fleet429()
	res, sums := play(t, sc)
	each, div, fleet, o := sums["project limit each"], sums[fmt.Sprintf("limit ÷ %d", fleetReplicas)], sums["fleet"], sums["oracle"]
	for _, arm := range []string{"project limit each", "fleet"} {
		logReplicas(t, res, arm)
	}

	// The arms are what they claim: replicas on their own overshoot the
	// project's quota; divided, they stay under it and waste some; the
	// oracle never exceeds it and uses the primary to the full headroom.
	assert.Positive(t, each.Got429, "replicas each given the project's limit overshoot it")
	assert.Zero(t, div.Got429, "replicas given the limit ÷ 20 stay under it")
	assert.Less(t, div.Measure(sc, "primary use"), 90.0, "dividing the limit wastes quota")
	assert.Zero(t, o.Got429)
	assert.Equal(t, 1.0, o.Success)
	assert.InDelta(t, 100, o.Measure(sc, "primary use"), 1, "the oracle uses the primary up to its quota at headroom")

	use := fleet.Measure(sc, "primary use")
	check(t, "fleet429: fleet mode gets no server 429", fleet.Got429 == 0, "%d 429s", fleet.Got429)
	check(t, "fleet429: fleet mode answers every call", fleet.Answered == fleet.Calls, "%s", pct(fleet.Success))
	check(t, "fleet429: fleet mode uses ≥ 95% of the primary's quota at headroom", use >= 95, "%.1f%%", use)
	rt := fleet.Measure(sc, "round trips/call")
	check(t, "fleet429: fleet mode makes at most one round trip per call", rt <= 1, "%.3f round trips per call", rt)
}

func TestFleetOutage(t *testing.T) {
	t.Parallel()
	sc := FleetOutage()
	res, sums := play(t, sc)
	alone, fleet, one := fmt.Sprintf("%d alone", fleetReplicas), fmt.Sprintf("%d fleet", fleetReplicas), "one process"
	for _, arm := range []string{alone, fleet} {
		logReplicas(t, res, arm)
	}
	for _, arm := range []string{one, alone, fleet} {
		run := res.Arm(arm)
		t.Logf("%s: %d requests in the outage's first 15s, %d after", arm,
			len(requestsIn(run, sc.Window[0], sc.Window[0]+15*time.Second)), len(requestsIn(run, sc.Window[0]+15*time.Second, sc.Window[1])))
	}
	got, base, solo := sums[fleet].Measure(sc, "outage req"), sums[one].Measure(sc, "outage req"), sums[alone].Measure(sc, "outage req")
	assert.Greater(t, solo, 3*base, "replicas on their own each learn the outage")
	check(t, "fleetOutage: a fleet sends ≤ 1.5× one process's requests during the outage", got <= 1.5*base,
		"%.0f requests, one process %.0f, %d alone %.0f", got, base, fleetReplicas, solo)
}

// fleetScaleSizes are the fleet sizes the scale tests play (issue 20).
var fleetScaleSizes = []int{20, 50, 100, 200}

// TestFleetScale plays fleetOutage and fleet429 for fleets of 20, 50, 100
// and 200 replicas: a fleet's requests during the outage against one
// process's, and round trips to the shared state per call:
//
//	GEMINIGUARD_SCALE=1 go test -run TestFleetScale -v ./examples/internal/scenario/
func TestFleetScale(t *testing.T) {
	if os.Getenv("GEMINIGUARD_SCALE") == "" {
		t.Skip("200 Clients per arm (minutes under -race on a busy machine): set GEMINIGUARD_SCALE=1 to play it")
	}
	t.Run("fleetOutage", func(t *testing.T) {
		sc := FleetOutageScale(fleetScaleSizes...)
		_, sums := play(t, sc)
		base := sums["one process"].Measure(sc, "outage req")
		for _, n := range fleetScaleSizes {
			s := sums[fmt.Sprintf("%d fleet", n)]
			got := s.Measure(sc, "outage req")
			t.Logf("%d replicas: %.0f requests in the outage (%.2f× one process's %.0f), %.3f round trips per call",
				n, got, got/base, base, s.Measure(sc, "round trips/call"))
			if n >= 100 {
				check(t, fmt.Sprintf("fleetOutage: %d replicas send ≤ 1.5× one process's requests during the outage", n), got <= 1.5*base,
					"%.0f requests, %.2f×", got, got/base)
			}
		}
	})
	t.Run("fleet429", func(t *testing.T) {
		sc := Fleet429Scale(fleetScaleSizes...)
		_, sums := play(t, sc)
		for _, n := range fleetScaleSizes {
			s := sums[fmt.Sprintf("%d fleet", n)]
			rt := s.Measure(sc, "round trips/call")
			t.Logf("%d replicas: %d server 429s, %.1f%% primary use, %.3f round trips per call (%.3f without New's warm-ups)",
				n, s.Got429, s.Measure(sc, "primary use"), rt, s.Measure(sc, "call round trips/call"))
			if n == 200 {
				check(t, "fleet429: 200 replicas make ≤ 1.1 round trips per call", rt <= 1.1, "%.3f round trips per call", rt)
			}
		}
	})
}
