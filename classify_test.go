package geminiguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"
)

// sdkError returns the error google.golang.org/genai v1.77.0 returns for a
// non-2xx answer with this status and body (api_client.go, newAPIError): the
// body's {"error":{...}} object verbatim when it has one, otherwise the HTTP
// status line as Status and the raw body as Message.
func sdkError(status int, body string) genai.APIError {
	line := fmt.Sprintf("%d %s", status, http.StatusText(status))
	if body == "" {
		return genai.APIError{Code: status, Status: line}
	}
	var env struct {
		Error *genai.APIError `json:"error,omitempty"`
	}
	if err := json.Unmarshal([]byte(body), &env); err == nil && env.Error != nil {
		return *env.Error
	}
	return genai.APIError{Code: status, Status: line, Message: body}
}

// The verdicts the table expects, spelled out here rather than taken from
// base() so that the table states the policy independently.
var (
	wantRateLimit      = Verdict{Class: ClassRateLimit, Retryable: true, Scope: ScopeModel, cool: coolRetryAfter}
	wantDailyQuota     = Verdict{Class: ClassDailyQuota, Scope: ScopeModel, cool: coolUntilMidnight}
	wantNoQuota        = Verdict{Class: ClassNoQuota, Scope: ScopeModel, cool: coolUntilRecheck}
	wantSpendCap       = Verdict{Class: ClassSpendCap, Scope: ScopeProject, cool: coolProject}
	wantOverloaded     = Verdict{Class: ClassOverloaded, Retryable: true, Scope: ScopeModel, counts: true}
	wantServerError    = Verdict{Class: ClassServerError, Retryable: true, Scope: ScopeModel, counts: true}
	wantTimeout        = Verdict{Class: ClassTimeout, Retryable: true, Scope: ScopeModel, counts: true}
	wantNetwork        = Verdict{Class: ClassNetwork, Retryable: true, Scope: ScopeModel, counts: true}
	wantStreamCut      = Verdict{Class: ClassStreamCut, Retryable: true, Scope: ScopeModel, counts: true}
	wantUnknown        = Verdict{Class: ClassUnknown, Retryable: true, Scope: ScopeModel, counts: true}
	wantCanceled       = Verdict{Class: ClassCanceled, Scope: ScopeRequest}
	wantBadRequest     = Verdict{Class: ClassBadRequest, Scope: ScopeRequest}
	wantAuthProject    = Verdict{Class: ClassAuth, Scope: ScopeProject, cool: coolProject}
	wantAuthModel      = Verdict{Class: ClassAuth, Scope: ScopeModel, cool: coolUntilRecheck}
	wantDisabled       = Verdict{Class: ClassServiceDisabled, Scope: ScopeProject, cool: coolProject}
	wantLocation       = Verdict{Class: ClassLocation, Scope: ScopeProject, cool: coolProject}
	wantNotFound       = Verdict{Class: ClassNotFound, Scope: ScopeModel, cool: coolUntilRecheck}
	wantBlocked        = Verdict{Class: ClassBlocked, Scope: ScopeRequest}
	wantEmptyRetry     = Verdict{Class: ClassEmpty, Retryable: true, Scope: ScopeModel}
	wantEmptyRequest   = Verdict{Class: ClassEmpty, Scope: ScopeRequest}
	wantCircuitOpen    = Verdict{Class: ClassCircuitOpen, Scope: ScopeModel}
	wantLocalRateLimit = Verdict{Class: ClassLocalRateLimit, Scope: ScopeModel}
)

// withQuota returns v with the server-stated delay and quota.
func withQuota(v Verdict, after time.Duration, quotaID string, limit int) Verdict {
	v.RetryAfter, v.quotaID, v.quotaLimit = after, quotaID, limit
	return v
}

// ruleless returns v without the name of the rule that decided it, for the
// tables that state the policy (TestClassifyRules pins the names).
func ruleless(v Verdict) Verdict {
	v.Rule = ""
	return v
}

// withDelay returns v with the server-stated delay.
func withDelay(v Verdict, d time.Duration) Verdict {
	v.RetryAfter = d
	return v
}

// wireCase is an HTTP answer of the Gemini API, as the SDK turns it into an
// error, and the verdict it must get.
type wireCase struct {
	name   string
	status int    // HTTP status of the answer
	body   string // the body, verbatim from the source
	// reach, when set, is how the SDK's error reaches Classify (inside a
	// stream, a cascade); nil: as the SDK returns it.
	reach func(error) error
	want  Verdict
}

