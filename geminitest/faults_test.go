package geminitest_test

import (
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

// errorCases are the faults answered with a non-2xx status, and what the SDK
// must report for each (research/gemini-wire.md §5.1).
var errorCases = []struct {
	fault   geminitest.Fault
	code    int
	status  string
	message string   // a substring of the message
	details []string // @type of each detail, in order
	check   func(t *testing.T, e genai.APIError)
}{
	{
		fault: geminitest.RateLimitMinute, code: 429, status: "RESOURCE_EXHAUSTED",
		message: "Please retry in 7s.",
		details: []string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, map[string]string{"GenerateRequestsPerMinutePerProjectPerModel-FreeTier": "10"}, violations(t, e))
			assert.Equal(t, "7s", retryDelay(e))
		},
	},
	{
		fault: geminitest.RateLimitTokens, code: 429, status: "RESOURCE_EXHAUSTED",
		message: "generate_content_free_tier_input_token_count, limit: 250000",
		details: []string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, map[string]string{"GenerateContentInputTokensPerModelPerMinute-FreeTier": "250000"}, violations(t, e))
			assert.Equal(t, "7s", retryDelay(e))
		},
	},
	{
		fault: geminitest.DailyQuota, code: 429, status: "RESOURCE_EXHAUSTED",
		message: "limit: 250, model: gemini-2.5-flash",
		details: []string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, map[string]string{"GenerateRequestsPerDayPerProjectPerModel-FreeTier": "250"}, violations(t, e))
			assert.Equal(t, "43s", retryDelay(e))
		},
	},
	{
		fault: geminitest.DailyAndMinute, code: 429, status: "RESOURCE_EXHAUSTED",
		message: "You exceeded your current quota",
		details: []string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, map[string]string{
				"GenerateRequestsPerDayPerProjectPerModel-FreeTier":    "250",
				"GenerateRequestsPerMinutePerProjectPerModel-FreeTier": "10",
			}, violations(t, e))
		},
	},
	{
		fault: geminitest.LimitZero, code: 429, status: "RESOURCE_EXHAUSTED",
		message: "limit: 0",
		details: []string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
		check: func(t *testing.T, e genai.APIError) {
			for id, v := range violations(t, e) {
				assert.Equal(t, "0", v, id)
			}
		},
	},
	{fault: geminitest.SpendCap, code: 429, status: "RESOURCE_EXHAUSTED", message: "exceeded its monthly spending cap"},
	{fault: geminitest.PrepayDepleted, code: 429, status: "RESOURCE_EXHAUSTED", message: "prepayment credits are depleted"},
	{fault: geminitest.ResourceExhausted, code: 429, status: "RESOURCE_EXHAUSTED", message: "Resource has been exhausted (e.g. check quota)."},
	{
		fault: geminitest.RateLimitLegacy, code: 429, status: "RESOURCE_EXHAUSTED",
		message: "Quota exceeded for quota metric 'Generate Content API requests per minute'",
		details: []string{"google.rpc.ErrorInfo", "google.rpc.Help"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, "RATE_LIMIT_EXCEEDED", e.Details[0]["reason"])
			meta := e.Details[0]["metadata"].(map[string]any)
			assert.Equal(t, "GenerateContentRequestsPerMinutePerProjectPerRegion", meta["quota_limit"])
			assert.Equal(t, "10", meta["quota_limit_value"])
		},
	},
	{fault: geminitest.Internal, code: 500, status: "INTERNAL", message: "An internal error has occurred."},
	{fault: geminitest.Overloaded, code: 503, status: "UNAVAILABLE", message: "The model is overloaded. Please try again later."},
	{fault: geminitest.DeadlineExpired503, code: 503, status: "UNAVAILABLE", message: "Deadline expired before operation could complete."},
	{fault: geminitest.GatewayTimeout, code: 504, status: "DEADLINE_EXCEEDED", message: "Deadline expired"},
	{fault: geminitest.InvalidArgument, code: 400, status: "INVALID_ARGUMENT", message: "Request contains an invalid argument."},
	{
		fault: geminitest.APIKeyInvalid, code: 400, status: "INVALID_ARGUMENT", message: "API key not valid.",
		details: []string{"google.rpc.ErrorInfo", "google.rpc.LocalizedMessage"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, "API_KEY_INVALID", e.Details[0]["reason"])
		},
	},
	{fault: geminitest.FailedPrecondition, code: 400, status: "FAILED_PRECONDITION", message: "User location is not supported for the API use."},
	{fault: geminitest.LeakedKey, code: 403, status: "PERMISSION_DENIED", message: "Your API key was reported as leaked."},
	{fault: geminitest.Unregistered, code: 403, status: "PERMISSION_DENIED", message: "Method doesn't allow unregistered callers"},
	{
		fault: geminitest.ServiceDisabled, code: 403, status: "PERMISSION_DENIED", message: "has not been used in project",
		details: []string{"google.rpc.ErrorInfo", "google.rpc.LocalizedMessage", "google.rpc.Help"},
		check: func(t *testing.T, e genai.APIError) {
			assert.Equal(t, "SERVICE_DISABLED", e.Details[0]["reason"])
			meta := e.Details[0]["metadata"].(map[string]any)
			assert.Equal(t, "generativelanguage.googleapis.com", meta["service"])
			assert.Contains(t, meta["consumer"], "projects/")
		},
	},
	{fault: geminitest.NotFound, code: 404, status: "NOT_FOUND", message: "models/gemini-2.5-flash is not found for API version v1beta"},
	{
		fault: geminitest.NonJSONBody, code: 503, status: "503 Service Unavailable",
		message: "upstream connect error or disconnect/reset before headers. reset reason: overflow",
	},
	{
		fault: geminitest.JSONArrayBody, code: 503, status: "503 Service Unavailable", message: `[{"error":{"code":503`,
	},
}

