package geminitest

import (
	"strconv"
	"time"

	"google.golang.org/genai"
)

// Fault names one way a request can go wrong, with the body and status the
// real API sends for it. The zero value OK is a normal answer.
type Fault int

// The faults the fake can answer with, grouped by what the caller sees: error
// answers (which the SDK returns as a genai.APIError, unless said otherwise),
// quiet 200s (an answer without text, and no error), and broken streams.
const (
	// OK answers normally (the model's text, finishReason STOP).
	OK Fault = iota

	// RateLimitMinute is a 429 whose QuotaFailure names a per-minute request
	// quota, with Help and RetryInfo (Step.RetryDelay, default 7s).
	RateLimitMinute
	// RateLimitTokens is RateLimitMinute on the per-minute input-token
	// quota (TPM) instead of the request quota.
	RateLimitTokens
	// DailyQuota is a 429 whose QuotaFailure names the per-day request quota.
	// The real API sends a RetryInfo here too (Step.RetryDelay, default 43s).
	DailyQuota
	// DailyAndMinute is one 429 listing a per-day and a per-minute violation.
	DailyAndMinute
	// LimitZero is a 429 whose QuotaFailure carries quotaValue "0": the model
	// is not available on this tier at all.
	LimitZero
	// SpendCap is the project spend cap: 429 RESOURCE_EXHAUSTED, no details.
	SpendCap
	// PrepayDepleted is the prepaid-billing twin of SpendCap: 429
	// RESOURCE_EXHAUSTED "Your prepayment credits are depleted. ...", no
	// details.
	PrepayDepleted
	// ResourceExhausted is the bare 429 "Resource has been exhausted (e.g.
	// check quota)." with no details.
	ResourceExhausted
	// RateLimitLegacy is the older 429 body: ErrorInfo RATE_LIMIT_EXCEEDED
	// with quota_limit metadata, and a Help link.
	RateLimitLegacy

	// Internal is 500 INTERNAL.
	Internal
	// Overloaded is 503 UNAVAILABLE "The model is overloaded. Please try
	// again later."
	Overloaded
	// DeadlineExpired503 is 503 UNAVAILABLE "Deadline expired before
	// operation could complete."
	DeadlineExpired503
	// GatewayTimeout is 504 DEADLINE_EXCEEDED.
	GatewayTimeout

	// InvalidArgument is 400 INVALID_ARGUMENT "Request contains an invalid
	// argument."
	InvalidArgument
	// APIKeyInvalid is 400 INVALID_ARGUMENT with ErrorInfo API_KEY_INVALID.
	APIKeyInvalid
	// FailedPrecondition is 400 FAILED_PRECONDITION "User location is not
	// supported for the API use."
	FailedPrecondition
	// LeakedKey is 403 PERMISSION_DENIED "Your API key was reported as
	// leaked. Please use another API key."
	LeakedKey
	// Unregistered is 403 PERMISSION_DENIED "Method doesn't allow
	// unregistered callers ...".
	Unregistered
	// ServiceDisabled is 403 PERMISSION_DENIED with ErrorInfo
	// SERVICE_DISABLED (metadata consumer, service) and a Help link.
	ServiceDisabled
	// NotFound is the 404 NOT_FOUND of a retired model.
	NotFound
	// NonJSONBody is a 503 whose body is proxy text, not JSON. The SDK
	// reports Code 503, Status "503 Service Unavailable", Message = the text.
	NonJSONBody
	// JSONArrayBody is a 503 whose body is a JSON array [{"error":{...}}], as
	// non-SSE streams send. The SDK puts the raw body in Message.
	JSONArrayBody
	// DropBeforeHeaders closes the connection before any response. The SDK
	// returns a transport error that wraps io.EOF.
	DropBeforeHeaders

	// PromptBlocked is a 200 with promptFeedback.blockReason SAFETY and no
	// candidates.
	PromptBlocked
	// FinishSafety is a 200 whose candidate has finishReason SAFETY, no
	// content and a blocked safety rating.
	FinishSafety
	// FinishRecitation is a 200 whose candidate has finishReason RECITATION
	// and no content.
	FinishRecitation
	// FinishOther is a 200 whose candidate has finishReason OTHER and no
	// content.
	FinishOther
	// FinishMalformedFunctionCall is a 200 whose candidate has finishReason
	// MALFORMED_FUNCTION_CALL and no content.
	FinishMalformedFunctionCall
	// MaxTokensEmpty is a 200 whose candidate has finishReason MAX_TOKENS and
	// content without parts (thinking used the whole budget).
	MaxTokensEmpty
	// StopNoParts is a 200 whose candidate has finishReason STOP and content
	// without parts.
	StopNoParts
	// NoCandidates is a 200 with only usageMetadata, modelVersion and
	// responseId.
	NoCandidates

	// The stream faults below act on streamGenerateContent. On
	// generateContent they answer like OK, except StreamStallFirst, which
	// delays the answer by Step.Stall.

	// StreamCutBetween sends Step.CutAfter complete events (default 1), then
	// aborts the connection. Over HTTP/1.1 the SDK yields io.ErrUnexpectedEOF;
	// over HTTP/2 a stream error.
	StreamCutBetween
	// StreamCutInside sends Step.CutAfter complete events (default 1) and half
	// of the next one, then aborts. The SDK yields an unmarshal error.
	StreamCutInside
	// StreamErrorInside sends Step.CutAfter events (default 1), then
	// data: {"error":{503 UNAVAILABLE overloaded}} and ends the body cleanly.
	// The SDK yields a genai.APIError.
	StreamErrorInside
	// StreamNoFinish sends every text chunk, none with a finishReason, and
	// ends the body cleanly. The SDK yields no error.
	StreamNoFinish
	// StreamStallFirst stalls for Step.Stall (default 1h) after the response
	// headers and before the first event, then answers normally.
	StreamStallFirst
	// StreamStallBetween sends Step.CutAfter events (default 1), stalls for
	// Step.Stall (default 1h), then sends the rest normally.
	StreamStallBetween
)