// wireCases are real answers, each with the public URL where its shape was
// reported. Bodies are quoted from the source (project numbers and keys are
// the sources' own); a comment says where a source cut a body short.
var wireCases = []wireCase{
	// ---- Vertex AI (aiplatform.googleapis.com): no details ----
	{
		// https://github.com/google-gemini/gemini-cli/issues/14831 (the
		// shared-capacity 429; the REST body carries a legacy "errors" list)
		name: "Vertex AI resource exhausted", status: 429,
		body: `{"error":{"code":429,"message":"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.","errors":[{"message":"Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429 for more details.","domain":"global","reason":"rateLimitExceeded"}],"status":"RESOURCE_EXHAUSTED"}}`,
		want: wantRateLimit,
	},
	{
		// https://github.com/GoogleCloudPlatform/Open_Data_QnA/issues/61 (the
		// message; the status is its gRPC code, as the REST body states it)
		name: "Vertex AI per-minute project quota", status: 429,
		body: `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-pro. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantRateLimit,
	},
	{
		// https://github.com/langchain-ai/langchain-google/pull/283
		name: "Vertex AI per-minute project quota, MedLM", status: 429,
		body: `{"error":{"code":429,"message":"Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: MedLM-medium. Please submit a quota increase request. https://cloud.google.com/vertex-ai/docs/generative-ai/quotas-genai.","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantRateLimit,
	},
	{
		// https://github.com/googleapis/google-cloud-java/issues/11195
		name: "Vertex AI out of capacity", status: 429,
		body: `{"error":{"code":429,"message":"Unable to submit request because the service is temporarily out of capacity. Try again later.","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantRateLimit,
	},
	{
		// https://github.com/truefoundry/models/pull/946 (the message, inside a
		// gateway's body); https://github.com/genkit-ai/genkit/issues/4688
		name: "Vertex AI publisher model not found", status: 404,
		body: "{\"error\":{\"code\":404,\"message\":\"Publisher Model `projects/truefoundry-devtest/locations/global/publishers/google/models/gemma4` was not found or your project does not have access to it. Please ensure you are using a valid model version. For more information, see: https://cloud.google.com/vertex-ai/generative-ai/docs/learn/model-versions\",\"status\":\"NOT_FOUND\"}}",
		want: wantNotFound,
	},
	{
		// https://github.com/rpurinton/gemini-php/issues/4: the denial names
		// the model ("or it may not exist"), so it is the model's
		name: "Vertex AI permission denied on the model", status: 403,
		body: `{"error":{"code":403,"message":"Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/help-my-setup/locations/us-east4/publishers/google/models/gemini-pro' (or it may not exist).","status":"PERMISSION_DENIED"}}`,
		want: wantAuthModel,
	},
	// ---- 429: per-minute quotas ----
	{
		// https://github.com/gke-labs/gemini-for-kubernetes-development/issues/1215
		// RetryInfo "22s" truncates the message's "22.5s": the larger wins.
		name: "free tier RPM with RetryInfo", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. Please retry in 22.5s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"10"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"22s"}]}}`,
		want: withQuota(wantRateLimit, 22500*time.Millisecond, "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", 10),
	},
	{
		// https://github.com/Farrice/mes-knowledge-base/blob/HEAD/swarm_outputs/20260211_091747/agent_outputs/daniel-priestley.md
		name: "free tier RPM gemini-3-flash, nanosecond retry text", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 5, model: gemini-3-flash\nPlease retry in 58.217843437s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-3-flash","location":"global"},"quotaValue":"5"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"58s"}]}}`,
		want: withQuota(wantRateLimit, 58217843437*time.Nanosecond, "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", 5),
	},
	{
		// https://github.com/RooCodeInc/Roo-Code/issues/3883
		name: "free tier TPM", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"250000"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"26s"}]}}`,
		want: withQuota(wantRateLimit, 26*time.Second, "GenerateContentInputTokensPerModelPerMinute-FreeTier", 250000),
	},
	{
		// https://github.com/mscraftsman/generative-ai/issues/131 (quoted up to
		// the violation's location; no quotaValue)
		name: "paid tier TPM without quotaValue", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota. Please migrate to Gemini 2.5 Pro Preview (models/gemini-2.5-pro-preview-03-25) for higher quota limits. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_paid_tier_input_token_count","quotaId":"GenerateContentPaidTierInputTokensPerModelPerMinute","quotaDimensions":{"location":"global"}}]}]}}`,
		want: withQuota(wantRateLimit, 0, "GenerateContentPaidTierInputTokensPerModelPerMinute", 0),
	},
	{
		// https://github.com/google/generative-ai-docs/issues/236
		// The old generic 429: no details, no delay.
		name: "bare resource exhausted", status: 429,
		body: `{"error":{"code":429,"message":"Resource has been exhausted (e.g. check quota).","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantRateLimit,
	},
	{
		// https://github.com/googleapis/go-genai/blob/v1.77.0/api_client.go
		// (newAPIError returns the body's error object verbatim: a body
		// without "code" gives Code 0 even on HTTP 429.)
		name: "no code in body, status name only", status: 429,
		body: `{"error":{"message":"slow down","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantRateLimit,
	},

	// ---- 429: per-day quotas ----
	{
		// https://github.com/voideditor/void/issues/557
		name: "free tier RPD", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-2.0-pro-exp","location":"global"},"quotaValue":"25"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"5s"}]}}`,
		want: withQuota(wantDailyQuota, 5*time.Second, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 25),
	},
	{
		// https://oppl.ai/llms/gemini_complex_1/JE00B3XR4V72.json
		name: "free tier RPD gemini-2.5-flash", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"250"}]},{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"22s"}]}}`,
		want: withQuota(wantDailyQuota, 22*time.Second, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 250),
	},
	{
		// https://github.com/itcon-pty-au/stremio-ai-search/issues/170
		name: "free tier RPD flash-lite, limit in text too", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 20, model: gemini-2.5-flash-lite\nPlease retry in 51.606482386s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash-lite"},"quotaValue":"20"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"51s"}]}}`,
		want: withQuota(wantDailyQuota, 51606482386*time.Nanosecond, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 20),
	},
	{
		// https://github.com/diegosouzapw/OmniRoute/issues/9504 (their logger
		// printed quotaDimensions as "[MaxDepth]"; kept as logged)
		name: "free tier RPD gemini-3.6-flash", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 20, model: gemini-3.6-flash\nPlease retry in 36.429760048s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":"[MaxDepth]","quotaValue":"20"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"36s"}]}}`,
		want: withQuota(wantDailyQuota, 36429760048*time.Nanosecond, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 20),
	},
	{
		// https://github.com/googleapis/python-genai/issues/2044 (message not
		// quoted there; the usual one)
		// Per-day, per-minute and TPM at once: waiting a minute cannot help.
		name: "RPD with RPM and TPM, no quotaValue", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"}},{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"}},{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"}}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"47s"}]}}`,
		want: withQuota(wantDailyQuota, 47*time.Second, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 0),
	},
	{
		// https://github.com/google-gemini/gemini-cli/issues/8437 (quoted up to
		// the Help detail)
		name: "RPD listed after TPM and RPM", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash-preview-image"}},{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash-preview-image"}},{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-2.5-flash-preview-image","location":"global"}}]}]}}`,
		want: withQuota(wantDailyQuota, 0, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 0),
	},
	{
		// https://github.com/google-gemini/gemini-cli/issues/10925
		// The body is a JSON array: the SDK keeps it raw in Message.
		name: "legacy ErrorInfo per day, array body", status: 429,
		body: `[{
  "error": {
    "code": 429,
    "message": "Quota exceeded for quota metric 'Gemini 2.5 Pro Requests' and limit 'Gemini 2.5 Pro Requests per day per user per tier' of service 'cloudcode-pa.googleapis.com' for consumer 'project_number:681255809395'.",
    "errors": [
      {
        "message": "Quota exceeded for quota metric 'Gemini 2.5 Pro Requests' and limit 'Gemini 2.5 Pro Requests per day per user per tier' of service 'cloudcode-pa.googleapis.com' for consumer 'project_number:681255809395'.",
        "domain": "global",
        "reason": "rateLimitExceeded"
      }
    ],
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "RATE_LIMIT_EXCEEDED",
        "domain": "googleapis.com",
        "metadata": {
          "quota_metric": "cloudcode-pa.googleapis.com/gemini_2_5_pro_requests",
          "quota_limit": "Gemini25ProRequestsPerDay"
        }
      }
    ]
  }
}
]`,
		want: withQuota(wantDailyQuota, 0, "Gemini25ProRequestsPerDay", 0),
	},

	// ---- 429: limit 0, the model is not on this tier ----
	{
		// https://www.satopshops.co.za/complete-guide-to-camps-bay-apartments-for-sale/
		// The violations carry no quotaValue: the message's "limit: 0" lines
		// fill it in by metric.
		name: "limit 0 in text, violations without value", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.0-flash\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.0-flash\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.0-flash\nPlease retry in 10.689924287s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]},{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"}},{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-2.0-flash","location":"global"}},{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_input_token_count","quotaId":"GenerateContentInputTokensPerModelPerMinute-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"}}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"10s"}]}}`,
		want: withQuota(wantNoQuota, 10689924287*time.Nanosecond, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 0),
	},
	{
		// https://github.com/davidlary/PortraitGenerator/blob/HEAD/GOOGLE_API_QUOTA_ISSUE.md
		name: "paid tier per-day limit 0 in text", status: 429,
		body: `{
  "error": {
    "code": 429,
    "message": "You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_requests_per_model_per_day, limit: 0",
    "status": "RESOURCE_EXHAUSTED",
    "details": [
      {"@type": "type.googleapis.com/google.rpc.Help", "links": [{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}]},
      {"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaMetric": "generativelanguage.googleapis.com/generate_requests_per_model_per_day", "quotaId": "GenerateRequestsPerDayPerProjectPerModel"}]}
    ]
  }
}`,
		want: withQuota(wantNoQuota, 0, "GenerateRequestsPerDayPerProjectPerModel", 0),
	},
	{
		// https://github.com/BerriAI/litellm/issues/33421 (quoted up to the
		// Help detail)
		name: "limit 0 in text only", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.0-flash\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.0-flash\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.0-flash\nPlease retry in 29.019961092s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.Help","links":[{"description":"Learn more about Gemini API quotas","url":"https://ai.google.dev/gemini-api/docs/rate-limits"}]}]}}`,
		want: withDelay(wantNoQuota, 29019961092*time.Nanosecond),
	},
	{
		// https://github.com/google-gemini/gemini-cli/issues/22486 (details
		// printed as [Object]; left out)
		name: "limit 0 on gemini-3.1-pro", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-3.1-pro\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-3.1-pro\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-3.1-pro\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-3.1-pro\nPlease retry in 25.465784708s.","status":"RESOURCE_EXHAUSTED"}}`,
		want: withDelay(wantNoQuota, 25465784708*time.Nanosecond),
	},
	{
		// https://github.com/continuedev/continue/issues/10085 (a proxy's body
		// around the API's; the inner body quoted up to the Help detail)
		name: "limit 0 nested in a proxy's error", status: 429,
		body: `{"error":{"message":"{\n  \"error\": {\n    \"code\": 429,\n    \"message\": \"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your current usage, head to: https://ai.dev/rate-limit. \\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_input_token_count, limit: 0, model: gemini-2.5-pro\\n* Quota exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: 0, model: gemini-2.5-pro\\nPlease retry in 38.863719904s.\",\n    \"status\": \"RESOURCE_EXHAUSTED\",\n    \"details\": [\n      {\n        \"@type\": \"type.googleapis.com/google.rpc.Help\",\n        \"links\": [\n          {\n            \"description\": \"Learn more about Gemini API quotas\",\n            \"url\": \"https://ai.google.dev/gemini-api/docs/rate-limits\"\n          }\n        ]\n      }\n    ]\n  }\n}\n","code":429,"status":"Too Many Requests"}}`,
		want: withDelay(wantNoQuota, 38863719904*time.Nanosecond),
	},
	{
		// https://github.com/tech-shrimp/gemini-playground/issues/10
		name: "legacy ErrorInfo quota_limit_value 0", status: 429,
		body: `{ "error": { "code": 429, "message": "Quota exceeded for quota metric 'Generate Content API requests per minute' and limit 'GenerateContent request limit per minute for a region' of service 'generativelanguage.googleapis.com' for consumer 'project_number:391029737820'.", "status": "RESOURCE_EXHAUSTED", "details": [ { "@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com", "metadata": { "service": "generativelanguage.googleapis.com", "quota_location": "us-west4", "quota_limit_value": "0", "quota_limit": "GenerateContentRequestsPerMinutePerProjectPerRegion", "quota_metric": "generativelanguage.googleapis.com/generate_content_requests", "consumer": "projects/391029737820" } }, { "@type": "type.googleapis.com/google.rpc.Help", "links": [ { "description": "Request a higher quota limit.", "url": "https://cloud.google.com/docs/quotas/help/request_increase" } ] } ] } }`,
		want: withQuota(wantNoQuota, 0, "GenerateContentRequestsPerMinutePerProjectPerRegion", 0),
	},

	// ---- 429: spend and prepay caps (message text only) ----
	{
		// https://help.apiyi.com/en/ai-studio-monthly-spending-cap-429-solution-en.html
		name: "billing account spending cap", status: 429,
		body: `{"error":{"code":429,"message":"Your billing account has exceeded its monthly spending cap. Please go to AI Studio at https://aistudio.google.com to manage your billing. Learn more at https://ai.google.dev/gemini-api/docs/billing.","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantSpendCap,
	},
	{
		// https://discuss.ai.google.dev/t/billing-sync-bug-prepay-balance-shows-r-0-429-resource-exhausted-despite-funded-prepaid-balance/170539
		name: "prepayment credits depleted", status: 429,
		body: `{"error":{"code":429,"message":"Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects to manage your project and billing.","status":"RESOURCE_EXHAUSTED"}}`,
		want: wantSpendCap,
	},

	// ---- 5xx ----
	{
		// https://github.com/google-gemini/cookbook/issues/425
		name: "model overloaded", status: 503,
		body: `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`,
		want: wantOverloaded,
	},
	{
		// https://github.com/continuedev/continue/issues/10639
		name: "high demand", status: 503,
		body: `{
  "error": {
    "code": 503,
    "message": "This model is currently experiencing high demand. Spikes in demand are usually temporary. Please try again later.",
    "status": "UNAVAILABLE"
  }
}
`,
		want: wantOverloaded,
	},
	{
		// https://github.com/tatookan/comfyui_ssl_gemini_EXP/issues/6
		name: "503 deadline expired", status: 503,
		body: `{"error":{"code":503,"message":"Deadline expired before operation could complete.","status":"UNAVAILABLE"}}`,
		want: wantTimeout,
	},
	{
		// https://github.com/googleapis/go-genai/blob/v1.77.0/api_client.go
		// (newAPIError: a text/plain body becomes Message, resp.Status becomes
		// Status); the text is an Envoy proxy's.
		name: "503 text/plain from a proxy", status: 503,
		body: "upstream connect error or disconnect/reset before headers. reset reason: overflow",
		want: wantOverloaded,
	},
	{
		// https://github.com/PublicAffairs/openai-gemini/issues/15
		name: "internal error", status: 500,
		body: `{
  "error": {
    "code": 500,
    "message": "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting",
    "status": "INTERNAL"
  }
}`,
		want: wantServerError,
	},
	{
		// https://github.com/googleapis/go-genai/blob/v1.77.0/api_client.go
		// (newAPIError: an empty body gives Code and the status line only)
		name: "500 empty body", status: 500,
		body: "",
		want: wantServerError,
	},
	{
		// https://github.com/letta-ai/letta/pull/2861 ("504: DEADLINE_EXCEEDED");
		// message as in https://github.com/interviewstreet/hiring-agent/issues/284
		name: "504 deadline exceeded", status: 504,
		body: `{"error":{"code":504,"message":"Deadline expired before operation could complete.","status":"DEADLINE_EXCEEDED"}}`,
		want: wantTimeout,
	},
	{
		// https://github.com/google-gemini/gemini-cli/issues/20309 ("happens
		// when there is a heavy usage"): the server gave up, not the caller.
		name: "499 cancelled by the server, array body", status: 499,
		body: `[{
  "error": {
    "code": 499,
    "message": "The operation was cancelled.",
    "errors": [
      {
        "message": "The operation was cancelled.",
        "domain": "global",
        "reason": "backendError"
      }
    ],
    "status": "CANCELLED"
  }
}
]`,
		want: wantServerError,
	},
	{
		// https://github.com/googleapis/js-genai/issues/650 (an error event in a
		// 200 stream after text was yielded)
		name: "in-stream 500", status: 200,
		body:  `{"error":{"code":500,"message":"An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting","status":"INTERNAL"}}`,
		reach: inStream,
		want:  wantServerError,
	},
	{
		// https://github.com/gke-labs/gemini-for-kubernetes-development/issues/1215
		// as an error event inside a stream: the 429's class and delay stand.
		name: "in-stream 429", status: 200,
		body:  `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. Please retry in 22.5s.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaDimensions":{"location":"global","model":"gemini-2.5-flash"},"quotaValue":"10"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"22s"}]}}`,
		reach: inStream,
		want:  withQuota(wantRateLimit, 22500*time.Millisecond, "GenerateRequestsPerMinutePerProjectPerModel-FreeTier", 10),
	},

	// ---- 400 ----
	{
		// https://github.com/google-gemini/gemini-cli/issues/15425
		name: "invalid argument, array body", status: 400,
		body: `[{
    "error": {
      "code": 400,
      "message": "Request contains an invalid argument.",
      "errors": [
        {
          "message": "Request contains an invalid argument.",
          "domain": "global",
          "reason": "badRequest"
        }
      ],
      "status": "INVALID_ARGUMENT"
    }
  }
  ]`,
		want: wantBadRequest,
	},
	{
		// https://github.com/lbjlaq/Antigravity-Manager/issues/1942 (a proxy's
		// UPSTREAM_ERROR around the API's body)
		name: "invalid argument nested in a proxy's error", status: 400,
		body: `{
  "error": {
    "code": 400,
    "message": "{\n  \"error\": {\n    \"code\": 400,\n    \"message\": \"Request contains an invalid argument.\",\n    \"status\": \"INVALID_ARGUMENT\"\n  }\n}\n",
    "status": "UPSTREAM_ERROR"
  }
}`,
		want: wantBadRequest,
	},
	{
		// https://github.com/continuedev/continue/issues/8516
		name: "API key not valid, array body", status: 400,
		body: `[{
  "error": {
    "code": 400,
    "message": "API key not valid. Please pass a valid API key.",
    "status": "INVALID_ARGUMENT",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "API_KEY_INVALID",
        "domain": "googleapis.com",
        "metadata": {
          "service": "generativelanguage.googleapis.com"
        }
      },
      {
        "@type": "type.googleapis.com/google.rpc.LocalizedMessage",
        "locale": "en-US",
        "message": "API key not valid. Please pass a valid API key."
      }
    ]
  }
}
]`,
		want: wantAuthProject,
	},
	{
		// https://github.com/google-gemini/gemini-cli/issues/25198
		name: "API key not found", status: 400,
		body: `{"error":{"code":400,"message":"API Key not found. Please pass a valid API key.","status":"INVALID_ARGUMENT","details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"API_KEY_INVALID","domain":"googleapis.com","metadata":{"service":"generativelanguage.googleapis.com"}}]}}`,
		want: wantAuthProject,
	},
	{
		// https://github.com/Xeift/Telegram-Discord-Bot/issues/4
		name: "user location not supported", status: 400,
		body: `{"error":{"code":400,"message":"User location is not supported for the API use.","status":"FAILED_PRECONDITION"}}`,
		want: wantLocation,
	},
	{
		// https://github.com/u14app/neo-chat/issues/7
		name: "user location without billing", status: 400,
		body: `{"error":{"code":400,"message":"User location is not supported for the API use without a billing account linked.","status":"FAILED_PRECONDITION"}}`,
		want: wantLocation,
	},

	// ---- 401 / 403 ----
	{
		// https://github.com/musistudio/claude-code-router/issues/1011
		name: "unauthenticated", status: 401,
		body: `{
  "error": {
    "code": 401,
    "message": "Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie or other valid authentication credential. See https://developers.google.com/identity/sign-in/web/devconsole-project.",
    "status": "UNAUTHENTICATED"
  }
}`,
		want: wantAuthProject,
	},
	{
		// https://github.com/google-gemini-php/laravel/issues/47
		name: "leaked key", status: 403,
		body: `{"error":{"code":403,"message":"Your API key was reported as leaked. Please use another API key.","status":"PERMISSION_DENIED"}}`,
		want: wantAuthProject,
	},
	{
		// https://github.com/PublicAffairs/openai-gemini/issues/92
		name: "unregistered callers", status: 403,
		body: `{
  "error": {
    "code": 403,
    "message": "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.",
    "status": "PERMISSION_DENIED"
  }
}`,
		want: wantAuthProject,
	},
	{
		// https://github.com/google/generative-ai-docs/issues/356
		name: "consumer suspended", status: 403,
		body: `{
  "error": {
    "code": 403,
    "message": "Permission denied: Consumer 'api_key:AIzaSyAhTarnL1PaQn_yu_uVf0gia9wUyJx8RSI' has been suspended.",
    "status": "PERMISSION_DENIED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "CONSUMER_SUSPENDED",
        "domain": "googleapis.com",
        "metadata": {
          "service": "generativelanguage.googleapis.com",
          "consumer": "projects/578829824020"
        }
      }
    ]
  }
}`,
		want: wantAuthProject,
	},
	{
		// https://github.com/google/generative-ai-docs/issues/74 (the source
		// redacts the project and cuts the ErrorInfo's metadata)
		name: "service disabled", status: 403,
		body: `{
  "error": {
    "code": 403,
    "message": "Generative Language API (Staging) has not been used in project <redacted> before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/staging-generativelanguage.sandbox.googleapis.com/overview?project=<redacted> then retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry.",
    "status": "PERMISSION_DENIED",
    "details": [
      {
        "@type": "type.googleapis.com/google.rpc.Help",
        "links": [
          {
            "description": "Google developers console API activation",
            "url": "https://console.developers.google.com/apis/api/staging-generativelanguage.sandbox.googleapis.com/overview?project=<redacted>"
          }
        ]
      },
      {
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": "SERVICE_DISABLED",
        "domain": "googleapis.com"
      }
    ]
  }
}`,
		want: wantDisabled,
	},
	{
		// https://github.com/google-gemini/deprecated-generative-ai-python/issues/10
		// (message only)
		name: "service disabled, text only", status: 403,
		body: `{"error":{"code":403,"message":"Generative Language API has not been used in project 411082643095 before or it is disabled. Enable it by visiting https://console.developers.google.com/apis/api/generativelanguage.googleapis.com/overview?project=411082643095 then retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry.","status":"PERMISSION_DENIED"}}`,
		want: wantDisabled,
	},
	{
		// https://github.com/google-gemini/gemini-cli/issues/14519 (a proxy's
		// body around the API's; only gemini-3-pro-preview was refused, the
		// 2.5 models answered): this model only.
		name: "caller has no permission on this model", status: 403,
		body: `{"error":{"message":"{\n  \"error\": {\n    \"code\": 403,\n    \"message\": \"The caller does not have permission\",\n    \"status\": \"PERMISSION_DENIED\"\n  }\n}\n","code":403,"status":"Forbidden"}}`,
		want: wantAuthModel,
	},

	// ---- 404 ----
	{
		// https://github.com/wwardaww/gnome-gemini-ai/issues/22
		name: "model not found", status: 404,
		body: `{
  "error": {
    "code": 404,
    "message": "models/gemini-pro is not found for API version v1beta, or is not supported for generateContent. Call ListModels to see the list of available models and their supported methods.",
    "status": "NOT_FOUND"
  }
}`,
		want: wantNotFound,
	},

	{
		// https://github.com/googleapis/js-genai/issues/930: a 404 that says
		// nothing of a URL is read as being about the model.
		name: "404 without a message", status: 404,
		body: `{"error":{"message":"","code":404,"status":"Not Found"}}`,
		want: wantNotFound,
	},
	{
		// https://github.com/googleapis/google-api-php-client/issues/1870: a
		// Google API's answer to a method it does not have. The Gemini API
		// answers so to a malformed path (the SDK posts to
		// "v1beta/:generateContent" when it cannot encode a request).
		name: "method not found", status: 404,
		body: `{ "error": { "code": 404, "message": "Method not found.", "errors": [ { "message": "Method not found.", "domain": "global", "reason": "notFound" } ], "status": "NOT_FOUND" } }`,
		want: wantBadRequest,
	},
	{
		// https://github.com/8-bit-sheep/googleAnalyticsR/issues/286: the
		// Google front end's page for a URL no API serves (the issue quotes
		// the page's head and its message; the style sheet between them is
		// left out here).
		name: "front end 404 page", status: 404,
		body: "<!DOCTYPE html>\n<html lang=en>\n  <meta charset=utf-8>\n  <meta name=viewport content=\"initial-scale=1, minimum-scale=1, width=device-width\">\n  <title>Error 404 (Not Found)!!1</title>\n" +
			"<p>The requested URL <code>/analytics/v3/data/ga/</code> was not found on this server.  ",
		want: wantBadRequest,
	},

	// ---- what a call returns after several models ----
	{
		// https://github.com/voideditor/void/issues/557, as the last attempt of
		// a cascade whose first model was overloaded: the last failure decides.
		name: "cascade ending in a daily quota", status: 429,
		body: `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details. For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_free_tier_requests","quotaId":"GenerateRequestsPerDayPerProjectPerModel-FreeTier","quotaDimensions":{"model":"gemini-2.0-pro-exp","location":"global"},"quotaValue":"25"}]},{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"5s"}]}}`,
		reach: func(err error) error {
			return &CascadeError{Attempts: []Attempt{
				{Model: "gemini-2.5-pro", Err: sdkError(503, `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`)},
				{Model: "gemini-2.5-flash", Skipped: true, Err: fmt.Errorf("breaker: %w", ErrCircuitOpen)},
				{Model: "gemini-2.0-pro-exp", Err: err},
			}}
		},
		want: withQuota(wantDailyQuota, 5*time.Second, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", 25),
	},
}