func TestErrorFaults(t *testing.T) {
	for _, w := range []wire{inMemory, http1} {
		for _, tc := range errorCases {
			t.Run(w.name+"/"+tc.fault.String(), func(t *testing.T) {
				fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: tc.fault}, {Fault: tc.fault}}})
				c := w.client(t, fake)

				_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
				check := func(err error) {
					e := apiError(t, err)
					assert.Equal(t, tc.code, e.Code)
					assert.Equal(t, tc.status, e.Status)
					assert.Contains(t, e.Message, tc.message)
					assert.Equal(t, tc.details, detailTypes(e))
					if tc.check != nil {
						tc.check(t, e)
					}
				}
				check(err)

				// The same error arrives before a stream starts, as its only item.
				s := stream(t.Context(), c, flash, nil)
				assert.Empty(t, s.chunks)
				check(s.err)
				assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbGenerate))
				assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbStream))
			})
		}
	}
}

func TestStepQuotaValue(t *testing.T) {
	huge := "99999999999999999999999"
	fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{
		{Fault: geminitest.RateLimitTokens, QuotaValue: huge},
		{Fault: geminitest.DailyAndMinute, QuotaValue: "2147483647"},
	}})
	c := inMemory.client(t, fake)

	_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
	e := apiError(t, err)
	assert.Equal(t, map[string]string{"GenerateContentInputTokensPerModelPerMinute-FreeTier": huge}, violations(t, e))
	assert.Contains(t, e.Message, "limit: "+huge+", model: "+flash)

	_, err = c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
	assert.Equal(t, map[string]string{
		"GenerateRequestsPerDayPerProjectPerModel-FreeTier":    "2147483647",
		"GenerateRequestsPerMinutePerProjectPerModel-FreeTier": "2147483647",
	}, violations(t, apiError(t, err)))
}

func TestDropBeforeHeaders(t *testing.T) {
	for _, w := range []wire{inMemory, http1} {
		t.Run(w.name, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{
				{Fault: geminitest.DropBeforeHeaders}, {Fault: geminitest.DropBeforeHeaders},
			}})
			c := w.client(t, fake)

			_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
			require.Error(t, err)
			assert.ErrorIs(t, err, io.EOF)
			var urlErr *url.Error
			assert.ErrorAs(t, err, &urlErr)
			assert.False(t, errors.As(err, &genai.APIError{}))

			s := stream(t.Context(), c, flash, nil)
			assert.Empty(t, s.chunks)
			assert.ErrorIs(t, s.err, io.EOF)
		})
	}
}

