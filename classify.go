package geminiguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/genai"
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
	if errors.As(err, &bad) && bad != nil {
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
	if f, ok := embeddedFault(text); ok {
		// An error body in the text outweighs the words around it.
		return f.unnest().textVerdict()
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
	if f, ok := textFault(text); ok {
		return f.textVerdict()
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
	f := fault{message: text}
	switch code := m[1] + m[2]; {
	case quotaText.MatchString(text), spendText.MatchString(text):
		f.code = 429
	case code == "1011":
		f.code = 500
		if overloadText.MatchString(text) || unavailableText.MatchString(text) || deadlineText.MatchString(text) {
			f.code = 503
		}
	case code == "1008" && projectText.MatchString(text), code == "1008" && permissionText.MatchString(text):
		f.code = 403
	case code == "1008" && liveModelText.MatchString(text):
		f.code = 404
	default: // 1007, and a 1008 about the request (a stale session) or the model's abilities
		f.code = 400
	}
	v := f.textVerdict()
	v.Rule = "live_close/" + v.Rule
	return v, true
}

// textVerdict classifies a fault read from an error's text.
func (f fault) textVerdict() Verdict {
	v := f.verdict()
	v.RetryAfter = f.retryAfter()
	return v
}

// cutText matches the texts of transport errors that end a response that had
// started: an HTTP/2 stream reset (net/http's unexported http2StreamError),
// a GOAWAY or lost connection, a TCP reset, and the SDK's own stream parse
// errors ("iterateResponseStream: error unmarshalling data ...",
// "iterateResponseStream: invalid stream chunk: ...").
var cutText = regexp.MustCompile(`stream error: stream ID \d+|http2: server sent GOAWAY|http2: client connection lost|connection reset by peer|iterateResponseStream: `)

// ---- genai.APIError ----

// fault is an APIError normalised: the error object inside a JSON Message
// unwrapped, the code filled in from the status when the body had none.
type fault struct {
	code    int
	status  string // canonical google.rpc code name ("RESOURCE_EXHAUSTED"), "" when none was sent
	message string
	details []map[string]any
	legacy  string // the first reason of the body's legacy "errors" list ("forbidden", "backendError"), "" when none
}

// maxNesting bounds how many error objects nested in messages are unwrapped
// (proxies wrap the API's body in their own).
const maxNesting = 3

// readFault normalises ae.
func readFault(ae genai.APIError) fault {
	f := fault{code: ae.Code, message: ae.Message, details: ae.Details}
	var lineCode int
	f.status, lineCode = splitStatus(ae.Status)
	if f.code == 0 {
		f.code = lineCode
	}
	return f.unnest()
}

// unnest replaces f's code, status and details with those of the error
// bodies its message holds (a proxy's body around the API's, or another
// layer's text around one), up to maxNesting deep, and fills a missing code
// from the status name.
func (f fault) unnest() fault {
	for range maxNesting {
		in, ok := innerFault(f.message)
		if !ok {
			in, ok = embeddedFault(f.message)
		}
		if !ok {
			break
		}
		if in.code != 0 {
			f.code = in.code
		}
		if in.status != "" {
			f.status = in.status
		}
		if len(in.details) > 0 {
			f.details = in.details
		}
		if in.legacy != "" {
			f.legacy = in.legacy
		}
		f.message = in.message
	}
	if f.code == 0 {
		f.code = statusCodes[f.status]
	}
	return f
}

// statusCodes maps google.rpc code names to the HTTP codes the API pairs
// them with.
var statusCodes = map[string]int{
	"INVALID_ARGUMENT":    400,
	"FAILED_PRECONDITION": 400,
	"OUT_OF_RANGE":        400,
	"UNAUTHENTICATED":     401,
	"PERMISSION_DENIED":   403,
	"NOT_FOUND":           404,
	"ALREADY_EXISTS":      409,
	"ABORTED":             409,
	"RESOURCE_EXHAUSTED":  429,
	"CANCELLED":           499,
	"UNKNOWN":             500,
	"INTERNAL":            500,
	"DATA_LOSS":           500,
	"UNIMPLEMENTED":       501,
	"UNAVAILABLE":         503,
	"DEADLINE_EXCEEDED":   504,
}

// codeName matches a google.rpc code name; anything else in Status is an HTTP
// status line such as "503 Service Unavailable".
var codeName = regexp.MustCompile(`^[A-Z][A-Z_]*$`)

// splitStatus reads an APIError Status: a code name, or an HTTP status line
// whose leading number it returns.
func splitStatus(s string) (name string, code int) {
	s = strings.TrimSpace(s)
	if codeName.MatchString(s) {
		return s, 0
	}
	digits := s
	if i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		digits = s[:i]
	}
	if n, err := strconv.Atoi(digits); err == nil && n >= 100 && n <= 599 {
		return "", n
	}
	return "", 0
}

// innerFault reads a Message that is itself an error body: {"error":{...}}
// or a JSON array of them (what a non-SSE stream sends), as the SDK puts
// bodies it could not read as one error object into Message.
func innerFault(msg string) (fault, bool) {
	msg = strings.TrimSpace(msg)
	if msg == "" || (msg[0] != '{' && msg[0] != '[') {
		return fault{}, false
	}
	var body any
	if json.Unmarshal([]byte(msg), &body) != nil {
		return fault{}, false
	}
	return bodyFault(body)
}

// bodyFault reads a decoded error body: {"error":{...}} or an array of them.
func bodyFault(body any) (fault, bool) {
	candidates := []any{body}
	if arr, ok := body.([]any); ok {
		candidates = arr
	}
	for _, c := range candidates {
		obj, _ := c.(map[string]any)
		e, ok := obj["error"].(map[string]any)
		if !ok {
			continue
		}
		f := fault{message: str(e["message"])}
		f.status, _ = splitStatus(str(e["status"]))
		f.code, _ = number(e["code"])
		for _, d := range list(e["details"]) {
			if m, ok := d.(map[string]any); ok {
				f.details = append(f.details, m)
			}
		}
		for _, x := range list(e["errors"]) {
			if f.legacy = field(x, "reason"); f.legacy != "" {
				break
			}
		}
		return f, true
	}
	return fault{}, false
}

// apiVerdict classifies an API error.
func apiVerdict(ae genai.APIError) Verdict {
	f := readFault(ae)
	v := f.verdict()
	v.RetryAfter = f.retryAfter()
	return v
}

// verdict classifies f by code, then by details and text within a code.
func (f fault) verdict() Verdict {
	switch c := f.code; {
	case c == 429:
		return f.quotaVerdict()
	case c == 400:
		switch {
		case f.keyProblem():
			return base(ClassAuth).by("key_invalid")
		case locationText.MatchString(f.message):
			return base(ClassLocation).by("location")
		case deadlineShortText.MatchString(f.message):
			return base(ClassBadRequest).by("deadline_too_short")
		case unsupportedText.MatchString(f.message):
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
		case f.reason() == "SERVICE_DISABLED" || serviceDisabledText.MatchString(f.message):
			return base(ClassServiceDisabled).by("service_disabled")
		case f.keyProblem():
			return base(ClassAuth).by("key_invalid")
		case f.reason() == "IAM_PERMISSION_DENIED":
			// The caller's role lacks the permission: for every model.
			return base(ClassAuth).by("iam_denied")
		case projectText.MatchString(f.message):
			return base(ClassAuth).by("project_denied")
		case f.legacy == "forbidden" || f.reason() == "forbidden":
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
		if pathText.MatchString(f.message) {
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
		if f.legacy != "backendError" {
			v.counts, v.Rule = false, "cancelled"
		}
		return v
	case c == 503:
		if deadlineText.MatchString(f.message) {
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
	// locationText: 400 FAILED_PRECONDITION "User location is not supported
	// for the API use." (also "... without a billing account linked.").
	locationText = regexp.MustCompile(`(?i)user location is not supported|not available in your country`)
	// serviceDisabledText: "Generative Language API has not been used in
	// project N before or it is disabled."
	serviceDisabledText = regexp.MustCompile(`(?i)has not been used in project .* or it is disabled`)
	// keyText: messages that condemn the key or the project behind it.
	keyText = regexp.MustCompile(`(?i)api key not valid|api key not found|api key expired|reported as leaked|unregistered callers|has been suspended`)
	// pathText: 404s about the URL rather than a model: "Method not found."
	// (the API's answer to a path it does not serve) and the Google front
	// end's HTML page "The requested URL <code>/x</code> was not found on
	// this server.". A retired model's 404 names it: "models/X is not
	// found for API version v1beta, or is not supported for generateContent."
	pathText = regexp.MustCompile(`(?is)\bmethod not found\b|the requested URL\b.*\bwas not found on this server`)
	// deadlineText: 503 UNAVAILABLE "Deadline expired before operation could
	// complete."
	deadlineText = regexp.MustCompile(`(?i)deadline expired`)
	// deadlineShortText: 400 INVALID_ARGUMENT "Manually set deadline 5s is
	// too short. Minimum allowed deadline is 10s.": the caller's deadline.
	deadlineShortText = regexp.MustCompile(`(?i)deadline \S+ is too short`)
	// unsupportedText: 400s about a feature this model lacks: "Thinking
	// level is not supported for this model.", "Unable to submit request
	// because thinking_level MEDIUM is not supported by this model.",
	// "Penalty is not enabled for models/gemini-2.5-flash", "The requested
	// combination of response modalities is not supported by the model.",
	// "`function_response.parts` is not supported for this model", and the
	// Live API's "Operation is not implemented, or supported, or enabled.".
	unsupportedText = regexp.MustCompile(`(?i)is not (?:supported|enabled) (?:by|for) (?:this|the) model|is not enabled for models/|operation\s+is\s+not\s+implemented,\s+or\s+supported,\s+or\s+enabled`)
	// projectText: 403s that refuse the project itself: "Permission denied
	// on resource project default." (CONSUMER_INVALID, also without its
	// details), "Project 'projects/x' not found or deleted.".
	projectText = regexp.MustCompile(`(?i)permission denied on resource project|project '[^']*' not found or deleted`)
	// permissionText: "Permission denied" and "does not have permission",
	// the Live API's 1008 refusals of the caller.
	permissionText = regexp.MustCompile(`(?i)permission denied|does not have permission`)
	// liveModelText: the Live API's 1008 for a model it does not serve:
	// "models/X is not found for API version v1beta, or is not supported
	// for bidiGenerateContent", "Publisher Model `projects/...` ...".
	liveModelText = regexp.MustCompile(`(?i)models/\S+ is not found|publisher model`)
	// unavailableText: 503's "The service is currently unavailable.".
	unavailableText = regexp.MustCompile(`(?i)service is currently unavailable`)
	// cancelText: 499 CANCELLED "The operation was cancelled.".
	cancelText = regexp.MustCompile(`(?i)the operation was cancell?ed`)
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
	// spendText: 429s of a spend or prepay cap, which carry no details:
	// "Your project has exceeded its monthly spending cap.", "Your billing
	// account has exceeded its monthly spending cap.", "Your prepayment
	// credits are depleted."
	spendText = regexp.MustCompile(`(?i)spending cap|spend cap|credits are depleted`)
	// retryText: "Please retry in 36.429760048s.", "retry in 1m30s".
	retryText = regexp.MustCompile(`(?i)retry in ((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|h|m|s))+)`)
	// quotaLine: "* Quota exceeded for metric: M, limit: N, model: X".
	quotaLine = regexp.MustCompile(`Quota exceeded for metric: ([^,\s]+), limit: (\d+)`)
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
func (f fault) keyProblem() bool {
	return keyReasons[f.reason()] || keyText.MatchString(f.message)
}

// reason returns the first ErrorInfo reason, "" when there is none.
func (f fault) reason() string {
	for _, d := range f.details {
		if detailType(d) == "google.rpc.ErrorInfo" {
			return str(d["reason"])
		}
	}
	return ""
}

// quota is one quota a 429 says was exceeded.
type quota struct {
	id     string // quotaId, or ErrorInfo quota_limit
	metric string // quotaMetric, or ErrorInfo quota_metric
	limit  int
	known  bool // the limit was stated
}

// quotaVerdict classifies a 429: which quota, and whether waiting helps.
// Precedence: a limit of 0, then a per-day quota or a spend cap named
// anywhere (structure or text: a stated delay never makes either one
// retryable), then a project-wide quota, then the per-minute quota.
func (f fault) quotaVerdict() Verdict {
	qs := f.quotas()
	if len(qs) == 0 && spendText.MatchString(f.message) {
		return base(ClassSpendCap).by("spend_cap")
	}
	pick := func(c Class, q quota, rule string) Verdict {
		v := base(c).by(rule)
		v.quotaID, v.quotaLimit = q.id, q.limit
		return v
	}
	for _, q := range qs {
		if q.known && q.limit == 0 {
			return pick(ClassNoQuota, q, "quota_limit_zero")
		}
	}
	for _, q := range qs {
		if perDayText.MatchString(q.id) {
			return pick(ClassDailyQuota, q, "quota_per_day")
		}
	}
	switch {
	case perDayText.MatchString(f.message):
		return base(ClassDailyQuota).by("quota_per_day")
	case spendText.MatchString(f.message):
		return base(ClassSpendCap).by("spend_cap")
	case len(qs) == 0 && migrateText.MatchString(f.message):
		// Only the message: the same answer lists its quotas when it has
		// them (a per-minute one as well as a per-day one).
		return base(ClassDailyQuota).by("migrate_for_quota")
	}
	var q quota
	if len(qs) > 0 {
		q = qs[0]
	}
	if projectQuotaText.MatchString(q.id) || projectQuotaText.MatchString(f.message) {
		// Every model under the project shares it: cool the project.
		v := pick(ClassRateLimit, q, "project_quota")
		v.Scope, v.cool = ScopeProject, coolProject
		return v
	}
	return pick(ClassRateLimit, q, "quota_per_minute")
}

// quotas lists the quotas f says were exceeded: QuotaFailure violations and
// ErrorInfo RATE_LIMIT_EXCEEDED metadata, with limits the structure leaves
// out taken from the message's "Quota exceeded for metric: M, limit: N"
// lines (the only quotas when there is no structure).
func (f fault) quotas() []quota {
	var qs []quota
	for _, d := range f.details {
		switch detailType(d) {
		case "google.rpc.QuotaFailure":
			for _, x := range list(d["violations"]) {
				q := quota{id: field(x, "quotaId"), metric: field(x, "quotaMetric")}
				q.limit, q.known = number(value(x, "quotaValue"))
				qs = append(qs, q)
			}
		case "google.rpc.ErrorInfo":
			if str(d["reason"]) != "RATE_LIMIT_EXCEEDED" {
				continue
			}
			md := d["metadata"]
			q := quota{id: field(md, "quota_limit"), metric: field(md, "quota_metric")}
			q.limit, q.known = number(value(md, "quota_limit_value"))
			qs = append(qs, q)
		}
	}
	lines := quotaLine.FindAllStringSubmatch(f.message, -1)
	if len(qs) == 0 {
		for _, l := range lines {
			n, ok := number(l[2])
			qs = append(qs, quota{metric: l[1], limit: n, known: ok})
		}
		return qs
	}
	for i := range qs {
		for _, l := range lines {
			if qs[i].known || l[1] != qs[i].metric {
				continue
			}
			qs[i].limit, qs[i].known = number(l[2])
		}
	}
	return qs
}

// retryAfter returns the delay the server stated: the larger of RetryInfo's
// retryDelay (whole seconds) and the message's "Please retry in 36.4s".
func (f fault) retryAfter() time.Duration {
	var d time.Duration
	for _, det := range f.details {
		if detailType(det) != "google.rpc.RetryInfo" {
			continue
		}
		if x, err := time.ParseDuration(str(det["retryDelay"])); err == nil && x > 0 {
			d = x
			break
		}
	}
	if m := retryText.FindStringSubmatch(f.message); m != nil {
		if x, err := time.ParseDuration(m[1]); err == nil && x > d {
			d = x
		}
	}
	return min(d, maxStatedDelay)
}

// maxStatedDelay bounds a server-stated delay: every quota resets within a
// day, so a longer one is a misreading.
const maxStatedDelay = 24 * time.Hour

// ---- errors as text ----
//
// An error can reach a caller as text another layer made of the API's
// answer: another SDK's exception ("429 RESOURCE_EXHAUSTED. {'error': ...}"
// in a Python dict's repr), a gateway's body around the API's, a console or
// a log that wrapped or prefixed its lines, a paste into an issue. The text
// is read structure first: an error body inside it (JSON or a Python repr,
// escaped once or twice, cut or not), then the body's fields where the body
// cannot be parsed whole, then an HTTP or google.rpc status written beside
// the message, and last the API's own wordings.

// maxScan bounds how much of a text is searched for an error body.
const maxScan = 64 << 10

// errorKey matches the start of an error body: an object whose key is
// "error" in either quote, its quotes escaped or not, separated by spaces,
// tabs, newlines, or newlines written as escapes.
var errorKey = regexp.MustCompile(`\{(?:\s|\\+[nrt])*\\*["']error\\*["'](?:\s|\\+[nrt])*:(?:\s|\\+[nrt])*\{`)

// embeddedFault finds an error body inside text and reads it; it reports
// false when no body there parses and states a code or a status.
func embeddedFault(text string) (fault, bool) {
	if !strings.Contains(text, `error"`) && !strings.Contains(text, `error'`) && !strings.Contains(text, `error\`) {
		return fault{}, false
	}
	if len(text) > maxScan {
		text = text[:maxScan]
	}
	for _, loc := range errorKey.FindAllStringIndex(text, 4) {
		obj, ok := balanced(text[loc[0]:])
		if !ok {
			continue
		}
		for range 3 {
			var body any
			if json.Unmarshal([]byte(toJSON(obj)), &body) == nil {
				if f, ok := bodyFault(body); ok && (f.code != 0 || f.status != "") {
					return f, true
				}
				break
			}
			un, changed := unescape(obj)
			if !changed {
				break
			}
			obj = un
		}
	}
	return fault{}, false
}

// balanced returns the object or array s starts with, up to its closing
// bracket, skipping strings in either quote and escaped characters; false
// when s ends first.
func balanced(s string) (string, bool) {
	depth, quote := 0, byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\':
			i++
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
			if depth == 0 {
				return s[:i+1], true
			}
		}
	}
	return "", false
}

// toJSON rewrites a body printed as a Python repr or mangled by a console
// into JSON: single-quoted strings double-quoted, True, False and None as
// JSON literals, raw control characters in strings escaped, and newline
// escapes between tokens read as spaces. JSON passes through unchanged.
func toJSON(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	quote := byte(0)
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote == 0 && c == '\\' && i+1 < len(s) && strings.IndexByte("nrt", s[i+1]) >= 0:
			b.WriteByte(' ')
			i++
		case quote == 0 && (c == '"' || c == '\''):
			quote = c
			b.WriteByte('"')
		case quote == 0:
			switch {
			case strings.HasPrefix(s[i:], "True"):
				b.WriteString("true")
				i += 3
			case strings.HasPrefix(s[i:], "False"):
				b.WriteString("false")
				i += 4
			case strings.HasPrefix(s[i:], "None"):
				b.WriteString("null")
				i += 3
			default:
				b.WriteByte(c)
			}
		case c == quote:
			quote = 0
			b.WriteByte('"')
		case c == '\\' && i+1 < len(s):
			i++
			switch n := s[i]; {
			case n == '\'':
				b.WriteByte('\'')
			case n == 'x' && quote == '\'' && i+2 < len(s):
				b.WriteString(`\u00`)
				b.WriteString(s[i+1 : i+3])
				i += 2
			case strings.IndexByte(`"\/bfnrtu`, n) >= 0:
				b.WriteByte('\\')
				b.WriteByte(n)
			default: // an escape JSON lacks: keep the character
				b.WriteByte(n)
			}
		case c == '"': // a double quote in a single-quoted string
			b.WriteString(`\"`)
		case c < 0x20:
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// unescape removes one level of string escaping from s (a body printed
// inside another body's string); changed is false when s has none.
func unescape(s string) (out string, changed bool) {
	if !strings.Contains(s, `\`) {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), true
}

// fieldPattern returns a pattern for a key of an error body written in any of the
// ways texts carry one — JSON, a Python repr, escaped once or twice, or
// protobuf text (key: "name" value: "v") — capturing its value.
func fieldPattern(key string) *regexp.Regexp {
	return regexp.MustCompile(`(?:^|[\s\\"'{,(\[])` + key + `\\*["']?[ \t]*(?:[:=：]|\s+value:)\s*\\*["']?([A-Za-z0-9_.\-]+)`)
}

var (
	codeField       = fieldPattern(`code`)
	statusField     = fieldPattern(`(?i:status)`)
	quotaIDField    = fieldPattern(`quotaId`)
	quotaValueField = fieldPattern(`quotaValue`)
	limitField      = fieldPattern(`quota_limit`)
	limitValueField = fieldPattern(`quota_limit_value`)
	retryDelayField = fieldPattern(`retryDelay`)
	reasonField     = fieldPattern(`reason`)
)

// fieldFault reads the fields of error bodies written in text that does not
// parse as a whole (cut short, each line behind a log prefix, quotes lost in
// a paste): the status name or code, QuotaFailure quota ids and values,
// ErrorInfo reasons and quota limits, RetryInfo's delay.
func fieldFault(text string) fault {
	f := fault{message: text}
	for _, m := range statusField.FindAllStringSubmatch(text, -1) {
		if code, ok := statusCodes[m[1]]; ok {
			f.status, f.code = m[1], code
			break
		}
	}
	if f.code == 0 {
		for _, m := range codeField.FindAllStringSubmatch(text, -1) {
			if n, err := strconv.Atoi(m[1]); err == nil && n >= 400 && n <= 599 {
				f.code = n
				break
			}
		}
	}
	ids := quotaIDField.FindAllStringSubmatch(text, -1)
	values := quotaValueField.FindAllStringSubmatch(text, -1)
	var violations []any
	for i, id := range ids {
		v := map[string]any{"quotaId": id[1]}
		if len(values) == len(ids) {
			v["quotaValue"] = values[i][1]
		}
		violations = append(violations, v)
	}
	if len(violations) > 0 {
		f.details = append(f.details, map[string]any{"@type": "google.rpc.QuotaFailure", "violations": violations})
	}
	for _, m := range reasonField.FindAllStringSubmatch(text, -1) {
		info := map[string]any{"@type": "google.rpc.ErrorInfo", "reason": m[1]}
		if m[1] == "RATE_LIMIT_EXCEEDED" {
			md := map[string]any{}
			if l := limitField.FindStringSubmatch(text); l != nil {
				md["quota_limit"] = l[1]
			}
			if l := limitValueField.FindStringSubmatch(text); l != nil {
				md["quota_limit_value"] = l[1]
			}
			info["metadata"] = md
		}
		f.details = append(f.details, info)
	}
	if m := retryDelayField.FindStringSubmatch(text); m != nil {
		f.details = append(f.details, map[string]any{"@type": "google.rpc.RetryInfo", "retryDelay": m[1]})
	}
	return f
}

var (
	// codeWords: a status code followed by its own reason phrase or code
	// name: "429 RESOURCE_EXHAUSTED", "[429 Too Many Requests]",
	// "'503 Service Unavailable'", "504: DEADLINE_EXCEEDED".
	codeWords = regexp.MustCompile(`\b([45]\d\d):? ([A-Za-z][A-Za-z_]*(?: [A-Za-z]+){0,3})`)
	// codeLabel: a status code after a label that names it: "status code
	// 429", "status_code=429", "Error code: 429", "googleapi: Error 429",
	// "API error (429)".
	codeLabel = regexp.MustCompile(`(?i)(?:status[ _]?code|error code|googleapi: error|api error)[ :=(]*([45]\d\d)\b`)
	// codeNameText: a google.rpc code name alone, among those no other text
	// spells this way.
	codeNameText = regexp.MustCompile(`\b(RESOURCE_EXHAUSTED|UNAVAILABLE|DEADLINE_EXCEEDED|PERMISSION_DENIED|UNAUTHENTICATED|FAILED_PRECONDITION|INVALID_ARGUMENT)\b`)
	// quotaText: the API's own wordings of a 429: "Resource has been
	// exhausted (e.g. check quota).", Vertex AI's "Resource exhausted.
	// Please try again later.", "You exceeded your current quota", "Quota
	// exceeded for metric: ...", "Quota exceeded for quota metric '...'",
	// "Quota exceeded for aiplatform.googleapis.com/...".
	quotaText = regexp.MustCompile(`(?i)\bresource (?:has been )?exhausted\b|you exceeded your current quota|quota exceeded for (?:quota metric|metric:|aiplatform\.googleapis\.)`)
	// overloadText: the API's wordings of a 503.
	overloadText = regexp.MustCompile(`(?i)the model is overloaded|model is currently experiencing high demand`)
)

// statusOf reads the status a text states beside its message, or implies
// by the API's own wording; 0 when none.
func statusOf(text string) int {
	for _, m := range codeWords.FindAllStringSubmatch(text, 8) {
		code, _ := strconv.Atoi(m[1])
		if statusCodes[m[2]] == code || strings.HasPrefix(strings.ToLower(m[2]), strings.ToLower(http.StatusText(code))) && http.StatusText(code) != "" {
			return code
		}
		// The code name in words, as Python's api_core prints it: "504
		// Deadline Exceeded", "429 Resource Exhausted".
		words := strings.ToUpper(strings.ReplaceAll(m[2], " ", "_"))
		for name, c := range statusCodes {
			if c == code && strings.HasPrefix(words, name) {
				return code
			}
		}
	}
	if m := codeLabel.FindStringSubmatch(text); m != nil {
		code, _ := strconv.Atoi(m[1])
		return code
	}
	if m := codeNameText.FindStringSubmatch(text); m != nil {
		return statusCodes[m[1]]
	}
	switch {
	case quotaText.MatchString(text), spendText.MatchString(text):
		return 429
	case overloadText.MatchString(text), deadlineText.MatchString(text):
		return 503
	case serviceDisabledText.MatchString(text), projectText.MatchString(text):
		return 403
	case keyText.MatchString(text), locationText.MatchString(text), unsupportedText.MatchString(text), deadlineShortText.MatchString(text):
		return 400
	case cancelText.MatchString(text):
		return 499
	}
	return 0
}

// textFault reads an error that reached us as text, with no error body in
// it that parses: the fields of one, with the status the text states beside
// them or implies.
func textFault(text string) (fault, bool) {
	if len(text) > maxScan {
		text = text[:maxScan]
	}
	f := fieldFault(text)
	if f.code == 0 {
		f.code = statusOf(text)
	}
	if f.code == 0 && f.reason() == "RATE_LIMIT_EXCEEDED" {
		f.code = 429
	}
	return f, f.code != 0
}

// ---- loosely typed JSON ----

// detailType returns a detail's "@type" without its URL prefix, e.g.
// "google.rpc.QuotaFailure".
func detailType(d map[string]any) string {
	t := str(d["@type"])
	return t[strings.LastIndexByte(t, '/')+1:]
}

// str returns v when it is a string, "" otherwise.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// list returns v's elements when it is a JSON array.
func list(v any) []any {
	switch l := v.(type) {
	case []any:
		return l
	case []map[string]any:
		out := make([]any, len(l))
		for i, m := range l {
			out[i] = m
		}
		return out
	}
	return nil
}

// value returns obj[key] for a JSON object (decoded, or built in Go with
// string values).
func value(obj any, key string) any {
	switch m := obj.(type) {
	case map[string]any:
		return m[key]
	case map[string]string:
		if s, ok := m[key]; ok {
			return s
		}
	}
	return nil
}

// field returns obj[key] when it is a string.
func field(obj any, key string) string { return str(value(obj, key)) }

// number reads a non-negative integer sent as a JSON number or a decimal
// string ("10", "250000").
func number(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		if n >= 0 && n <= math.MaxInt32 && n == math.Trunc(n) {
			return int(n), true
		}
	case string:
		if i, err := strconv.Atoi(strings.TrimSpace(n)); err == nil && i >= 0 {
			return i, true
		}
	}
	return 0, false
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