// inStream is how the Client returns an error event that arrived in a 200
// stream after text had been yielded.
func inStream(err error) error {
	return &StreamError{Model: "gemini-2.5-flash", Partial: "Once upon a ", Err: err}
}

func TestClassifyWire(t *testing.T) {
	require.GreaterOrEqual(t, len(wireCases)+len(errorCases()), 40)
	for _, tc := range wireCases {
		t.Run(tc.name, func(t *testing.T) {
			var err error = sdkError(tc.status, tc.body)
			if tc.reach != nil {
				err = tc.reach(err)
			}
			assert.Equal(t, tc.want, ruleless(Classify(err)))
		})
	}
}

// errCase is an error that is not an API answer, and its verdict.
type errCase struct {
	name string
	err  error
	want Verdict
}

// sendErr wraps a transport error as the SDK's doRequest does
// (https://github.com/googleapis/go-genai/blob/v1.77.0/api_client.go).
func sendErr(err error) error {
	return fmt.Errorf("doRequest: error sending request: %w", &url.Error{
		Op: "Post", URL: "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent", Err: err,
	})
}

// quietErr returns the *ResponseError responseError makes of a response body.
func quietErr(body string) error {
	var resp genai.GenerateContentResponse
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		panic(err)
	}
	return responseError("gemini-2.5-flash", &resp)
}

