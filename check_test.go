package geminiguard_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/internal/fakegemini"
)

// TestDefect13CheckCascadeKeepsADailyQuotaCoolDown: CheckCascade lists a
// model whose daily quota is spent; the model stays out of rotation until
// its quota resets, and hears no new request.
func TestDefect13CheckCascadeKeepsADailyQuotaCoolDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakegemini.New(
			fakegemini.Model{Name: pro, Faults: []fakegemini.Chance{{Step: fakegemini.Step{Fault: fakegemini.DailyQuota}, P: 1}}},
			fakegemini.Model{Name: flash},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		require.Equal(t, flash, rec.Model)

		report, err := c.CheckCascade(t.Context())
		require.NoError(t, err)
		require.True(t, report.Models[0].Exists)

		_, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		assert.Equal(t, 1, srv.Total(pro), "no request to the exhausted primary after the check")
		require.NotEmpty(t, rec.Attempts)
		var cooling *geminiguard.CoolingError
		require.ErrorAs(t, rec.Attempts[0].Err, &cooling, "the primary is skipped as cooling down")
		assert.Equal(t, geminiguard.ClassDailyQuota, cooling.Reason)
		assert.ErrorIs(t, rec.Attempts[0].Err, geminiguard.ErrQuotaExhausted)
		assert.Equal(t, geminiguard.ClassDailyQuota, c.Stats().Models[0].CoolDownReason)
	})
}

// TestCheckCascadeEndsANotFoundCoolDown: a model that answered 404 cools down
// until a check lists it again, and is asked again after that check.
func TestCheckCascadeEndsANotFoundCoolDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := fakegemini.New(fakegemini.Model{Name: pro}, fakegemini.Model{Name: flash})
		srv.Script(pro, fakegemini.Step{Fault: fakegemini.NotFound})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		for range 2 {
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			require.Equal(t, flash, rec.Model)
		}
		require.Equal(t, 1, srv.Total(pro), "cooling after its 404")

		_, err := c.CheckCascade(t.Context())
		require.NoError(t, err)

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "listed again: back in rotation")
		assert.Zero(t, c.Stats().Models[0].CoolDownUntil)
	})
}
