package geminitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Every error body the fake sends, each next to the public source of a real
// payload of the same shape. Message texts are the real ones; project
// numbers are replaced by fakeProject.

// apiError is the "error" object of a Google API error body.
type apiError struct {
	Code    int              `json:"code"`
	Message string           `json:"message"`
	Status  string           `json:"status"`
	Details []map[string]any `json:"details,omitempty"`
}

type errorEnvelope struct {
	Error apiError `json:"error"`
}

// body returns the JSON error body {"error":{...}}.
func (e apiError) body() []byte {
	b, err := json.Marshal(errorEnvelope{Error: e})
	if err != nil {
		panic("geminitest: marshal error body: " + err.Error())
	}
	return b
}

const (
	fakeProject = "123456789012"

	typeQuotaFailure     = "type.googleapis.com/google.rpc.QuotaFailure"
	typeRetryInfo        = "type.googleapis.com/google.rpc.RetryInfo"
	typeHelp             = "type.googleapis.com/google.rpc.Help"
	typeErrorInfo        = "type.googleapis.com/google.rpc.ErrorInfo"
	typeLocalizedMessage = "type.googleapis.com/google.rpc.LocalizedMessage"

	service = "generativelanguage.googleapis.com"
)

// writeFault writes the non-2xx answer of an error fault of model m.
func writeFault(w http.ResponseWriter, st Step, m Model) {
	tier := 0
	if m.Quota.PaidTier {
		tier = 1
	}
	limit := func(k quotaKind, set int) int {
		if set > 0 {
			return set
		}
		return defaultLimits[tier][k]
	}
	rpm, tpm, rpd := limit(requestsPerMinute, m.Quota.RPM), limit(tokensPerMinute, m.Quota.TPM), limit(requestsPerDay, m.Quota.RPD)
	quota := func(daily bool, vs ...violation) apiError {
		for i := range vs {
			vs[i].value = st.QuotaValue
		}
		return quotaExceeded(m.Name, m.Quota.PaidTier, vs, st.retryDelay(daily))
	}
	var e apiError
	switch st.Fault {
	case RateLimitMinute:
		e = quota(false, violation{kind: requestsPerMinute, limit: rpm})
	case RateLimitTokens:
		e = quota(false, violation{kind: tokensPerMinute, limit: tpm})
	case DailyQuota:
		e = quota(true, violation{kind: requestsPerDay, limit: rpd})
	case DailyAndMinute:
		e = quota(false, violation{kind: requestsPerDay, limit: rpd}, violation{kind: requestsPerMinute, limit: rpm})
	case LimitZero:
		e = quota(true, violation{kind: requestsPerDay}, violation{kind: requestsPerMinute}, violation{kind: tokensPerMinute})
	case SpendCap:
		e = spendCap()
	case PrepayDepleted:
		e = prepayDepleted()
	case ResourceExhausted:
		e = resourceExhausted()
	case RateLimitLegacy:
		e = rateLimitLegacy(rpm)
	case Internal:
		e = internal()
	case Overloaded:
		e = overloaded()
	case DeadlineExpired503:
		e = deadlineExpired503()
	case GatewayTimeout:
		e = gatewayTimeout()
	case InvalidArgument:
		e = invalidArgument(invalidArgumentMessage)
	case APIKeyInvalid:
		e = apiKeyInvalid()
	case FailedPrecondition:
		e = failedPrecondition()
	case LeakedKey:
		e = leakedKey()
	case Unregistered:
		e = unregistered()
	case ServiceDisabled:
		e = serviceDisabled()
	case NotFound:
		e = notFound(m.Name)
	case NonJSONBody:
		writeBody(w, http.StatusServiceUnavailable, "text/plain", []byte(nonJSONBody))
		return
	case JSONArrayBody:
		writeBody(w, http.StatusServiceUnavailable, "application/json; charset=UTF-8", jsonArrayBody())
		return
	default:
		panic("geminitest: writeFault of " + st.Fault.String())
	}
	writeError(w, e)
}

// ---- 429: quotas ----

// quotaKind is one of the three quotas of a model.
type quotaKind int

const (
	requestsPerMinute quotaKind = iota
	tokensPerMinute
	requestsPerDay
)