func errorCases() []errCase {
	jsonErr := json.Unmarshal([]byte(`{"candidates": [{"content": {"part`), new(map[string]any))
	// (apiErr is the per-minute 429 of the first wire case.)
	apiErr := sdkError(wireCases[0].status, wireCases[0].body)
	perMinute := wireCases[0].want
	return []errCase{
		// ---- transport (source: go-genai v1.77.0 api_client.go, doRequest and
		// iterateResponseStream, https://github.com/googleapis/go-genai/blob/v1.77.0/api_client.go) ----
		{"connection refused", sendErr(&net.OpError{Op: "dial", Net: "tcp",
			Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}), wantNetwork},
		{"EOF before the response", sendErr(io.EOF), wantNetwork},
		{"dial timeout", sendErr(&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}), wantTimeout},
		{"stream cut at an event boundary", io.ErrUnexpectedEOF, wantStreamCut},
		{"stream cut mid-event", fmt.Errorf("iterateResponseStream: error unmarshalling data %s:%s. error: %w",
			"data", ` {"candidates": [{"content": {"part`, jsonErr), wantStreamCut},
		// https://github.com/googleapis/go-genai/issues/355
		{"invalid stream chunk", errors.New(`iterateResponseStream: invalid stream chunk: : keepalive`), wantStreamCut},
		// https://github.com/genai-io/gen-code/issues/397 (net/http's
		// http2StreamError is unexported: its text is all there is)
		{"HTTP/2 stream reset", errors.New("stream error: stream ID 1007; INTERNAL_ERROR; received from peer"), wantStreamCut},
		{"HTTP/2 GOAWAY", errors.New(`http2: server sent GOAWAY and closed the connection; LastStreamID=3, ErrCode=NO_ERROR, debug=""`), wantStreamCut},
		{"connection reset while reading", &net.OpError{Op: "read", Net: "tcp",
			Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}, wantStreamCut},
		{"read timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, wantTimeout},
		{"bare EOF", io.EOF, wantNetwork},
		{"malformed 200 body", fmt.Errorf("deserializeUnaryResponse: error unmarshalling response: %w\n%s", jsonErr, `{"candidates": [`), wantServerError},
		{"something else", errors.New("boom"), wantUnknown},

		// ---- answers without a body (newAPIError: Code and the status line,
		// https://github.com/googleapis/go-genai/blob/v1.77.0/api_client.go) ----
		{"408 empty body", sdkError(408, ""), wantTimeout},
		{"502 empty body", sdkError(502, ""), wantServerError},
		{"413 empty body", sdkError(413, ""), wantBadRequest},

		// ---- contexts and timeouts ----
		{"caller cancelled", sendErr(context.Canceled), wantCanceled},
		{"caller's deadline (or the SDK's own timeout)", sendErr(context.DeadlineExceeded), wantCanceled},
		{"attempt timeout", &attemptTimeoutError{err: sendErr(context.DeadlineExceeded)}, wantTimeout},
		{"attempt timeout while streaming", inStream(&attemptTimeoutError{err: context.DeadlineExceeded}), wantTimeout},
		{"attempt timeout racing an answer", &attemptTimeoutError{err: apiErr}, perMinute},
		// https://github.com/golang/go/blob/go1.26.8/src/net/http/client.go
		{"http.Client Timeout", sendErr(&timeoutErr{"context deadline exceeded (Client.Timeout exceeded while awaiting headers)"}), wantTimeout},
		{"caller cancelled mid-stream", inStream(context.Canceled), wantCanceled},

		// ---- quiet 200s (bodies: see TestResponseError) ----
		{"blocked prompt", quietErr(`{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":12,"totalTokenCount":12}}`), wantBlocked},
		{"answer stopped for safety", quietErr(`{"candidates":[{"finishReason":"SAFETY","index":0}]}`), wantBlocked},
		{"finishReason OTHER, nothing", quietErr(`{"candidates":[{"finishReason":"OTHER","index":0}],"usageMetadata":{"promptTokenCount":171,"totalTokenCount":171}}`), wantEmptyRetry},
		{"malformed function call", quietErr(`{"candidates":[{"finishReason":"MALFORMED_FUNCTION_CALL"}]}`), wantEmptyRetry},
		{"STOP without parts", quietErr(`{"candidates":[{"content":{"role":"model"},"finishReason":"STOP","index":0}],"modelVersion":"gemini-2.5-pro"}`), wantEmptyRetry},
		{"MAX_TOKENS, nothing generated", quietErr(`{"candidates":[{"finishReason":"MAX_TOKENS","index":0}]}`), wantEmptyRequest},

		// ---- stream cuts ----
		{"stream without finishReason", inStream(errNoFinishReason), wantStreamCut},
		{"stream cut after text", inStream(io.ErrUnexpectedEOF), wantStreamCut},

		// ---- API errors not decoded from JSON ----
		// google/rpc/error_details.proto: quota_value is an int64, which JSON
		// may carry as a number.
		{"quotaValue as a JSON number", sdkError(429, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaId":"GenerateRequestsPerMinutePerProjectPerModel","quotaValue":1000}]}]}}`),
			withQuota(wantRateLimit, 0, "GenerateRequestsPerMinutePerProjectPerModel", 1000)},
		{"QuotaFailure built in Go", genai.APIError{Code: 429, Details: []map[string]any{{
			"@type":      "type.googleapis.com/google.rpc.QuotaFailure",
			"violations": []map[string]any{{"quotaId": "GenerateRequestsPerDayPerProjectPerModel", "quotaValue": "10000"}},
		}}}, withQuota(wantDailyQuota, 0, "GenerateRequestsPerDayPerProjectPerModel", 10000)},
		{"ErrorInfo built in Go", genai.APIError{Code: 429, Details: []map[string]any{{
			"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED",
			"metadata": map[string]string{"quota_limit": "GenerateContentRequestsPerMinutePerProjectPerRegion", "quota_limit_value": "60"},
		}}}, withQuota(wantRateLimit, 0, "GenerateContentRequestsPerMinutePerProjectPerRegion", 60)},
		{"429 with an ErrorInfo of another reason", genai.APIError{Code: 429, Details: []map[string]any{{
			"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "RESOURCE_EXHAUSTED",
		}}}, wantRateLimit},

		// ---- ours ----
		{"model error keeps its verdict", &ModelError{Model: "gemini-2.5-flash", Verdict: perMinute, Err: apiErr}, perMinute},
		{"model error without a verdict", &ModelError{Model: "gemini-2.5-flash", Err: apiErr}, perMinute},
		{"retry not waited for: the 429 decides", &waitError{Err: apiErr, Wait: 22 * time.Second}, perMinute},
		{"retry not waited for: the failure decides", &waitError{Err: &ModelError{Model: "gemini-2.5-flash", Verdict: perMinute, Err: apiErr}, Wait: 22 * time.Second}, perMinute},
		{"model cooling down", &CoolingError{Model: "gemini-2.5-pro", Until: time.Date(2026, 1, 2, 8, 0, 0, 0, time.UTC), Reason: ClassDailyQuota}, wantCircuitOpen},
		{"project cooling down", &CoolingError{Until: time.Date(2026, 1, 2, 8, 0, 0, 0, time.UTC), Reason: ClassSpendCap},
			Verdict{Class: ClassCircuitOpen, Scope: ScopeProject}},
		{"breaker open", fmt.Errorf("model gemini-2.5-pro: %w", ErrCircuitOpen), wantCircuitOpen},
		{"no tokens in time", fmt.Errorf("model gemini-2.5-pro: %w", ErrRateLimited), wantLocalRateLimit},
		{"quota exhausted, no answer kept", fmt.Errorf("model gemini-2.5-pro: %w", ErrQuotaExhausted), wantDailyQuota},
		{"bare blocked", ErrBlocked, wantBlocked},
		{"bare empty", ErrEmptyResponse, wantEmptyRetry},
		{"bare interrupted", ErrStreamInterrupted, wantStreamCut},
		{"request refused before it was sent", &requestError{where: "contents[1]", what: "is nil", fix: fixNilElement}, wantBadRequest},
		{"cascade of skips only", &CascadeError{Attempts: []Attempt{{Model: "gemini-2.5-pro", Skipped: true, Err: ErrCircuitOpen}}}, wantCircuitOpen},
	}
}

// timeoutErr stands for net/http's unexported timeoutError: a net.Error
// that matches context.DeadlineExceeded.
type timeoutErr struct{ s string }

func (e *timeoutErr) Error() string        { return e.s }
func (e *timeoutErr) Timeout() bool        { return true }
func (e *timeoutErr) Temporary() bool      { return true }
func (e *timeoutErr) Is(target error) bool { return target == context.DeadlineExceeded }

func TestClassifyErrors(t *testing.T) {
	for _, tc := range errorCases() {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, ruleless(Classify(tc.err)))
		})
	}
}

