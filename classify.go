package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/fault"
)

// Class names what a failure was. The zero value ClassNone means "no error".
type Class int

const (
	ClassNone            Class = iota // no error
	ClassUnknown                      // an error nothing else explains; retried once like a 5xx
	ClassCanceled                     // the caller cancelled, or the caller's own deadline passed
	ClassRateLimit                    // per-minute quota (RPM / TPM) 429: wait RetryAfter, then retry
	ClassDailyQuota                   // per-day quota 429: the model is done until midnight America/Los_Angeles
	ClassNoQuota                      // 429 with limit 0: the model is not available on this tier
	ClassSpendCap                     // spend / prepayment cap reached: the whole project is down
	ClassOverloaded                   // 503 UNAVAILABLE "model is overloaded"
	ClassServerError                  // 500 INTERNAL and other 5xx
	ClassTimeout                      // 504, 503 deadline expired, attempt timeout, net timeout
	ClassNetwork                      // connection refused / reset, EOF before the response
	ClassStreamCut                    // a stream cut after it started (transport, in-stream error, no finishReason)
	ClassBadRequest                   // 400 INVALID_ARGUMENT, a 404 about the URL, a request refused before sending: caller mistakes
	ClassAuth                         // invalid, leaked or unregistered API key (400 / 403)
	ClassServiceDisabled              // 403 SERVICE_DISABLED: the API is not enabled for the project
	ClassLocation                     // 400 FAILED_PRECONDITION: not available in the caller's region
	ClassNotFound                     // 404: the model is retired or never existed
	ClassBlocked                      // quiet 200: prompt or answer blocked (safety, recitation, ...)
	ClassEmpty                        // quiet 200: no candidates / no parts / OTHER / MALFORMED_FUNCTION_CALL
	ClassCircuitOpen                  // refused locally: the breaker is open or the model is cooling down
	ClassLocalRateLimit               // refused locally: the token bucket cannot grant in time
	ClassBulkheadFull                 // refused locally: the call's bulkhead is full (ErrBulkheadFull)
	ClassBudgetExhausted              // refused locally: the Client's spend reached its Budget (ErrBudgetExhausted), or, model scope, steered to a cheaper model near it

	numClasses // keep last
)

var classNames = [numClasses]string{
	ClassNone:            "none",
	ClassUnknown:         "unknown",
	ClassCanceled:        "canceled",
	ClassRateLimit:       "rate_limit",
	ClassDailyQuota:      "daily_quota",
	ClassNoQuota:         "no_quota",
	ClassSpendCap:        "spend_cap",
	ClassOverloaded:      "overloaded",
	ClassServerError:     "server_error",
	ClassTimeout:         "timeout",
	ClassNetwork:         "network",
	ClassStreamCut:       "stream_cut",
	ClassBadRequest:      "bad_request",
	ClassAuth:            "auth",
	ClassServiceDisabled: "service_disabled",
	ClassLocation:        "location",
	ClassNotFound:        "not_found",
	ClassBlocked:         "blocked",
	ClassEmpty:           "empty",
	ClassCircuitOpen:     "circuit_open",
	ClassLocalRateLimit:  "local_rate_limit",
	ClassBulkheadFull:    "bulkhead_full",
	ClassBudgetExhausted: "budget_exhausted",
}

// String returns the class's snake_case name ("rate_limit", "daily_quota",
// ...), suitable as a metric label, or "Class(n)" for an undeclared value.
func (c Class) String() string {
	if c >= 0 && c < numClasses {
		return classNames[c]
	}
	return "Class(" + strconv.Itoa(int(c)) + ")"
}

// Scope says how far a failure reaches.
type Scope int

const (
	// ScopeRequest: the request itself is the problem (bad argument, safety
	// block); no other model will help, the call returns at once.
	ScopeRequest Scope = iota
	// ScopeModel: this model is unwell or out of quota; the next model may answer.
	ScopeModel
	// ScopeProject: every model under this key is down (spend cap, invalid or
	// leaked key, API disabled); the cascade is skipped.
	ScopeProject
)

