package geminiguard_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestCheckCascadeKeepsADailyQuotaCoolDown: CheckCascade lists a
// model whose daily quota is spent; the model stays out of rotation until
// its quota resets, and hears no new request.
func TestCheckCascadeKeepsADailyQuotaCoolDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.DailyQuota}, P: 1}}},
			geminitest.Model{Name: flash},
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
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.Script(pro, geminitest.Step{Fault: geminitest.NotFound})
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

// TestNewRidesOutAFlakyStartupCheck: the startup check's listing
// answers 503 once. New logs a warning and returns a Client that answers at
// once; the check runs again 1s later, passes, and stops.
func TestNewRidesOutAFlakyStartupCheck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		srv.ScriptList(geminitest.Step{Fault: geminitest.Overloaded})
		var logs logBuffer
		c, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
			geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade(pro, flash),
			geminiguard.WithLogger(slog.New(slog.NewJSONHandler(&logs, nil))))
		require.NoError(t, err, "one 503 on models.list must not fail New")
		defer c.Close()
		assert.Equal(t, 1, srv.Hits("", geminitest.VerbList))
		assert.Contains(t, logs.String(), `"level":"WARN","msg":"geminiguard: cascade check failed; New goes on and retries it in the background"`)

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model)

		time.Sleep(time.Second - time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, 1, srv.Hits("", geminitest.VerbList), "no re-check before 1s")
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		assert.Equal(t, 2, srv.Hits("", geminitest.VerbList), "the re-check after 1s")
		assert.Contains(t, logs.String(), "geminiguard: cascade check passed")

		time.Sleep(time.Hour)
		synctest.Wait()
		assert.Equal(t, 2, srv.Hits("", geminitest.VerbList), "a check that passed is not repeated")
		requireNoKey(t, logs.String())
	})
}

// TestStartupRecheckBacksOffAndStops: while models.list keeps failing, the
// background check runs after 1s, 2s, 4s, ... (at most 1 minute apart), 10
// times at most; Close or the end of New's context stops it at once.
func TestStartupRecheckBacksOffAndStops(t *testing.T) {
	failing := func(n int) []geminitest.Step {
		steps := make([]geminitest.Step, n)
		for i := range steps {
			steps[i] = geminitest.Step{Fault: geminitest.Overloaded}
		}
		return steps
	}
	lists := func(srv *geminitest.Server) int { return srv.Hits("", geminitest.VerbList) }

	t.Run("gives up after 10 re-checks", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: pro})
			srv.ScriptList(failing(100)...)
			var logs logBuffer
			c := newClient(t, srv, &logs, geminiguard.WithCascade(pro))
			defer c.Close()
			start := time.Now()
			for i, at := range []time.Duration{1, 3, 7, 15, 31, 63, 123, 183, 243, 303} { // seconds since New
				time.Sleep(time.Until(start.Add(at*time.Second - time.Nanosecond)))
				synctest.Wait()
				require.Equal(t, i+1, lists(srv), "before re-check %d", i+1)
				time.Sleep(time.Nanosecond)
				synctest.Wait()
				require.Equal(t, i+2, lists(srv), "re-check %d at %ds", i+1, at)
			}
			time.Sleep(time.Hour)
			synctest.Wait()
			assert.Equal(t, 11, lists(srv), "New's check and 10 re-checks")
			assert.Contains(t, logs.String(), "geminiguard: cascade check failed; giving up")
		})
	})
	t.Run("Close stops it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: pro})
			srv.ScriptList(failing(100)...)
			c := newClient(t, srv, nil, geminiguard.WithCascade(pro))
			time.Sleep(3 * time.Second)
			synctest.Wait()
			require.Equal(t, 3, lists(srv))

			var wg sync.WaitGroup
			for range 3 {
				wg.Go(func() { assert.NoError(t, c.Close()) })
			}
			wg.Wait()
			time.Sleep(time.Hour)
			synctest.Wait()
			assert.Equal(t, 3, lists(srv), "no re-check after Close")
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err, "the Client works after Close")
			assert.Equal(t, pro, rec.Model)
		})
	})
	t.Run("the end of New's context stops it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: pro})
			srv.ScriptList(failing(100)...)
			ctx, cancel := context.WithCancel(t.Context())
			c, err := geminiguard.New(ctx, geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
				geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade(pro))
			require.NoError(t, err)
			cancel()
			time.Sleep(time.Hour)
			synctest.Wait()
			assert.Equal(t, 1, lists(srv), "no re-check after the context ended")
			assert.NoError(t, c.Close())
		})
	})
}

// TestStartupRecheckFindsAMissingModel: the re-check that follows a flaky
// startup finds a cascade model the API does not list: it logs it and leaves
// the model out, as New's own check would have refused it.
func TestStartupRecheckFindsAMissingModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const retired = "gemini-1.5-pro"
		srv := geminitest.New(geminitest.Model{Name: retired, Unlisted: true}, geminitest.Model{Name: flash})
		srv.ScriptList(geminitest.Step{Fault: geminitest.DropBeforeHeaders})
		var logs logBuffer
		c := newClient(t, srv, &logs, geminiguard.WithCascade(retired, flash))
		defer c.Close()
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Contains(t, logs.String(), `"level":"ERROR","msg":"geminiguard: cascade check: a cascade model does not exist`)
		assert.Contains(t, logs.String(), retired)
		assert.Equal(t, geminiguard.ClassNotFound, c.Stats().Models[0].CoolDownReason)

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		assert.Zero(t, srv.Total(retired), "the missing model hears nothing")
	})
}

// TestNewFailsOnAnAnswerNotAnOutage: a startup listing that the API refuses
// for good (an invalid key, an API not enabled) fails New as before.
func TestNewFailsOnAnAnswerNotAnOutage(t *testing.T) {
	for _, f := range []geminitest.Fault{geminitest.APIKeyInvalid, geminitest.ServiceDisabled} {
		t.Run(f.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: pro})
				srv.ScriptList(geminitest.Step{Fault: f})
				_, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
					geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade(pro))
				require.Error(t, err)
				assert.Equal(t, geminiguard.ScopeProject, geminiguard.Classify(err).Scope)
				time.Sleep(time.Hour)
				synctest.Wait()
				assert.Equal(t, 1, srv.Hits("", geminitest.VerbList), "no re-check")
			})
		})
	}
}
