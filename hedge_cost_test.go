package geminiguard_test

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// A hedged attempt answered before its hedge delay (nearly all of them)
// allocates what an unhedged attempt does: the original request is sent on
// the call's own goroutine, its delay is an entry in the Client's hedge
// clock (no timer of its own), and nothing else starts until it passes.
func TestHedgedAttemptAnsweredBeforeItsDelayAllocatesAsAnUnhedgedOne(t *testing.T) {
	if raceBuild() {
		t.Skip("allocation counts vary under -race (sync.Pool drops items at random); run without -race")
	}
	allocs := func(opts ...geminiguard.Option) float64 {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithCascade(pro, flash)}, opts...)...)
		call := func() {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			require.Equal(t, pro, rec.Model)
		}
		for range 50 { // pro's answer times are learned: every attempt is then hedged after latency.CutFloor
			call()
		}
		n := testing.AllocsPerRun(200, call)
		assert.Equal(t, 251, srv.Total(pro), "one request a call: no hedge was sent")
		return n
	}
	off, on := allocs(geminiguard.WithHedging(geminiguard.HedgePolicy{})), allocs()
	t.Logf("allocations per call: hedging off %.0f, on (the default) %.0f", off, on)
	assert.Equal(t, off, on, "a hedged attempt answered before its delay allocates what an unhedged one does")
}

// raceBuild reports whether the test binary was built with -race.
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}