// panicky is a foreign error whose methods panic.
type panicky struct{}

func (panicky) Error() string { panic("no") }
func (panicky) Unwrap() error { panic("no") }

func TestAttemptTimeoutError(t *testing.T) {
	err := &attemptTimeoutError{err: sendErr(context.DeadlineExceeded)}
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "geminiguard: attempt timed out: doRequest: error sending request")
}

func TestClassifyNeverPanics(t *testing.T) {
	assert.Equal(t, Verdict{}, Classify(nil))
	assert.Equal(t, wantUnknown, ruleless(Classify(panicky{})))
	var nilStream *StreamError
	assert.Equal(t, wantUnknown, ruleless(Classify(nilStream)), "a typed nil panics in its own Unwrap")
	assert.Equal(t, Verdict{Class: ClassAuth, Scope: ScopeProject, cool: coolProject},
		ruleless(Classify(&genai.APIError{Code: 401})), "a pointer to an APIError")
}

func TestResponseError(t *testing.T) {
	cases := []struct {
		name   string
		body   string // the response body as sent; "" for a nil response
		kind   error  // nil: a usable answer
		reason string
	}{
		// https://github.com/simonw/llm-gemini/pull/144
		{"blocked prompt", `{"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":12,"totalTokenCount":12}}`, ErrBlocked, "PROHIBITED_CONTENT"},
		// https://github.com/zed-industries/zed/pull/38670
		{"blocked prompt with ratings", `{"promptFeedback":{"blockReason":"SAFETY","safetyRatings":[{"category":"HARM_CATEGORY_DANGEROUS_CONTENT","probability":"HIGH","blocked":true}]},"usageMetadata":{"promptTokenCount":8,"totalTokenCount":8}}`, ErrBlocked, "SAFETY"},
		// https://github.com/google/generative-ai-docs/issues/235 (content
		// is missing whenever finishReason is not STOP)
		{"answer stopped for safety", `{"candidates":[{"finishReason":"SAFETY","index":0,"safetyRatings":[{"category":"HARM_CATEGORY_HARASSMENT","probability":"MEDIUM"}]}]}`, ErrBlocked, "SAFETY"},
		// https://github.com/bespokelabsai/curator/pull/621
		{"recitation with partial text", `{"candidates":[{"content":{"parts":[{"text":"It was the best of times"}],"role":"model"},"finishReason":"RECITATION","citationMetadata":{"citationSources":[{"startIndex":0,"endIndex":24}]}}]}`, ErrBlocked, "RECITATION"},
		// https://github.com/google/generative-ai-docs/issues/235
		{"OTHER with nothing", `{"candidates":[{"finishReason":"OTHER","index":0}],"usageMetadata":{"promptTokenCount":171,"totalTokenCount":171}}`, ErrEmptyResponse, "OTHER"},
		// https://github.com/google/generative-ai-docs/issues/235
		{"MAX_TOKENS with nothing", `{"candidates":[{"finishReason":"MAX_TOKENS","index":0}],"promptFeedback":{}}`, ErrEmptyResponse, "MAX_TOKENS"},
		// https://github.com/NousResearch/hermes-agent/issues/87208 (thinking
		// spent the whole budget)
		{"MAX_TOKENS with thoughts only", `{"candidates":[{"content":{"parts":[{"text":"Let me think about","thought":true}],"role":"model"},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":20,"thoughtsTokenCount":4076,"totalTokenCount":4096}}`, ErrEmptyResponse, "MAX_TOKENS"},
		// https://github.com/egoist/chatwise-releases/issues/371
		{"MAX_TOKENS with text is an answer", `{"candidates":[{"content":{"parts":[{"text":"partial"}],"role":"model"},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"candidatesTokenCount":64,"promptTokenCount":8,"totalTokenCount":72}}`, nil, ""},
		// https://github.com/pydantic/pydantic-ai/issues/631
		{"malformed function call", `{"candidates":[{"finishReason":"MALFORMED_FUNCTION_CALL"}]}`, ErrEmptyResponse, "MALFORMED_FUNCTION_CALL"},
		// https://github.com/NousResearch/hermes-agent/pull/83886 (the API's
		// verdict stands over a parsed call)
		{"malformed function call with a call", `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"search","args":{}}}],"role":"model"},"finishReason":"MALFORMED_FUNCTION_CALL"}]}`, ErrEmptyResponse, "MALFORMED_FUNCTION_CALL"},
		// https://github.com/agentjido/req_llm/issues/944
		{"unexpected tool call", `{"candidates":[{"finishReason":"UNEXPECTED_TOOL_CALL","index":0}]}`, ErrEmptyResponse, "UNEXPECTED_TOOL_CALL"},
		// https://github.com/google-gemini/deprecated-generative-ai-python/issues/744
		{"STOP without parts", `{"candidates":[{"content":{"role":"model"},"finishReason":"STOP","index":0}],"modelVersion":"gemini-2.5-pro","usageMetadata":{"promptTokenCount":11280,"totalTokenCount":11280}}`, ErrEmptyResponse, "NO_PARTS"},
		// https://github.com/livekit/agents/issues/4066
		{"STOP with an empty text part", `{"candidates":[{"content":{"parts":[{"text":""}],"role":"model"},"finishReason":"STOP"}]}`, ErrEmptyResponse, "NO_PARTS"},
		// genai types.go, FinishReasonLanguage: "unsupported language"
		{"unsupported language", `{"candidates":[{"finishReason":"LANGUAGE"}]}`, ErrEmptyResponse, "LANGUAGE"},
		// https://github.com/googleapis/go-genai/blob/v1.77.0/types.go (Text()
		// on {} returns "")
		{"empty object", `{}`, ErrEmptyResponse, "NO_CANDIDATES"},
		{"nil response", "", ErrEmptyResponse, "NO_CANDIDATES"},
		// https://ai.google.dev/api/generate-content (a function call answers)
		{"function call", `{"candidates":[{"content":{"parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}],"role":"model"},"finishReason":"STOP"}]}`, nil, ""},
		{"null part before text", `{"candidates":[{"content":{"parts":[null,{"text":"hi"}],"role":"model"},"finishReason":"STOP"}]}`, nil, ""},
		{"text after a thought", `{"candidates":[{"content":{"parts":[{"text":"thinking","thought":true},{"text":"answer"}],"role":"model"},"finishReason":"STOP"}]}`, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var resp *genai.GenerateContentResponse
			if tc.body != "" {
				resp = new(genai.GenerateContentResponse)
				require.NoError(t, json.Unmarshal([]byte(tc.body), resp))
			}
			err := responseError("gemini-2.5-flash", resp)
			if tc.kind == nil {
				assert.NoError(t, err)
				return
			}
			var re *ResponseError
			require.ErrorAs(t, err, &re)
			assert.ErrorIs(t, err, tc.kind)
			assert.Equal(t, tc.reason, re.Reason)
			assert.Equal(t, "gemini-2.5-flash", re.Model)
			assert.Same(t, resp, re.Response)
		})
	}
}