var faultNames = [...]string{
	OK:                          "OK",
	RateLimitMinute:             "RateLimitMinute",
	RateLimitTokens:             "RateLimitTokens",
	DailyQuota:                  "DailyQuota",
	DailyAndMinute:              "DailyAndMinute",
	LimitZero:                   "LimitZero",
	SpendCap:                    "SpendCap",
	PrepayDepleted:              "PrepayDepleted",
	ResourceExhausted:           "ResourceExhausted",
	RateLimitLegacy:             "RateLimitLegacy",
	Internal:                    "Internal",
	Overloaded:                  "Overloaded",
	DeadlineExpired503:          "DeadlineExpired503",
	GatewayTimeout:              "GatewayTimeout",
	InvalidArgument:             "InvalidArgument",
	APIKeyInvalid:               "APIKeyInvalid",
	FailedPrecondition:          "FailedPrecondition",
	LeakedKey:                   "LeakedKey",
	Unregistered:                "Unregistered",
	ServiceDisabled:             "ServiceDisabled",
	NotFound:                    "NotFound",
	NonJSONBody:                 "NonJSONBody",
	JSONArrayBody:               "JSONArrayBody",
	DropBeforeHeaders:           "DropBeforeHeaders",
	PromptBlocked:               "PromptBlocked",
	FinishSafety:                "FinishSafety",
	FinishRecitation:            "FinishRecitation",
	FinishOther:                 "FinishOther",
	FinishMalformedFunctionCall: "FinishMalformedFunctionCall",
	MaxTokensEmpty:              "MaxTokensEmpty",
	StopNoParts:                 "StopNoParts",
	NoCandidates:                "NoCandidates",
	StreamCutBetween:            "StreamCutBetween",
	StreamCutInside:             "StreamCutInside",
	StreamErrorInside:           "StreamErrorInside",
	StreamNoFinish:              "StreamNoFinish",
	StreamStallFirst:            "StreamStallFirst",
	StreamStallBetween:          "StreamStallBetween",
}

// String returns the constant's name, e.g. "RateLimitMinute", or "Fault(n)"
// for a value outside the list.
func (f Fault) String() string {
	if f >= 0 && int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "Fault(" + strconv.Itoa(int(f)) + ")"
}

