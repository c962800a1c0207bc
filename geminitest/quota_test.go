package geminitest_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/internal/pacific"
)

func generate(t *testing.T, c *genai.Client, model string) error {
	t.Helper()
	_, err := c.Models.GenerateContent(t.Context(), model, prompt("hi"), nil)
	return err
}

func TestQuotaPerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Quota: geminitest.Quota{RPM: 5}})
		c := newClient(t, fake.ClientConfig())

		for i := range 5 {
			require.NoError(t, generate(t, c, flash), "request %d", i)
			time.Sleep(time.Second)
		}
		// 5 requests at t=0..4s: the 6th, at t=5s, waits for the first to leave
		// the window at t=60s.
		e := apiError(t, generate(t, c, flash))
		assert.Equal(t, 429, e.Code)
		assert.Equal(t, "RESOURCE_EXHAUSTED", e.Status)
		assert.Equal(t, map[string]string{"GenerateRequestsPerMinutePerProjectPerModel-FreeTier": "5"}, violations(t, e))
		assert.Equal(t, "55s", retryDelay(e))
		assert.Contains(t, e.Message, "Please retry in 55s.")
		assert.Contains(t, e.Message, "limit: 5, model: gemini-2.5-flash")

		time.Sleep(54*time.Second + 500*time.Millisecond)
		e = apiError(t, generate(t, c, flash))
		assert.Equal(t, "0s", retryDelay(e), "whole seconds, truncated")
		assert.Contains(t, e.Message, "Please retry in 500ms.")

		time.Sleep(500 * time.Millisecond)
		require.NoError(t, generate(t, c, flash))
		// Rejected requests are counted as hits but not charged to the quota.
		assert.Equal(t, 8, fake.Hits(flash, geminitest.VerbGenerate))
	})
}

func TestQuotaTokensPerMinutePaidTier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Quota: geminitest.Quota{TPM: 10, PaidTier: true}})
		c := newClient(t, fake.ClientConfig())
		long := prompt("0123456789012345678901234567") // 28 chars: 7 tokens

		_, err := c.Models.GenerateContent(t.Context(), flash, long, nil)
		require.NoError(t, err)
		time.Sleep(10 * time.Second)
		_, err = c.Models.GenerateContent(t.Context(), flash, long, nil)
		e := apiError(t, err)
		assert.Equal(t, map[string]string{"GenerateContentPaidTierInputTokensPerModelPerMinute": "10"}, violations(t, e))
		assert.Equal(t, "50s", retryDelay(e))
		assert.Contains(t, e.Message, "generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count")

		time.Sleep(50 * time.Second)
		_, err = c.Models.GenerateContent(t.Context(), flash, long, nil)
		require.NoError(t, err)
	})
}

func TestQuotaPerDay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Quota: geminitest.Quota{RPD: 3}})
		c := newClient(t, fake.ClientConfig())

		for range 3 {
			require.NoError(t, generate(t, c, flash))
		}
		e := apiError(t, generate(t, c, flash))
		assert.Equal(t, 429, e.Code)
		assert.Equal(t, map[string]string{"GenerateRequestsPerDayPerProjectPerModel-FreeTier": "3"}, violations(t, e))
		// The bubble starts at 2000-01-01 00:00 UTC, 16:00 the day before in
		// Los Angeles: the day's quota frees at 08:00 UTC.
		midnight := pacific.NextMidnight(time.Now())
		require.Equal(t, 8*time.Hour, time.Until(midnight))
		assert.Equal(t, "28800s", retryDelay(e))
		assert.Contains(t, e.Message, "Please retry in 8h0m0s.")

		time.Sleep(2 * time.Hour)
		e = apiError(t, generate(t, c, flash))
		assert.Contains(t, violations(t, e), "GenerateRequestsPerDayPerProjectPerModel-FreeTier")

		time.Sleep(time.Until(midnight))
		require.NoError(t, generate(t, c, flash))
	})
}
