package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/geminiguard/geminiguard/fleet"
)

func TestMain(m *testing.M) {
	os.Unsetenv("GEMINI_API_KEY")
	os.Unsetenv("GOOGLE_API_KEY")
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

// TestFleetInMemory plays the burst alone and as a fleet sharing
// NewMemoryState, in fake time: alone, the replicas overshoot the project's
// quota and get 429s; as a fleet, none, and the primary serves what its
// quota allows at the headroom.
func TestFleetInMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := defaultBurst
		alone, err := d.play(t.Context(), "alone", nil, nil)
		require.NoError(t, err)
		fleet, err := d.play(t.Context(), "fleet", fleet.NewMemoryState(), nil)
		require.NoError(t, err)

		assert.Equal(t, d.calls, alone.ok, "calls answered alone")
		assert.Greater(t, alone.serverLimited, int64(0), "server 429s alone")
		assert.Equal(t, d.calls, fleet.ok, "calls answered by the fleet")
		assert.Zero(t, fleet.serverLimited, "server 429s in the fleet")
		assert.Equal(t, d.rpm*8/10, fleet.primaryAnswers, "the primary serves its quota at the headroom")
		assert.Equal(t, d.replicas, fleet.replicasSeen)
		assert.Zero(t, fleet.uncoordinated)
		assert.LessOrEqual(t, float64(fleet.roundTrips), float64(d.calls), "at most one round trip per call")

		var out bytes.Buffer
		require.NoError(t, writeTable(&out, []result{alone, fleet}))
		assert.Regexp(t, `(?m)^ +fleet +120 +100% +0 +48 `, out.String())
	})
}

// TestFleetOnRedis runs the demo as `go run ./examples/fleet` does, on a
// redis-server it starts itself, in real time (Redis's clock is real): about
// ten seconds. It checks that the fleet gets no server 429s, and that
// with Redis killed and restarted every call is answered and every replica
// rejoins.
func TestFleetOnRedis(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); errors.Is(err, exec.ErrNotFound) {
		if os.Getenv("GEMINIGUARD_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server not found and GEMINIGUARD_REQUIRE_REDIS=1: apt-get install -y redis-server")
		}
		t.Skip("redis-server not found: apt-get install -y redis-server to run this test (GEMINIGUARD_REQUIRE_REDIS=1 makes this a failure)")
	}
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, 10, ""))
	t.Log("\n" + out.String())

	assert.Contains(t, out.String(), "state shared on a redis-server of its own at 127.0.0.1:")
	assert.Regexp(t, `(?m)^ +alone +120 +100% +[1-9]\d* `, out.String(), "server 429s alone")
	assert.Regexp(t, `(?m)^ +fleet +120 +100% +0 +4[0-8] +\S+ +0 +10 *$`, out.String(), "no server 429s in the fleet")
	assert.Regexp(t, `(?m)^ +fleet, Redis killed +1[3-9]\d +100% +\d+ +\d+ +\S+ +[1-9]\d* `, out.String(),
		"every call answered while Redis is down, some uncoordinated")
	assert.Contains(t, out.String(), "10 of 10 replicas were back on Redis at the end", "the replicas rejoin")
}