// quotaIDs[paid][kind] is {quotaMetric, quotaId}.
// Free tier: https://www.satopshops.co.za/?p=2432 (all three in one body).
// Paid tier: no single public URL holds all three; the ids and metrics are
// those of real paid-tier bodies quoted verbatim in client test suites on
// GitHub (e.g. "retryDelay":"6776s" for generate_requests_per_model_per_day,
// and GenerateContentPaidTierInputTokensPerModelPerMinute for input tokens).
var quotaIDs = [2][3][2]string{
	{
		requestsPerMinute: {service + "/generate_content_free_tier_requests", "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"},
		tokensPerMinute:   {service + "/generate_content_free_tier_input_token_count", "GenerateContentInputTokensPerModelPerMinute-FreeTier"},
		requestsPerDay:    {service + "/generate_content_free_tier_requests", "GenerateRequestsPerDayPerProjectPerModel-FreeTier"},
	},
	{
		requestsPerMinute: {service + "/generate_requests_per_model", "GenerateRequestsPerMinutePerProjectPerModel"},
		tokensPerMinute:   {service + "/generate_content_paid_tier_input_token_count", "GenerateContentPaidTierInputTokensPerModelPerMinute"},
		requestsPerDay:    {service + "/generate_requests_per_model_per_day", "GenerateRequestsPerDayPerProjectPerModel"},
	},
}

// defaultLimits[paid][kind] is the quotaValue a scripted 429 reports when the
// model has no emulated limit of that kind (the published free-tier and
// tier-1 values of gemini-2.5-flash).
var defaultLimits = [2][3]int{
	{requestsPerMinute: 10, tokensPerMinute: 250000, requestsPerDay: 250},
	{requestsPerMinute: 1000, tokensPerMinute: 1000000, requestsPerDay: 10000},
}

// violation is one QuotaFailure violation.
type violation struct {
	kind  quotaKind
	limit int
	value string // stated instead of limit when not empty (Step.QuotaValue)
}

// stated returns the quotaValue v states.
func (v violation) stated() string {
	if v.value != "" {
		return v.value
	}
	return strconv.Itoa(v.limit)
}

// quotaExceeded is the modern 429 of the Gemini API: QuotaFailure, Help,
// RetryInfo, and a message that lists the violations and the retry delay.
//
// Per-minute: https://github.com/gke-labs/gemini-for-kubernetes-development/issues/1215
// Per-day with RetryInfo: https://oppl.ai/llms/gemini_complex_1/JE00B3XR4V72.json
// Per-day and per-minute in one body: https://www.satopshops.co.za/?p=2432
// limit 0: https://github.com/continuedev/continue/issues/12744
//
//	{"error":{"code":429,"message":"You exceeded your current quota, please
//	check your plan and billing details. For more information on this error,
//	head to: https://ai.google.dev/gemini-api/docs/rate-limits. To monitor your
//	current usage, head to: https://ai.dev/rate-limit. \n* Quota exceeded for
//	metric: generativelanguage.googleapis.com/generate_content_free_tier_requests,
//	limit: 0, model: gemini-2.0-flash\nPlease retry in 10.689924287s.",
//	"status":"RESOURCE_EXHAUSTED","details":[QuotaFailure, Help, RetryInfo]}}
func quotaExceeded(model string, paid bool, vs []violation, retry time.Duration) apiError {
	tier := 0
	if paid {
		tier = 1
	}
	var msg strings.Builder
	msg.WriteString("You exceeded your current quota, please check your plan and billing details. " +
		"For more information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits. " +
		"To monitor your current usage, head to: https://ai.dev/rate-limit. \n")
	violations := make([]map[string]any, 0, len(vs))
	for _, v := range vs {
		ids := quotaIDs[tier][v.kind]
		fmt.Fprintf(&msg, "* Quota exceeded for metric: %s, limit: %s, model: %s\n", ids[0], v.stated(), model)
		violations = append(violations, map[string]any{
			"quotaMetric":     ids[0],
			"quotaId":         ids[1],
			"quotaDimensions": map[string]string{"location": "global", "model": model},
			"quotaValue":      v.stated(),
		})
	}
	fmt.Fprintf(&msg, "Please retry in %s.", retry)
	return apiError{
		Code:    http.StatusTooManyRequests,
		Message: msg.String(),
		Status:  "RESOURCE_EXHAUSTED",
		Details: []map[string]any{
			{"@type": typeQuotaFailure, "violations": violations},
			{"@type": typeHelp, "links": []map[string]string{{
				"description": "Learn more about Gemini API quotas",
				"url":         "https://ai.google.dev/gemini-api/docs/rate-limits",
			}}},
			retryInfo(retry),
		},
	}
}