func TestQuietVerdicts(t *testing.T) {
	for reason, want := range map[string]Verdict{
		"PROHIBITED_CONTENT": wantBlocked,
		"NO_CANDIDATES":      wantEmptyRetry,
		"NO_PARTS":           wantEmptyRetry,
		"OTHER":              wantEmptyRetry,
		"MAX_TOKENS":         wantEmptyRequest,
		"LANGUAGE":           wantEmptyRequest,
	} {
		kind := ErrEmptyResponse
		if want.Class == ClassBlocked {
			kind = ErrBlocked
		}
		assert.Equal(t, want, ruleless(Classify(&ResponseError{Kind: kind, Model: "m", Reason: reason})), reason)
	}
}

func TestStrings(t *testing.T) {
	seen := map[string]Class{}
	for c := ClassNone; c < numClasses; c++ {
		s := c.String()
		require.NotEmpty(t, s, "class %d has no name", int(c))
		_, dup := seen[s]
		require.False(t, dup, "%q names two classes", s)
		seen[s] = c
	}
	assert.Equal(t, "rate_limit", ClassRateLimit.String())
	assert.Equal(t, "daily_quota", ClassDailyQuota.String())
	assert.Equal(t, "local_rate_limit", ClassLocalRateLimit.String())
	assert.Equal(t, "Class(99)", Class(99).String())
	assert.Equal(t, "Class(-1)", Class(-1).String())

	assert.Equal(t, "request", ScopeRequest.String())
	assert.Equal(t, "model", ScopeModel.String())
	assert.Equal(t, "project", ScopeProject.String())
	assert.Equal(t, "Scope(7)", Scope(7).String())

	assert.Equal(t, "none", coolNone.String())
	assert.Equal(t, "retry_after", coolRetryAfter.String())
	assert.Equal(t, "until_midnight", coolUntilMidnight.String())
	assert.Equal(t, "until_recheck", coolUntilRecheck.String())
	assert.Equal(t, "project", coolProject.String())
	assert.Equal(t, "coolDownKind(9)", coolDownKind(9).String())
}

