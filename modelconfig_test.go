package geminiguard_test

import (
	"fmt"
	"math"
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

// TestModelConfigThatMakesAMalformedRequestIsThatModelsFailure: an
// adjustment that sets NaN is validated as the caller's config is: nothing
// is sent to its model, whose skip names the override and the field, and
// the cascade goes on to the next model, unary and streamed. When it was the
// only model, the call fails with that error.
func TestModelConfigThatMakesAMalformedRequestIsThatModelsFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		nan := func(cfg *genai.GenerateContentConfig) { cfg.Temperature = genai.Ptr(float32(math.NaN())) }
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithModelConfig(pro, nan))

		for _, stream := range []bool{false, true} {
			var rec geminiguard.CallRecord
			ctx := geminiguard.WithCallRecord(t.Context(), &rec)
			if stream {
				for _, err := range c.GenerateContentStream(ctx, "", genai.Text("Say hi"), nil) {
					require.NoError(t, err)
				}
			} else {
				_, err := c.GenerateContent(ctx, "", genai.Text("Say hi"), nil)
				require.NoError(t, err, "the next model's config is fine")
			}
			assert.Equal(t, flash, rec.Model, "stream %v", stream)
			require.Len(t, rec.Attempts, 2)
			skip := rec.Attempts[0]
			assert.True(t, skip.Skipped, "nothing was sent to %s", pro)
			assert.Equal(t, pro, skip.Model)
			require.Error(t, skip.Err)
			assert.Contains(t, skip.Err.Error(), fmt.Sprintf("WithModelConfig(%q)", pro), "names the override")
			assert.Contains(t, skip.Err.Error(), "Temperature is NaN", "names the field")
			v := geminiguard.Classify(skip.Err)
			assert.Equal(t, geminiguard.ClassBadRequest, v.Class)
			assert.Equal(t, geminiguard.ScopeModel, v.Scope, "the model's failure, not the call's")
		}
		assert.Zero(t, srv.Total(pro), "no request is sent with a malformed adjustment")
		assert.Equal(t, 2, srv.Total(flash))
		ms := c.Stats().Models
		assert.Zero(t, ms[0].Requests)
		assert.Equal(t, geminiguard.StateClosed, ms[0].State, "no breaker counts it")

		only := newClient(t, srv, nil, geminiguard.WithCascade(pro), geminiguard.WithModelConfig(pro, nan))
		_, err := only.GenerateContent(t.Context(), "", genai.Text("Say hi"), nil)
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		assert.Contains(t, err.Error(), "Temperature is NaN")
		assert.Zero(t, srv.Total(pro))
	})
}