// String returns "request", "model" or "project", or "Scope(n)" for an
// undeclared value.
func (s Scope) String() string {
	switch s {
	case ScopeRequest:
		return "request"
	case ScopeModel:
		return "model"
	case ScopeProject:
		return "project"
	}
	return "Scope(" + strconv.Itoa(int(s)) + ")"
}

// coolDownKind says how long a model (or the project) is left alone after a
// failure, instead of counting it as a breaker failure.
type coolDownKind int

const (
	coolNone          coolDownKind = iota // no cool-down
	coolRetryAfter                        // for Verdict.RetryAfter (per-minute 429)
	coolUntilMidnight                     // until the next midnight America/Los_Angeles (daily quota)
	coolUntilRecheck                      // until CheckCascade sees the model again (404, limit 0)
	coolProject                           // the whole client, for WithProjectCoolDown or until CheckCascade succeeds
)

// String returns "none", "retry_after", "until_midnight", "until_recheck" or
// "project", or "coolDownKind(n)" for an undeclared value.
func (d coolDownKind) String() string {
	switch d {
	case coolNone:
		return "none"
	case coolRetryAfter:
		return "retry_after"
	case coolUntilMidnight:
		return "until_midnight"
	case coolUntilRecheck:
		return "until_recheck"
	case coolProject:
		return "project"
	}
	return "coolDownKind(" + strconv.Itoa(int(d)) + ")"
}

// Verdict is Classify's reading of an error. The zero value is the verdict of
// a nil error.
type Verdict struct {
	Class      Class         // what happened
	Retryable  bool          // worth another attempt on the same model after a delay
	Scope      Scope         // how far the failure reaches
	RetryAfter time.Duration // the server-stated delay (RetryInfo or "Please retry in 36.4s"), or for a local refusal the wait until the model may be sent a request; 0 when none
	// Rule names the rule of the classifier that decided, for logs and
	// tests: "quota_per_day", "unsupported_feature", "live_close/location",
	// ... (Classify's doc lists them). The names are stable. It is "" for
	// the errors this package makes itself (local refusals, the caller's
	// cancellation, a request refused before sending), whose Class says it
	// all.
	Rule       string
	cool       coolDownKind // how long to leave the model alone instead of counting a failure
	counts     bool         // counts as a breaker failure (the model is unwell)
	quotaLimit int          // the limit the server stated (QuotaFailure quotaValue), 0 when none
	quotaID    string       // the quotaId that decided a quota verdict, "" when none
}

// attemptTimeoutError marks the failure of an attempt whose own timeout fired
// while the caller's context was still live. Classify reads it as
// ClassTimeout (retryable, counted) where a bare context.DeadlineExceeded
// means the caller's deadline (ClassCanceled); an APIError inside it (the
// server answered as the timer fired) is classified as that APIError. The
// Client wraps an attempt's error in it whenever the attempt's context is done
// and the caller's is not. It unwraps to the error.
type attemptTimeoutError struct{ err error }

func (e *attemptTimeoutError) Error() string {
	return fmt.Sprintf("geminiguard: attempt timed out: %v", e.err)
}

// Unwrap returns the attempt's error.
func (e *attemptTimeoutError) Unwrap() error { return e.err }