// FuzzClassify feeds Classify API errors built the way the SDK builds them
// from an HTTP status and body, optionally with the message replaced, and
// checks that it never panics, is deterministic, and keeps its invariants.
func FuzzClassify(f *testing.F) {
	for _, tc := range wireCases {
		f.Add(tc.status, []byte(tc.body), "")
	}
	f.Add(429, []byte(`{"error":{"code":"429","status":"RESOURCE_EXHAUSTED","details":[{"@type":"x/google.rpc.RetryInfo","retryDelay":"-5s"}]}}`), "Please retry in 1m2.5s. * Quota exceeded for metric: m, limit: 0")
	f.Add(0, []byte(`[[{"error":{"message":"[{\"error\":{}}]"}}]]`), "")
	f.Add(503, []byte("Service Unavailable"), "{")
	f.Fuzz(func(t *testing.T, status int, body []byte, msg string) {
		ae := sdkError(status, string(body))
		if msg != "" {
			ae.Message = msg
		}
		got := classify(ae) // without Classify's guard: a panic here is a bug
		require.Equal(t, got, classify(ae), "deterministic")
		require.Equal(t, got, Classify(ae))
		require.Equal(t, got, Classify(inStream(ae)), "an error event in a stream reads as the same answer")
		require.True(t, got.Class > ClassNone && got.Class < numClasses, "class %v", got.Class)
		require.GreaterOrEqual(t, got.RetryAfter, time.Duration(0))
		require.GreaterOrEqual(t, got.quotaLimit, 0)
		switch got.Class {
		case ClassDailyQuota, ClassNoQuota, ClassSpendCap:
			require.False(t, got.Retryable, "a delay does not make a quota retryable")
			require.False(t, got.counts)
		}
	})
}

