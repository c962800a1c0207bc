package geminiguard_test

import (
	"context"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// allocated returns the bytes f allocated on the heap (all goroutines).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A quotaValue the server states is learned within a bound: a huge
// one neither panics nor allocates in proportion to it.
func TestHugeQuotaValueIsLearnedWithinBounds(t *testing.T) {
	for _, fault := range []geminitest.Fault{geminitest.RateLimitMinute, geminitest.RateLimitTokens} {
		for _, value := range []string{"2147483647", "9223372036854775807", "99999999999999999999999"} {
			t.Run(fault.String()+"/"+value, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					srv := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{
						{Fault: fault, QuotaValue: value, RetryDelay: time.Second},
					}})
					c := newClient(t, srv, nil, geminiguard.WithCascade(flash))

					var resp *genai.GenerateContentResponse
					var err error
					bytes := allocated(func() {
						for range 3 {
							resp, _, err = ask(t.Context(), c, "")
							require.NoError(t, err)
						}
					})

					assert.Equal(t, srv.FullText(flash), resp.Text())
					assert.Equal(t, 4, srv.Hits(flash, geminitest.VerbGenerate), "the 429, its retry, and two more calls")
					assert.Less(t, bytes, uint64(8<<20), "memory does not grow with the stated limit")
				})
			})
		}
	}
}

// Any configured limit works, math.MaxInt included.
func TestMaxIntLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		huge := geminiguard.Limits{RPM: math.MaxInt, TPM: math.MaxInt, RPD: math.MaxInt}
		for _, headroom := range []float64{0.8, 1} {
			c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithLimits(flash, huge), geminiguard.WithHeadroom(headroom))
			start := time.Now()
			for range 50 {
				resp, _, err := ask(t.Context(), c, "")
				require.NoError(t, err)
				assert.Equal(t, srv.FullText(flash), resp.Text())
			}
			assert.Zero(t, time.Since(start), "no local wait")
		}
		assert.Equal(t, 100, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

// prompt returns a prompt of about tokens input tokens (4 bytes each).
func prompt(tokens int) []*genai.Content {
	return genai.Text(strings.Repeat("abcd", tokens))
}

// A request whose limiter wait is cancelled gives its tokens and
// its place in line back: the next small request does not wait for it.
func TestCancelledWaitGivesBackTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithHeadroom(1),
			geminiguard.WithLimits(flash, geminiguard.Limits{TPM: 10_000}), geminiguard.WithTimeouts(time.Minute, 2*time.Minute))

		_, err := c.GenerateContent(t.Context(), "", prompt(9_000), nil)
		require.NoError(t, err)

		// 9,000 more tokens: about 48 s until the bucket holds them.
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		start := time.Now()
		_, err = c.GenerateContent(ctx, "", prompt(9_000), nil)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, time.Second, time.Since(start), "the wait ends with the caller's context")

		start = time.Now()
		resp, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, srv.FullText(flash), resp.Text())
		assert.Zero(t, time.Since(start), "a 2-token request does not wait behind the cancelled one")
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

// When every caller queued behind a TPM limit gives up at once,
// whatever the order their waits end in, the limiter is as they found it.
func TestEveryCancelledWaitGivesBackTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithHeadroom(1),
			geminiguard.WithLimits(flash, geminiguard.Limits{TPM: 10_000}), geminiguard.WithTimeouts(time.Minute, 10*time.Minute))
		_, err := c.GenerateContent(t.Context(), "", prompt(9_000), nil)
		require.NoError(t, err)

		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel)
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = c.GenerateContent(ctx, "", prompt(9_000), nil)
			})
			synctest.Wait() // queued in this order
		}
		wg.Wait()
		for _, err := range errs {
			require.ErrorIs(t, err, context.Canceled)
		}

		start := time.Now()
		_, err = c.GenerateContent(t.Context(), "", prompt(1_000), nil)
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "1,000 tokens fit: none of the cancelled waits holds them back")
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate))
	})
}

// A model skipped because its limiter would make the call wait
// gives its tokens back: the next small request is answered by it at once.
func TestSkippedModelGivesBackTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: lite})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, lite), geminiguard.WithHeadroom(1),
			geminiguard.WithLimits(flash, geminiguard.Limits{TPM: 10_000}))

		_, err := c.GenerateContent(t.Context(), "", prompt(9_000), nil)
		require.NoError(t, err)
		var rec geminiguard.CallRecord
		_, err = c.GenerateContent(geminiguard.WithCallRecord(t.Context(), &rec), "", prompt(9_000), nil)
		require.NoError(t, err)
		assert.Equal(t, lite, rec.Model, "flash would make the call wait: lite answers")

		start := time.Now()
		_, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model, "flash has room for 2 tokens: the skipped request took none")
		assert.Zero(t, time.Since(start))
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate))
		assert.Equal(t, 1, srv.Hits(lite, geminitest.VerbGenerate))
	})
}

// A call refused by a local limit never matches a context error,
// and says when the model can take it.
func TestLocalRefusalIsNotAContextError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithHeadroom(1),
			geminiguard.WithLimits(flash, geminiguard.Limits{RPD: 1}))
		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err)

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.Error(t, err)
		assert.Zero(t, time.Since(start), "refused at once: the day's requests are spent")
		assert.ErrorIs(t, err, geminiguard.ErrQuotaExhausted)
		assert.ErrorIs(t, err, geminiguard.ErrRateLimited)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, context.Canceled)
		var rle *geminiguard.RateLimitError
		require.ErrorAs(t, err, &rle)
		assert.Equal(t, "RPD", rle.Dimension)
		midnight := time.Date(2000, time.January, 1, 8, 0, 0, 0, time.UTC) // synctest starts at 2000-01-01 00:00 UTC: 16:00 PST
		require.True(t, start.Before(midnight), "the bubble's clock: %v", start)
		assert.Equal(t, midnight, rle.Until.UTC(), "the next midnight America/Los_Angeles")
		v := geminiguard.Classify(err)
		assert.Equal(t, geminiguard.ClassLocalRateLimit, v.Class)
		assert.Equal(t, midnight.Sub(start), v.RetryAfter, "the wait until the Pacific midnight")
		require.Len(t, rec.Attempts, 1)
		assert.True(t, rec.Attempts[0].Skipped)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate), "nothing was sent")
	})
}