// Classify reads err and says what it was, whether retrying the same model can
// help, and how far the failure reaches. It is pure, safe for concurrent use,
// and never panics; Classify(nil) is the zero Verdict. On an error returned by a
// Client method it gives the verdict of the failure that decided the outcome.
//
// On a *CascadeError it gives the verdict of the last failed attempt, on a
// *ModelError its Verdict. context.Canceled and the caller's own deadline
// are ClassCanceled; an attempt's own timeout, and an http.Client's Timeout,
// are ClassTimeout. A genai.APIError (value or pointer, however wrapped) is
// read by its structure first — code, status, QuotaFailure, RetryInfo and
// ErrorInfo details, an error body inside its Message — and by its text only
// where the API sends nothing else (spend caps, "limit: 0", "Please retry in
// 36.4s", region blocks, a 404 about the URL rather than the model, which is
// bad_request). RetryAfter is the larger of RetryInfo's delay (whole
// seconds) and the message's (exact). A 499 CANCELLED answer is
// server_error: the server gave up. A request this package refused before
// sending it is bad_request; an error whose own methods panic is unknown.
//
// An error that reached the caller as another layer's text (another SDK's
// exception, a gateway's body, a console or log line) is read the same way:
// an error body inside the text (JSON or a Python repr, escaped or cut),
// else the status the text states ("429 RESOURCE_EXHAUSTED", "[503 Service
// Unavailable]") or the API's own wording ("Resource exhausted. Please try
// again later."). Text that shows none of these is unknown.
//
// Scope rules beyond the status code: a 400 about a feature this model
// lacks (a thinking level, a penalty, text output on a TTS model,
// function_response.parts, a modality) is model scope, so the cascade moves
// on; an IAM denial, a refusal of the project or of the account (Code
// Assist's "forbidden"), and an embeddings quota held per project and region
// are project scope; a 499 without the server's own backendError reason is
// retried but not counted against the model. In a 429, a per-day quota or a
// spend cap named anywhere, in the structure or the text (mangled or cut),
// outranks a stated delay, which never makes an error retryable on its own.
// A Live API close frame (1007, 1008, 1011) is read by its code and
// Google's reason. NO_IMAGE and IMAGE_OTHER finishes are empty, request
// scope, not retried.
//
// Verdict.Rule names the rule that decided: quota_limit_zero,
// quota_per_day, spend_cap, migrate_for_quota, project_quota,
// quota_per_minute, key_invalid, location, deadline_too_short,
// unsupported_feature, bad_request, unauthenticated, service_disabled,
// iam_denied, project_denied, account_forbidden, model_forbidden,
// url_not_found, model_not_found, request_timeout, aborted, cancelled,
// server_cancelled, deadline_expired, overloaded, gateway_timeout,
// server_error, client_error, transport_timeout, transport_network,
// stream_cut, malformed_body, unknown, blocked, empty, empty_by_request,
// image_not_drawn, and "live_close/" followed by the rule the close
// reason matched.
//
// The base verdict of each class (a few cases narrow it, as noted):
//
//	class             retryable  scope    cool-down       counts
//	unknown           yes        model    -               yes
//	canceled          no         request  -               no
//	rate_limit        yes        model    retry_after     no   (a per-project per-region embeddings quota: project, project)
//	daily_quota       no         model    until_midnight  no
//	no_quota          no         model    until_recheck   no
//	spend_cap         no         project  project         no
//	overloaded        yes        model    -               yes
//	server_error      yes        model    -               yes  (a 499 not of the server's making: no)
//	timeout           yes        model    -               yes  (an attempt abandoned at its learned deadline: no)
//	network           yes        model    -               yes
//	stream_cut        yes        model    -               yes
//	bad_request       no         request  -               no   (a feature this model lacks: model)
//	auth              no         project  project         no   (a 403 without a key- or project-wide sign: model, until_recheck)
//	service_disabled  no         project  project         no
//	location          no         project  project         no
//	not_found         no         model    until_recheck   no
//	blocked           no         request  -               no
//	empty             yes        model    -               no   (MAX_TOKENS, LANGUAGE, NO_IMAGE, IMAGE_OTHER: not retryable, request)
//	circuit_open      no         model    -               no   (the whole project cooling down: project)
//	local_rate_limit  no         model    -               no
//	bulkhead_full     no         request  -               no
//	budget_exhausted  no         project  -               no   (a skip for a cheaper model near the budget: model)
func Classify(err error) (v Verdict) {
	if err == nil {
		return Verdict{}
	}
	defer func() {
		if recover() != nil {
			v = base(ClassUnknown)
		}
	}()
	return classify(err)
}

// base returns the verdict every error of class c starts from.
func base(c Class) Verdict {
	v := Verdict{Class: c}
	switch c {
	case ClassUnknown, ClassOverloaded, ClassServerError, ClassTimeout, ClassNetwork, ClassStreamCut:
		v.Retryable, v.Scope, v.counts = true, ScopeModel, true
	case ClassRateLimit:
		v.Retryable, v.Scope, v.cool = true, ScopeModel, coolRetryAfter
	case ClassDailyQuota:
		v.Scope, v.cool = ScopeModel, coolUntilMidnight
	case ClassNoQuota, ClassNotFound:
		v.Scope, v.cool = ScopeModel, coolUntilRecheck
	case ClassSpendCap, ClassAuth, ClassServiceDisabled, ClassLocation:
		v.Scope, v.cool = ScopeProject, coolProject
	case ClassEmpty:
		v.Retryable, v.Scope = true, ScopeModel
	case ClassCircuitOpen, ClassLocalRateLimit:
		v.Scope = ScopeModel
	case ClassBudgetExhausted:
		v.Scope = ScopeProject
	}
	return v
}