// TestClassSentinels spells out which sentinels each class matches, through
// ModelError and CoolingError, and how Classify reads a bare sentinel.
func TestClassSentinels(t *testing.T) {
	sentinels := []error{ErrCircuitOpen, ErrRateLimited, ErrQuotaExhausted, ErrAllModelsFailed, ErrEmptyResponse, ErrBlocked, ErrStreamInterrupted}
	want := map[Class][]error{
		ClassRateLimit:      {ErrRateLimited},
		ClassLocalRateLimit: {ErrRateLimited},
		ClassDailyQuota:     {ErrQuotaExhausted},
		ClassNoQuota:        {ErrQuotaExhausted},
		ClassSpendCap:       {ErrQuotaExhausted},
		ClassCircuitOpen:    {ErrCircuitOpen},
	}
	for c := range numClasses {
		for _, s := range sentinels {
			me := &ModelError{Model: "m", Verdict: Verdict{Class: c}, Err: errors.New("x")}
			assert.Equal(t, slices.Contains(want[c], s), errors.Is(me, s), "ModelError %s is %v", c, s)
			ce := &CoolingError{Model: "m", Reason: c}
			assert.Equal(t, slices.Contains(want[c], s) || s == ErrCircuitOpen, errors.Is(ce, s), "CoolingError %s is %v", c, s)
		}
	}
	assert.Equal(t, ClassCircuitOpen, Classify(fmt.Errorf("w: %w", ErrCircuitOpen)).Class)
	assert.Equal(t, ClassLocalRateLimit, Classify(fmt.Errorf("w: %w", ErrRateLimited)).Class)
	assert.Equal(t, ClassDailyQuota, Classify(fmt.Errorf("w: %w", ErrQuotaExhausted)).Class)
}