// retryInfo is a RetryInfo detail. Its retryDelay is whole seconds, truncated,
// as the real API sends it ("22s" next to "Please retry in 22.53s.").
func retryInfo(d time.Duration) map[string]any {
	return map[string]any{"@type": typeRetryInfo, "retryDelay": fmt.Sprintf("%ds", int64(d/time.Second))}
}

// spendCap: 429 with no details.
// https://help.apiyi.com/en/ai-studio-monthly-spending-cap-429-solution-en.html
// (billing-account variant: "Your billing account has exceeded its monthly
// spending cap. ..."; the project variant's text is quoted by many client
// test suites on GitHub).
func spendCap() apiError {
	return apiError{Code: 429, Status: "RESOURCE_EXHAUSTED",
		Message: "Your project has exceeded its monthly spending cap."}
}

// prepayDepleted: 429 with no details.
// https://discuss.ai.google.dev/t/urgent-ai-studio-prepay-balance-dropped-from-100-866-to-0-overnight-api-returning-429-resource-exhausted/169215
func prepayDepleted() apiError {
	return apiError{Code: 429, Status: "RESOURCE_EXHAUSTED",
		Message: "Your prepayment credits are depleted. Please go to AI Studio at https://ai.studio/projects " +
			"to manage your project and billing. Learn more at https://ai.google.dev/gemini-api/docs/billing#prepay. "}
}

// resourceExhausted: bare 429.
// https://github.com/google-gemini/gemini-cli/issues/2020
func resourceExhausted() apiError {
	return apiError{Code: 429, Status: "RESOURCE_EXHAUSTED",
		Message: "Resource has been exhausted (e.g. check quota)."}
}

// rateLimitLegacy: the 2024 body, ErrorInfo RATE_LIMIT_EXCEEDED + Help, no
// RetryInfo.
// https://github.com/tech-shrimp/gemini-playground/issues/10
func rateLimitLegacy(limit int) apiError {
	return apiError{
		Code:   429,
		Status: "RESOURCE_EXHAUSTED",
		Message: "Quota exceeded for quota metric 'Generate Content API requests per minute' and limit " +
			"'GenerateContent request limit per minute for a region' of service 'generativelanguage.googleapis.com' " +
			"for consumer 'project_number:" + fakeProject + "'.",
		Details: []map[string]any{
			{"@type": typeErrorInfo, "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com",
				"metadata": map[string]string{
					"service":           service,
					"quota_location":    "us-west4",
					"quota_limit_value": fmt.Sprint(limit),
					"quota_limit":       "GenerateContentRequestsPerMinutePerProjectPerRegion",
					"quota_metric":      service + "/generate_content_requests",
					"consumer":          "projects/" + fakeProject,
				}},
			{"@type": typeHelp, "links": []map[string]string{{
				"description": "Request a higher quota limit.",
				"url":         "https://cloud.google.com/docs/quotas/help/request_increase",
			}}},
		},
	}
}

// ---- 5xx ----

// internal: https://github.com/PublicAffairs/openai-gemini/issues/15
func internal() apiError {
	return apiError{Code: 500, Status: "INTERNAL",
		Message: "An internal error has occurred. Please retry or report in https://developers.generativeai.google/guide/troubleshooting"}
}