// by returns v decided by the named rule.
func (v Verdict) by(rule string) Verdict {
	v.Rule = rule
	return v
}

// classify is Classify without the panic guard.
func classify(err error) Verdict {
	var ce *CascadeError
	if errors.As(err, &ce) && ce != nil {
		if last := ce.last(); last != nil {
			return classify(last)
		}
	}
	var me *ModelError
	if errors.As(err, &me) && me != nil {
		if me.Verdict.Class != ClassNone {
			return me.Verdict
		}
		if me.Err != nil {
			return classify(me.Err)
		}
	}
	var we *waitError
	if errors.As(err, &we) && we != nil && we.Err != nil {
		return classify(we.Err)
	}

	if errors.Is(err, ErrBulkheadFull) {
		return base(ClassBulkheadFull) // before the caller's deadline, which it may match too
	}
	if errors.Is(err, ErrBudgetExhausted) {
		return base(ClassBudgetExhausted)
	}
	var cut *cutError
	if errors.As(err, &cut) && cut != nil {
		v := base(ClassTimeout)
		v.counts = false // slow, not unwell: the breaker does not count it
		return v
	}
	if errors.Is(err, context.Canceled) {
		return base(ClassCanceled)
	}
	var ate *attemptTimeoutError
	if errors.As(err, &ate) && ate != nil {
		if _, answered := asAPIError(ate.err); !answered {
			return base(ClassTimeout)
		}
	} else if errors.Is(err, context.DeadlineExceeded) {
		if strings.Contains(err.Error(), "Client.Timeout exceeded") {
			// The http.Client's own Timeout, not the caller's deadline.
			return base(ClassTimeout)
		}
		return base(ClassCanceled)
	}

	var bad *requestError
	if errors.As(err, &bad) && bad != nil || errors.Is(err, ErrClosed) {
		return base(ClassBadRequest)
	}
	var re *ResponseError
	if errors.As(err, &re) && re != nil {
		return quietVerdict(re.Kind, re.Reason)
	}
	var se *StreamError
	if errors.As(err, &se) && se != nil {
		if ae, ok := asAPIError(se.Err); ok {
			return apiVerdict(ae)
		}
		return base(ClassStreamCut)
	}
	if ae, ok := asAPIError(err); ok {
		return apiVerdict(ae)
	}

	var cool *CoolingError
	if errors.As(err, &cool) && cool != nil {
		v := base(ClassCircuitOpen)
		if cool.Model == "" {
			v.Scope = ScopeProject
		}
		return v
	}
	for _, row := range classSentinels {
		if errors.Is(err, row.sentinel) {
			return base(row.classes[0])
		}
	}
	switch {
	case errors.Is(err, ErrBlocked), errors.Is(err, ErrEmptyResponse):
		return quietVerdict(err, "")
	case errors.Is(err, ErrStreamInterrupted):
		return base(ClassStreamCut)
	}
	return transportVerdict(err)
}

// asAPIError finds a genai.APIError in err's chain: the value the SDK
// returns, or a non-nil pointer to one.
func asAPIError(err error) (genai.APIError, bool) {
	var ae genai.APIError
	if errors.As(err, &ae) {
		return ae, true
	}
	var p *genai.APIError
	if errors.As(err, &p) && p != nil {
		return *p, true
	}
	return genai.APIError{}, false
}