// Step is one scripted answer. Its zero value is a normal answer with the
// model's latency and text.
type Step struct {
	// Fault is what goes wrong (OK: nothing).
	Fault Fault
	// Latency, when > 0, is the wait before this step answers, whatever it
	// answers (errors included). When 0, Model.Latency applies to 200
	// answers and errors answer at once.
	Latency time.Duration
	// RetryDelay is the RetryInfo delay of the scripted quota 429s. Default
	// 43s for DailyQuota and LimitZero, 7s for RateLimitMinute,
	// RateLimitTokens and DailyAndMinute.
	RetryDelay time.Duration
	// QuotaValue, when not empty, is the quotaValue (and the message's
	// "limit: ") of every violation in the scripted quota 429s, in place of
	// the model's Quota or the published default: any text, such as a value
	// too large for an int.
	QuotaValue string
	// CutAfter is, for stream faults, the number of complete events sent
	// before the fault: 0 means the default 1, a negative value means none.
	// StreamStallFirst ignores it.
	CutAfter int
	// Stall is how long the stall faults stall (default 1h). A stall ends
	// early when the request's context is done.
	Stall time.Duration
	// Text, when not empty, replaces the model's answer text.
	Text string
	// Thought, when not empty, is a thought summary (what a request with
	// includeThoughts gets) sent before the text: the first part of a unary
	// answer, and an event of its own, counted by CutAfter, before a
	// stream's first text event. Quiet faults ignore it.
	Thought string
	// Continuation makes the answer stop halfway with finishReason
	// CONTINUATION and a candidates[0].continuationToken. A request that
	// sends the token back (top-level "continuationToken", as the SDK's
	// automatic continuation does) is a request like any other: it takes the
	// next step, and its answer starts where the token points in that step's
	// text (so a Step.Text must be repeated on the step that follows).
	Continuation bool
	// PromptTokens, when > 0, is the promptTokenCount of the step's
	// answers in place of the estimate from the request (a quarter of its
	// characters): a long prompt without sending one. The quota still
	// counts the estimate.
	PromptTokens int
	// ThoughtsTokens is the thoughtsTokenCount of the step's answers (every
	// chunk of a stream: the count is a running total), CachedTokens their
	// cachedContentTokenCount (the part of the prompt served from the
	// cache, counted in promptTokenCount too). Both also count in
	// totalTokenCount as the API counts them.
	ThoughtsTokens, CachedTokens int
	// Parts, when not empty, is the whole answer: the candidate's parts, in
	// order, in place of the text (Text, Thought, Continuation and the
	// resume of a partial model turn do not apply). Any part goes: function
	// calls (with ID and Args), inline data, executable code, text, thought
	// parts. A unary answer carries them all; a stream sends one event per
	// part, the last with finishReason STOP. The model's signature is
	// stamped (on a copy) on the first function call and on every thought
	// part that has none (see Model.RequireSignatures). Quiet faults ignore
	// Parts; stream faults cut and stall its events as they do text events.
	Parts []*genai.Part
}

// Chance is a step drawn at random with probability P (0..1). A zero Chance
// is never drawn.
type Chance struct {
	Step Step
	P    float64
}

// Step defaults.
const (
	defaultMinuteRetry = 7 * time.Second
	defaultDailyRetry  = 43 * time.Second
	defaultStall       = time.Hour
)

func (st Step) retryDelay(daily bool) time.Duration {
	switch {
	case st.RetryDelay > 0:
		return st.RetryDelay
	case daily:
		return defaultDailyRetry
	default:
		return defaultMinuteRetry
	}
}

func (st Step) stall() time.Duration {
	if st.Stall > 0 {
		return st.Stall
	}
	return defaultStall
}

// cutAfter returns the events to send before a stream fault, clamped to
// [0, limit].
func (st Step) cutAfter(limit int) int {
	switch {
	case st.CutAfter < 0:
		return 0
	case st.CutAfter == 0:
		return min(1, limit)
	default:
		return min(st.CutAfter, limit)
	}
}
