package geminiguard_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestCancelledWaitRecordsNoUnsentAttempt: a caller who cancels during a
// backoff, a pause between rounds or a token wait gets a CallRecord whose
// requests (its attempts not skipped) are the requests Stats counts and the
// fake received, and whose last entry is the cancelled wait: skipped, with
// the caller's error and the time actually waited, not the planned delay.
func TestCancelledWaitRecordsNoUnsentAttempt(t *testing.T) {
	const tokenWaitCancel = 10 * time.Second
	for _, row := range []struct {
		name     string
		models   []geminitest.Model
		opts     []geminiguard.Option
		warmUp   bool          // one call first, which spends the RPM limit
		replica  bool          // the warm-up call on another Client made with the same options (with a shared state: another replica)
		cancelAt time.Duration // from the call's start; 0: halfway through the wait OnRetry announces
		requests int           // of the cancelled call
		waited   time.Duration // the cancelled entry's Delay
	}{
		{name: "backoff", models: []geminitest.Model{{Name: flash, Latency: 100 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.RateLimitMinute, RetryDelay: 20 * time.Second}}}},
			requests: 1, waited: 10 * time.Second},
		{name: "pause", models: []geminitest.Model{
			{Name: pro, Latency: 100 * time.Millisecond, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
			{Name: flash, Latency: 100 * time.Millisecond, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}}},
			opts:     []geminiguard.Option{geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: 10 * time.Second, MaxDelay: 20 * time.Second})},
			requests: 2},
		{name: "token wait", models: []geminitest.Model{{Name: flash, Latency: 100 * time.Millisecond}},
			opts:   []geminiguard.Option{geminiguard.WithLimits(flash, geminiguard.Limits{RPM: 1}), geminiguard.WithHeadroom(1)},
			warmUp: true, cancelAt: tokenWaitCancel, requests: 0, waited: tokenWaitCancel},
		{name: "fleet lease wait", models: []geminitest.Model{{Name: flash, Latency: 100 * time.Millisecond}},
			opts: []geminiguard.Option{geminiguard.WithLimits(flash, geminiguard.Limits{RPM: 1}), geminiguard.WithHeadroom(1),
				geminiguard.WithSharedState(fleet.NewMemoryState())},
			warmUp: true, replica: true, cancelAt: tokenWaitCancel, requests: 0, waited: tokenWaitCancel},
	} {
		t.Run(row.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(row.models...)
				var cascade []string
				for _, m := range row.models {
					cascade = append(cascade, m.Name)
				}
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				var announced time.Duration // the wait OnRetry announced
				hooks := geminiguard.Hooks{OnRetry: func(_ context.Context, ev geminiguard.RetryEvent) {
					if announced == 0 {
						announced = ev.Delay
						time.AfterFunc(ev.Delay/2, cancel)
					}
				}}
				opts := append([]geminiguard.Option{geminiguard.WithCascade(cascade...), geminiguard.WithHooks(hooks)}, row.opts...)
				c := newClient(t, srv, nil, opts...)
				defer c.Close()
				if row.warmUp {
					warm := c
					if row.replica {
						warm = newClient(t, srv, nil, opts...)
						defer warm.Close()
					}
					_, _, err := ask(t.Context(), warm, "")
					require.NoError(t, err)
				}
				requests, hits := statsRequests(c), fakeHits(srv, cascade)
				if row.cancelAt > 0 {
					time.AfterFunc(row.cancelAt, cancel)
				}

				start := time.Now()
				var rec geminiguard.CallRecord
				_, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text("Say hi"), nil)

				require.ErrorIs(t, err, context.Canceled)
				sent := 0
				for _, a := range rec.Attempts {
					if !a.Skipped {
						sent++
					}
				}
				assert.Equal(t, row.requests, sent, "requests in the CallRecord: %+v", rec.Attempts)
				assert.Equal(t, row.requests, int(statsRequests(c)-requests), "requests in Stats")
				assert.Equal(t, row.requests, fakeHits(srv, cascade)-hits, "requests the fake received")
				require.NotEmpty(t, rec.Attempts)
				last := rec.Attempts[len(rec.Attempts)-1]
				assert.True(t, last.Skipped, "the cancelled wait sent nothing")
				assert.ErrorIs(t, last.Err, context.Canceled)
				waited := row.waited
				if row.cancelAt == 0 {
					require.Positive(t, announced, "OnRetry announced the wait")
					waited = announced / 2
				}
				assert.Equal(t, waited, last.Delay, "the time waited, not the wait planned")
				assert.Equal(t, time.Since(start), rec.Latency)
			})
		})
	}
}

// statsRequests returns the upstream requests Stats counts, all models.
func statsRequests(c *geminiguard.Client) int64 {
	var n int64
	for _, m := range c.Stats().Models {
		n += m.Requests
	}
	return n
}

// fakeHits returns the generate and stream requests srv received for models.
func fakeHits(srv *geminitest.Server, models []string) int {
	n := 0
	for _, m := range models {
		n += srv.Total(m)
	}
	return n
}

// TestReturnedAttemptsOutliveTheCall: a call's *CascadeError and CallRecord
// hold its attempts as they were when it returned, whatever calls come
// after it (a unary call's state is reused by the next call).
func TestReturnedAttemptsOutliveTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithStartupCheck(false),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
		_, rec, err := ask(t.Context(), c, "")
		var cerr *geminiguard.CascadeError
		require.ErrorAs(t, err, &cerr)
		want := []string{pro, flash}
		models := func(as []geminiguard.Attempt) (names []string) {
			for _, a := range as {
				names = append(names, a.Model)
			}
			return names
		}
		require.Equal(t, want, models(cerr.Attempts))
		require.Equal(t, want, models(rec.Attempts))
		srv.Script(pro) // pro answers from now on
		for range 3 {
			_, later, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			require.Equal(t, []string{pro}, models(later.Attempts))
		}
		assert.Equal(t, want, models(cerr.Attempts), "the first call's error is unchanged")
		assert.Equal(t, want, models(rec.Attempts), "the first call's record is unchanged")
		assert.Error(t, cerr.Attempts[0].Err, "the first call's errors are kept")
	})
}