// quietVerdict classifies a quiet 200 of the given kind (a *ResponseError's
// Kind, or an error matching it) and reason.
func quietVerdict(kind error, reason string) Verdict {
	if errors.Is(kind, ErrBlocked) {
		return base(ClassBlocked).by("blocked")
	}
	v := base(ClassEmpty).by("empty")
	switch reason {
	case string(genai.FinishReasonMaxTokens), string(genai.FinishReasonLanguage):
		// The caller's maxOutputTokens (or thinking budget) or the prompt's
		// language is the problem: the same request fails again anywhere.
		v.Retryable, v.Scope, v.Rule = false, ScopeRequest, "empty_by_request"
	case string(genai.FinishReasonNoImage), string(genai.FinishReasonImageOther):
		// An image model that would not draw what was asked: the same
		// prompt is refused again, and the model is not unwell.
		v.Retryable, v.Scope, v.Rule = false, ScopeRequest, "image_not_drawn"
	}
	return v
}

// transportVerdict classifies what is neither an API answer nor one of ours:
// errors of the HTTP round trip, of reading the body, and anything else.
func transportVerdict(err error) Verdict {
	var ue *url.Error
	if errors.As(err, &ue) && ue != nil {
		// The SDK's doRequest wraps the http.Client error: no response yet.
		if ue.Timeout() {
			return base(ClassTimeout).by("transport_timeout")
		}
		return base(ClassNetwork).by("transport_network")
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return base(ClassTimeout).by("transport_timeout")
	}
	text := err.Error()
	if f, ok := fault.Embedded(text); ok {
		// An error body in the text outweighs the words around it.
		return textVerdict(f.Unnest())
	}
	if v, ok := closeVerdict(text); ok {
		return v
	}
	switch {
	case strings.Contains(text, "deserializeUnaryResponse: error unmarshalling response"):
		// A 200 whose body is not JSON: the server's fault, retry.
		return base(ClassServerError).by("malformed_body")
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), cutText.MatchString(text):
		// Outside a *url.Error the SDK only returns errors of reading a body
		// that had started: the answer was cut.
		return base(ClassStreamCut).by("stream_cut")
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, io.EOF):
		return base(ClassNetwork).by("transport_network")
	}
	if f, ok := fault.FromText(text); ok {
		return textVerdict(f)
	}
	return base(ClassUnknown).by("unknown")
}

// closeFrame matches a Live API WebSocket close frame of code 1007 (invalid
// frame payload data: the server's INVALID_ARGUMENT and other refusals of
// the setup), 1008 (policy violation: a model, project or session it will
// not serve) or 1011 (internal error), as the SDKs and WebSocket libraries
// print them: "received 1007 (invalid frame payload data) <reason>"
// (Python websockets), "Close(code=1011, reason='...')", "websocket: close
// 1008 (policy violation): <reason>" (gorilla/websocket), "code=1007
// reason=...", "failed (1007): <reason>".
var closeFrame = regexp.MustCompile(`(?:\bcode=|\()(100[78]|1011)\b|\b(100[78]|1011) \((?:invalid frame payload data|policy violation|internal error)\)`)

// closeVerdict classifies a Live API close frame in text by its code and
// the reason Google wrote in it, which is the text of the status the
// HTTP API would have answered: the reason decides within the code. Its
// Rule is "live_close/" and the rule the reason matched.
func closeVerdict(text string) (Verdict, bool) {
	m := closeFrame.FindStringSubmatch(text)
	if m == nil {
		return Verdict{}, false
	}
	f := fault.Fault{Message: text}
	switch code := m[1] + m[2]; {
	case fault.QuotaText.MatchString(text), fault.SpendText.MatchString(text):
		f.Code = 429
	case code == "1011":
		f.Code = 500
		if fault.OverloadText.MatchString(text) || unavailableText.MatchString(text) || fault.DeadlineText.MatchString(text) {
			f.Code = 503
		}
	case code == "1008" && fault.ProjectText.MatchString(text), code == "1008" && permissionText.MatchString(text):
		f.Code = 403
	case code == "1008" && liveModelText.MatchString(text):
		f.Code = 404
	default: // 1007, and a 1008 about the request (a stale session) or the model's abilities
		f.Code = 400
	}
	v := textVerdict(f)
	v.Rule = "live_close/" + v.Rule
	return v, true
}

// textVerdict classifies a fault read from an error's text.
func textVerdict(f fault.Fault) Verdict {
	v := verdictOf(f)
	v.RetryAfter = f.RetryAfter()
	return v
}