// overloaded: https://github.com/google-gemini/gemini-cli/issues/5191
// (also the in-stream error of StreamErrorInside).
func overloaded() apiError {
	return apiError{Code: 503, Status: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."}
}

// deadlineExpired503: https://github.com/tatookan/comfyui_ssl_gemini_EXP/issues/6
func deadlineExpired503() apiError {
	return apiError{Code: 503, Status: "UNAVAILABLE", Message: "Deadline expired before operation could complete."}
}

// gatewayTimeout: same text with 504.
// https://github.com/interviewstreet/hiring-agent/issues/284
func gatewayTimeout() apiError {
	return apiError{Code: 504, Status: "DEADLINE_EXCEEDED", Message: "Deadline expired before operation could complete."}
}

// nonJSONBody is an Envoy proxy's text/plain 503.
// https://github.com/CSSS/wall_e/issues/652
const nonJSONBody = "upstream connect error or disconnect/reset before headers. reset reason: overflow"

// jsonArrayBody is the body of a failed non-SSE stream: a JSON array of one
// error object.
// https://github.com/google-gemini/gemini-cli/issues/11196
func jsonArrayBody() []byte {
	b, err := json.Marshal([]map[string]any{{"error": map[string]any{
		"code":    503,
		"message": "The service is currently unavailable.",
		"errors": []map[string]string{{
			"message": "The service is currently unavailable.", "domain": "global", "reason": "backendError",
		}},
		"status": "UNAVAILABLE",
	}}})
	if err != nil {
		panic("geminitest: marshal array body: " + err.Error())
	}
	return b
}

// ---- 4xx ----

// invalidArgument: https://github.com/ikechan8370/chatgpt-plugin/issues/703
func invalidArgument(msg string) apiError {
	return apiError{Code: 400, Status: "INVALID_ARGUMENT", Message: msg}
}

const invalidArgumentMessage = "Request contains an invalid argument."

// apiKeyInvalid: https://github.com/continuedev/continue/issues/8516
func apiKeyInvalid() apiError {
	const msg = "API key not valid. Please pass a valid API key."
	return apiError{
		Code:    400,
		Status:  "INVALID_ARGUMENT",
		Message: msg,
		Details: []map[string]any{
			{"@type": typeErrorInfo, "reason": "API_KEY_INVALID", "domain": "googleapis.com",
				"metadata": map[string]string{"service": service}},
			{"@type": typeLocalizedMessage, "locale": "en-US", "message": msg},
		},
	}
}

// failedPrecondition: https://github.com/snailyp/gemini-balance/issues/328
func failedPrecondition() apiError {
	return apiError{Code: 400, Status: "FAILED_PRECONDITION", Message: "User location is not supported for the API use."}
}

// leakedKey: https://github.com/continuedev/continue/issues/10513
func leakedKey() apiError {
	return apiError{Code: 403, Status: "PERMISSION_DENIED",
		Message: "Your API key was reported as leaked. Please use another API key."}
}

// unregistered: https://github.com/PublicAffairs/openai-gemini/issues/92
func unregistered() apiError {
	return apiError{Code: 403, Status: "PERMISSION_DENIED",
		Message: "Method doesn't allow unregistered callers (callers without established identity). " +
			"Please use API Key or other form of API consumer identity to call this API."}
}

// serviceDisabled: text from
// https://github.com/google-gemini/deprecated-generative-ai-python/issues/10,
// details as in https://github.com/google-gemini/gemini-cli/issues/1343.
func serviceDisabled() apiError {
	activation := "https://console.developers.google.com/apis/api/" + service + "/overview?project=" + fakeProject
	msg := "Generative Language API has not been used in project " + fakeProject +
		" before or it is disabled. Enable it by visiting " + activation +
		" then retry. If you enabled this API recently, wait a few minutes for the action to propagate to our systems and retry."
	return apiError{
		Code:    403,
		Status:  "PERMISSION_DENIED",
		Message: msg,
		Details: []map[string]any{
			{"@type": typeErrorInfo, "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
				"metadata": map[string]string{
					"serviceTitle":  "Generative Language API",
					"consumer":      "projects/" + fakeProject,
					"containerInfo": fakeProject,
					"service":       service,
					"activationUrl": activation,
				}},
			{"@type": typeLocalizedMessage, "locale": "en-US", "message": msg},
			{"@type": typeHelp, "links": []map[string]string{{
				"description": "Google developers console API activation",
				"url":         activation,
			}}},
		},
	}
}

// notFound is the 404 of a retired or unknown model.
// https://github.com/wwardaww/gnome-gemini-ai/issues/21
func notFound(model string) apiError {
	return apiError{Code: 404, Status: "NOT_FOUND",
		Message: "models/" + model + " is not found for API version v1beta, or is not supported for generateContent. " +
			"Call ListModels to see the list of available models and their supported methods."}
}

// methodNotFound answers a path or method the API does not have (as the
// SDK's request to "v1beta/:generateContent" when it cannot encode a body).
// https://github.com/googleapis/google-api-php-client/issues/1870
func methodNotFound() apiError {
	return apiError{Code: 404, Status: "NOT_FOUND", Message: "Method not found."}
}
