package geminiguard_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestServerStatedCoolDownIsCapped: a per-minute 429 that states a
// delay of a century cools its model down for the documented maximum (5
// minutes), not for the century: the model is asked again after that.
func TestServerStatedCoolDownIsCapped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.Script(pro, geminitest.Step{Fault: geminitest.RateLimitMinute, RetryDelay: 100 * 365 * 24 * time.Hour})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		start := time.Now()

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model, "the primary's 429 moved the call on")
		st := c.Stats().Models[0]
		assert.Equal(t, geminiguard.ClassRateLimit, st.CoolDownReason)
		assert.False(t, st.CoolDownUntil.After(start.Add(5*time.Minute)), "cooling until %v: longer than the 5-minute maximum", st.CoolDownUntil)

		time.Sleep(5 * time.Minute)
		_, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "the primary is back after the maximum cool-down")
		assert.Equal(t, 2, srv.Total(pro))
	})
}