// cutText matches the texts of transport errors that end a response that had
// started: an HTTP/2 stream reset (net/http's unexported http2StreamError),
// a GOAWAY or lost connection, a TCP reset, and the SDK's own stream parse
// errors ("iterateResponseStream: error unmarshalling data ...",
// "iterateResponseStream: invalid stream chunk: ...").
var cutText = regexp.MustCompile(`stream error: stream ID \d+|http2: server sent GOAWAY|http2: client connection lost|connection reset by peer|iterateResponseStream: `)

// ---- genai.APIError ----

// apiVerdict classifies an API error.
func apiVerdict(ae genai.APIError) Verdict {
	f := fault.Read(ae)
	v := verdictOf(f)
	v.RetryAfter = f.RetryAfter()
	return v
}

// verdictOf classifies f by code, then by details and text within a code.
func verdictOf(f fault.Fault) Verdict {
	switch c := f.Code; {
	case c == 429:
		return quotaVerdict(f)
	case c == 400:
		switch {
		case keyProblem(f):
			return base(ClassAuth).by("key_invalid")
		case fault.LocationText.MatchString(f.Message):
			return base(ClassLocation).by("location")
		case fault.DeadlineShortText.MatchString(f.Message):
			return base(ClassBadRequest).by("deadline_too_short")
		case fault.UnsupportedText.MatchString(f.Message):
			// A thinking level, a penalty, text output on a TTS model, a
			// part shape this model does not take: the next model may.
			v := base(ClassBadRequest).by("unsupported_feature")
			v.Scope = ScopeModel
			return v
		}
		return base(ClassBadRequest).by("bad_request")
	case c == 401:
		return base(ClassAuth).by("unauthenticated")
	case c == 403:
		switch {
		case f.Reason() == "SERVICE_DISABLED" || fault.ServiceDisabledText.MatchString(f.Message):
			return base(ClassServiceDisabled).by("service_disabled")
		case keyProblem(f):
			return base(ClassAuth).by("key_invalid")
		case f.Reason() == "IAM_PERMISSION_DENIED":
			// The caller's role lacks the permission: for every model.
			return base(ClassAuth).by("iam_denied")
		case fault.ProjectText.MatchString(f.Message):
			return base(ClassAuth).by("project_denied")
		case f.Legacy == "forbidden" || f.Reason() == "forbidden":
			// The legacy "errors" list of Google's front ends (Code Assist)
			// refuses the account, whatever the model.
			return base(ClassAuth).by("account_forbidden")
		}
		// "The caller does not have permission" also answers a key that may
		// not use this one model (a preview) while the others answer.
		v := base(ClassAuth).by("model_forbidden")
		v.Scope, v.cool = ScopeModel, coolUntilRecheck
		return v
	case c == 404:
		if pathText.MatchString(f.Message) {
			// The URL names no method of the API (a malformed path, a
			// proxy's stray prefix): the request is wrong, not the model.
			return base(ClassBadRequest).by("url_not_found")
		}
		return base(ClassNotFound).by("model_not_found")
	case c == 408:
		return base(ClassTimeout).by("request_timeout")
	case c == 409:
		// ABORTED: a conflict worth retrying.
		return base(ClassServerError).by("aborted")
	case c == 499:
		// CANCELLED as an answer (our own cancellation never reads one).
		// With the server's own reason, the server gave up; without it, the
		// caller's side (a timeout too short, a dropped connection) did: worth
		// another attempt, but no sign that the model is unwell.
		v := base(ClassServerError).by("server_cancelled")
		if f.Legacy != "backendError" {
			v.counts, v.Rule = false, "cancelled"
		}
		return v
	case c == 503:
		if fault.DeadlineText.MatchString(f.Message) {
			return base(ClassTimeout).by("deadline_expired")
		}
		return base(ClassOverloaded).by("overloaded")
	case c == 504:
		return base(ClassTimeout).by("gateway_timeout")
	case c >= 500 && c <= 599:
		return base(ClassServerError).by("server_error")
	case c >= 400 && c <= 499:
		return base(ClassBadRequest).by("client_error")
	}
	return base(ClassUnknown).by("unknown")
}

