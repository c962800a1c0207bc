package geminiguard_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// Per-model configuration (issue 14): a config valid only for the primary
// is adjusted for the next model, on a copy.

func TestModelConfigDropsThePrimarysCacheForTheSecondary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: flash, Latency: time.Second})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithModelConfig(flash, func(cfg *genai.GenerateContentConfig) {
				cfg.CachedContent = "" // made for pro: flash would refuse it
				cfg.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: genai.Ptr[int32](0)}
			}))
		user := &genai.GenerateContentConfig{CachedContent: "cachedContents/pro-cache", Temperature: genai.Ptr[float32](0.2)}

		for _, stream := range []bool{false, true} {
			var rec geminiguard.CallRecord
			ctx := geminiguard.WithCallRecord(t.Context(), &rec)
			if stream {
				srv.Script(pro, geminitest.Step{Fault: geminitest.Overloaded})
				for _, err := range c.GenerateContentStream(ctx, "", genai.Text("Say hi"), user) {
					require.NoError(t, err)
				}
			} else {
				_, err := c.GenerateContent(ctx, "", genai.Text("Say hi"), user)
				require.NoError(t, err)
			}
			assert.Equal(t, flash, rec.Model)
		}

		for i, r := range srv.Requests(pro) {
			assert.Contains(t, string(r.Body), `"cachedContent":"cachedContents/pro-cache"`, "pro's request %d keeps the caller's config", i)
		}
		for i, r := range srv.Requests(flash) {
			body := string(r.Body)
			assert.False(t, strings.Contains(body, "cachedContent"), "flash's request %d has no cache: %s", i, body)
			assert.Contains(t, body, `"thinkingBudget":0`)
			assert.Contains(t, body, `"temperature":0.2`, "the rest of the caller's config is kept")
		}
		require.Len(t, srv.Requests(flash), 2)
		assert.Equal(t, "cachedContents/pro-cache", user.CachedContent, "the caller's config is untouched")
		assert.Nil(t, user.ThinkingConfig)
	})
}