func TestQuietFaults(t *testing.T) {
	cases := []struct {
		fault geminitest.Fault
		check func(t *testing.T, r *genai.GenerateContentResponse)
	}{
		{geminitest.PromptBlocked, func(t *testing.T, r *genai.GenerateContentResponse) {
			assert.Empty(t, r.Candidates)
			require.NotNil(t, r.PromptFeedback)
			assert.Equal(t, genai.BlockedReasonSafety, r.PromptFeedback.BlockReason)
		}},
		{geminitest.FinishSafety, func(t *testing.T, r *genai.GenerateContentResponse) {
			require.Len(t, r.Candidates, 1)
			assert.Equal(t, genai.FinishReasonSafety, r.Candidates[0].FinishReason)
			assert.Nil(t, r.Candidates[0].Content)
			blocked := false
			for _, sr := range r.Candidates[0].SafetyRatings {
				blocked = blocked || sr.Blocked
			}
			assert.True(t, blocked)
		}},
		{geminitest.FinishRecitation, finishOnly(genai.FinishReasonRecitation)},
		{geminitest.FinishOther, finishOnly(genai.FinishReasonOther)},
		{geminitest.FinishMalformedFunctionCall, finishOnly(genai.FinishReasonMalformedFunctionCall)},
		{geminitest.MaxTokensEmpty, func(t *testing.T, r *genai.GenerateContentResponse) {
			require.Len(t, r.Candidates, 1)
			assert.Equal(t, genai.FinishReasonMaxTokens, r.Candidates[0].FinishReason)
			require.NotNil(t, r.Candidates[0].Content)
			assert.Empty(t, r.Candidates[0].Content.Parts)
			assert.Positive(t, r.UsageMetadata.ThoughtsTokenCount)
		}},
		{geminitest.StopNoParts, func(t *testing.T, r *genai.GenerateContentResponse) {
			require.Len(t, r.Candidates, 1)
			assert.Equal(t, genai.FinishReasonStop, r.Candidates[0].FinishReason)
			require.NotNil(t, r.Candidates[0].Content)
			assert.Empty(t, r.Candidates[0].Content.Parts)
		}},
		{geminitest.NoCandidates, func(t *testing.T, r *genai.GenerateContentResponse) {
			assert.Empty(t, r.Candidates)
			assert.Nil(t, r.PromptFeedback)
			require.NotNil(t, r.UsageMetadata)
		}},
	}
	for _, w := range []wire{inMemory, http1} {
		for _, tc := range cases {
			t.Run(w.name+"/"+tc.fault.String(), func(t *testing.T) {
				fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: tc.fault}, {Fault: tc.fault}}})
				c := w.client(t, fake)

				r, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
				require.NoError(t, err)
				assert.Empty(t, r.Text())
				assert.Equal(t, flash, r.ModelVersion)
				tc.check(t, r)

				// On the stream endpoint the same body is the stream's only event.
				s := stream(t.Context(), c, flash, nil)
				require.NoError(t, s.err)
				require.Len(t, s.chunks, 1)
				tc.check(t, s.chunks[0])
			})
		}
	}
}

func finishOnly(reason genai.FinishReason) func(t *testing.T, r *genai.GenerateContentResponse) {
	return func(t *testing.T, r *genai.GenerateContentResponse) {
		require.Len(t, r.Candidates, 1)
		assert.Equal(t, reason, r.Candidates[0].FinishReason)
		assert.Nil(t, r.Candidates[0].Content)
	}
}

// Stream faults on the unary endpoint answer like OK.
func TestStreamFaultsOnUnaryAreOK(t *testing.T) {
	faults := []geminitest.Fault{
		geminitest.StreamCutBetween, geminitest.StreamCutInside, geminitest.StreamErrorInside,
		geminitest.StreamNoFinish, geminitest.StreamStallBetween,
	}
	for _, f := range faults {
		t.Run(f.String(), func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: f}}})
			c := inMemory.client(t, fake)
			r, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
			require.NoError(t, err)
			assert.Equal(t, fake.FullText(flash), r.Text())
			assert.Equal(t, genai.FinishReasonStop, r.Candidates[0].FinishReason)
		})
	}
}

func TestFaultString(t *testing.T) {
	assert.Equal(t, "OK", geminitest.OK.String())
	assert.Equal(t, "RateLimitMinute", geminitest.RateLimitMinute.String())
	assert.Equal(t, "StreamStallBetween", geminitest.StreamStallBetween.String())
	assert.Equal(t, "PrepayDepleted", geminitest.PrepayDepleted.String())
	assert.Equal(t, "Fault(999)", geminitest.Fault(999).String())
	for f := geminitest.OK; f <= geminitest.StreamStallBetween; f++ {
		assert.False(t, strings.HasPrefix(f.String(), "Fault("), "fault %d has no name", int(f))
	}
}