var (
	// pathText: 404s about the URL rather than a model: "Method not found."
	// (the API's answer to a path it does not serve) and the Google front
	// end's HTML page "The requested URL <code>/x</code> was not found on
	// this server.". A retired model's 404 names it: "models/X is not
	// found for API version v1beta, or is not supported for generateContent."
	pathText = regexp.MustCompile(`(?is)\bmethod not found\b|the requested URL\b.*\bwas not found on this server`)
	// permissionText: "Permission denied" and "does not have permission",
	// the Live API's 1008 refusals of the caller.
	permissionText = regexp.MustCompile(`(?i)permission denied|does not have permission`)
	// liveModelText: the Live API's 1008 for a model it does not serve:
	// "models/X is not found for API version v1beta, or is not supported
	// for bidiGenerateContent", "Publisher Model `projects/...` ...".
	liveModelText = regexp.MustCompile(`(?i)models/\S+ is not found|publisher model`)
	// unavailableText: 503's "The service is currently unavailable.".
	unavailableText = regexp.MustCompile(`(?i)service is currently unavailable`)
	// perDayText: a per-day quota named in words or ids anywhere in a 429's
	// text: "... limit 'Gemini 2.5 Pro Requests per day per user per tier'",
	// "GenerateRequestsPerDayPerProjectPerModel", "requests_per_day".
	perDayText = regexp.MustCompile(`(?i)per[ _-]?day`)
	// migrateText: "You exceeded your current quota. Please migrate to
	// Gemini 2.5 Pro Preview (...) for higher quota limits.": an
	// experimental model's daily free quota, gone until tomorrow.
	migrateText = regexp.MustCompile(`(?i)please migrate to .{1,200}? for higher quota`)
	// projectQuotaText: quotas of embeddings held per project and region,
	// shared by every embedding model: "BatchEmbedContentsRequestsPerMinute
	// PerProjectPerRegion", "Batch embed contents request limit per minute
	// for a region".
	projectQuotaText = regexp.MustCompile(`(?i)embed\w*PerProjectPerRegion|embed contents? request limit per minute for a region`)
)

// keyReasons are the ErrorInfo reasons that condemn the key or the project
// behind it, for every model.
var keyReasons = map[string]bool{
	"API_KEY_INVALID":               true,
	"API_KEY_EXPIRED":               true,
	"API_KEY_SERVICE_BLOCKED":       true,
	"API_KEY_HTTP_REFERRER_BLOCKED": true,
	"API_KEY_IP_ADDRESS_BLOCKED":    true,
	"API_KEY_ANDROID_APP_BLOCKED":   true,
	"API_KEY_IOS_APP_BLOCKED":       true,
	"CONSUMER_SUSPENDED":            true,
	"CONSUMER_INVALID":              true,
	"BILLING_DISABLED":              true,
}

// keyProblem reports an error about the key or the project behind it.
func keyProblem(f fault.Fault) bool {
	return keyReasons[f.Reason()] || fault.KeyText.MatchString(f.Message)
}

// quotaVerdict classifies a 429: which quota, and whether waiting helps.
// Precedence: a limit of 0, then a per-day quota or a spend cap named
// anywhere (structure or text: a stated delay never makes either one
// retryable), then a project-wide quota, then the per-minute quota.
func quotaVerdict(f fault.Fault) Verdict {
	qs := f.Quotas()
	if len(qs) == 0 && fault.SpendText.MatchString(f.Message) {
		return base(ClassSpendCap).by("spend_cap")
	}
	pick := func(c Class, q fault.Quota, rule string) Verdict {
		v := base(c).by(rule)
		v.quotaID, v.quotaLimit = q.ID, q.Limit
		return v
	}
	for _, q := range qs {
		if q.Known && q.Limit == 0 {
			return pick(ClassNoQuota, q, "quota_limit_zero")
		}
	}
	for _, q := range qs {
		if perDayText.MatchString(q.ID) {
			return pick(ClassDailyQuota, q, "quota_per_day")
		}
	}
	switch {
	case perDayText.MatchString(f.Message):
		return base(ClassDailyQuota).by("quota_per_day")
	case fault.SpendText.MatchString(f.Message):
		return base(ClassSpendCap).by("spend_cap")
	case len(qs) == 0 && migrateText.MatchString(f.Message):
		// Only the message: the same answer lists its quotas when it has
		// them (a per-minute one as well as a per-day one).
		return base(ClassDailyQuota).by("migrate_for_quota")
	}
	var q fault.Quota
	if len(qs) > 0 {
		q = qs[0]
	}
	if projectQuotaText.MatchString(q.ID) || projectQuotaText.MatchString(f.Message) {
		// Every model under the project shares it: cool the project.
		v := pick(ClassRateLimit, q, "project_quota")
		v.Scope, v.cool = ScopeProject, coolProject
		return v
	}
	return pick(ClassRateLimit, q, "quota_per_minute")
}

// ---- quiet 200s ----

// responseError reads a complete GenerateContent response (not an
// intermediate stream chunk, which may rightly carry nothing) and returns a
// *ResponseError when it holds no usable answer, nil when it does. It reads
// the first candidate, as resp.Text() does:
//
//   - promptFeedback.blockReason set: ErrBlocked with that reason;
//   - no response, no candidates: ErrEmptyResponse "NO_CANDIDATES";
//   - finishReason SAFETY, PROHIBITED_CONTENT, BLOCKLIST, SPII, RECITATION,
//     IMAGE_SAFETY, IMAGE_PROHIBITED_CONTENT or IMAGE_RECITATION: ErrBlocked
//     with that reason, whatever partial content survived;
//   - MALFORMED_FUNCTION_CALL or UNEXPECTED_TOOL_CALL: ErrEmptyResponse with
//     that reason, even with parts (the API itself condemns the call);
//   - no answer part (non-thought text, a function call, inline or file
//     data, executable code or its result): ErrEmptyResponse with the
//     finishReason (OTHER, MAX_TOKENS, LANGUAGE, TOO_MANY_TOOL_CALLS, ...),
//     or "NO_PARTS" when it is STOP or unset;
//   - anything else, MAX_TOKENS with text included, is an answer: nil.
func responseError(model string, resp *genai.GenerateContentResponse) error {
	return answerError(model, resp, false)
}

// answerError is responseError for the last response of an answer that had
// an answer part before it (answeredBefore: a stream's earlier chunks), so
// that a stream and a unary answer fail by the same rules.
func answerError(model string, resp *genai.GenerateContentResponse, answeredBefore bool) error {
	fail := func(kind error, reason string) error {
		return &ResponseError{Kind: kind, Model: model, Reason: reason, Response: resp}
	}
	if resp != nil && resp.PromptFeedback != nil && resp.PromptFeedback.BlockReason != "" {
		return fail(ErrBlocked, string(resp.PromptFeedback.BlockReason))
	}
	if resp == nil || len(resp.Candidates) == 0 || resp.Candidates[0] == nil {
		return fail(ErrEmptyResponse, "NO_CANDIDATES")
	}
	c := resp.Candidates[0]
	reason := string(c.FinishReason)
	switch c.FinishReason {
	case genai.FinishReasonSafety, genai.FinishReasonProhibitedContent, genai.FinishReasonBlocklist,
		genai.FinishReasonSPII, genai.FinishReasonRecitation, genai.FinishReasonImageSafety,
		genai.FinishReasonImageProhibitedContent, genai.FinishReasonImageRecitation:
		return fail(ErrBlocked, reason)
	case genai.FinishReasonMalformedFunctionCall, genai.FinishReasonUnexpectedToolCall:
		return fail(ErrEmptyResponse, reason)
	}
	if answeredBefore || hasAnswer(c.Content) {
		return nil
	}
	switch c.FinishReason {
	case "", genai.FinishReasonStop, genai.FinishReasonUnspecified:
		reason = "NO_PARTS"
	}
	return fail(ErrEmptyResponse, reason)
}

// hasAnswer reports whether content holds a part the caller can use:
// non-thought text, a function call, inline or file data, executable code or
// its result.
func hasAnswer(content *genai.Content) bool {
	if content == nil {
		return false
	}
	for _, p := range content.Parts {
		switch {
		case p == nil:
		case p.Text != "" && !p.Thought,
			p.FunctionCall != nil, p.InlineData != nil, p.FileData != nil,
			p.ExecutableCode != nil, p.CodeExecutionResult != nil:
			return true
		}
	}
	return false
}
