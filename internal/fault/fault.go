// Package fault reads what the Gemini API answered into a Fault: the code,
// status, message, details and legacy reason of an error, however it
// reached the caller. A genai.APIError is read by its structure, an error
// body nested in its Message unwrapped (Read, Unnest); an error that is
// text (another SDK's exception, a gateway's body, a log line) by the error
// body inside it, JSON or a Python repr, escaped or cut (Embedded), else by
// its fields and the status the text states or implies (FromText). What a
// Fault means (retry, scope, cool-down) is the classifier's, in the root
// package, which also matches the wordings exported here. Everything here is
// pure and safe for concurrent use.
package fault

import (
	"encoding/json"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genai"
)

// Fault is an API error normalised: the error object inside a JSON Message
// unwrapped, the code filled in from the status when the body had none. It is
// a plain value; its zero value is no fault.
type Fault struct {
	Code    int
	Status  string // canonical google.rpc code name ("RESOURCE_EXHAUSTED"), "" when none was sent
	Message string
	Details []map[string]any
	Legacy  string // the first reason of the body's legacy "errors" list ("forbidden", "backendError"), "" when none
}

// maxNesting bounds how many error objects nested in messages are unwrapped
// (proxies wrap the API's body in their own).
const maxNesting = 3

// Read normalises ae: its Status split into a code name or an HTTP status
// line's code, and the error bodies its Message holds unnested.
func Read(ae genai.APIError) Fault {
	f := Fault{Code: ae.Code, Message: ae.Message, Details: ae.Details}
	var lineCode int
	f.Status, lineCode = splitStatus(ae.Status)
	if f.Code == 0 {
		f.Code = lineCode
	}
	return f.Unnest()
}

// Unnest replaces f's code, status and details with those of the error
// bodies its message holds (a proxy's body around the API's, or another
// layer's text around one), up to maxNesting deep, and fills a missing code
// from the status name.
func (f Fault) Unnest() Fault {
	for range maxNesting {
		in, ok := innerFault(f.Message)
		if !ok {
			in, ok = Embedded(f.Message)
		}
		if !ok {
			break
		}
		if in.Code != 0 {
			f.Code = in.Code
		}
		if in.Status != "" {
			f.Status = in.Status
		}
		if len(in.Details) > 0 {
			f.Details = in.Details
		}
		if in.Legacy != "" {
			f.Legacy = in.Legacy
		}
		f.Message = in.Message
	}
	if f.Code == 0 {
		f.Code = statusCodes[f.Status]
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
func innerFault(msg string) (Fault, bool) {
	msg = strings.TrimSpace(msg)
	if msg == "" || (msg[0] != '{' && msg[0] != '[') {
		return Fault{}, false
	}
	var body any
	if json.Unmarshal([]byte(msg), &body) != nil {
		return Fault{}, false
	}
	return bodyFault(body)
}

// bodyFault reads a decoded error body: {"error":{...}} or an array of them.
func bodyFault(body any) (Fault, bool) {
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
		f := Fault{Message: str(e["message"])}
		f.Status, _ = splitStatus(str(e["status"]))
		f.Code, _ = number(e["code"])
		for _, d := range list(e["details"]) {
			if m, ok := d.(map[string]any); ok {
				f.Details = append(f.Details, m)
			}
		}
		for _, x := range list(e["errors"]) {
			if f.Legacy = field(x, "reason"); f.Legacy != "" {
				break
			}
		}
		return f, true
	}
	return Fault{}, false
}

// Reason returns the first ErrorInfo reason, "" when there is none.
func (f Fault) Reason() string {
	for _, d := range f.Details {
		if detailType(d) == "google.rpc.ErrorInfo" {
			return str(d["reason"])
		}
	}
	return ""
}

// Quota is one quota a 429 says was exceeded.
type Quota struct {
	ID     string // quotaId, or ErrorInfo quota_limit
	Metric string // quotaMetric, or ErrorInfo quota_metric
	Limit  int
	Known  bool // the limit was stated
}

// Quotas lists the quotas f says were exceeded: QuotaFailure violations and
// ErrorInfo RATE_LIMIT_EXCEEDED metadata, with limits the structure leaves
// out taken from the message's "Quota exceeded for metric: M, limit: N"
// lines (the only quotas when there is no structure).
func (f Fault) Quotas() []Quota {
	var qs []Quota
	for _, d := range f.Details {
		switch detailType(d) {
		case "google.rpc.QuotaFailure":
			for _, x := range list(d["violations"]) {
				q := Quota{ID: field(x, "quotaId"), Metric: field(x, "quotaMetric")}
				q.Limit, q.Known = number(value(x, "quotaValue"))
				qs = append(qs, q)
			}
		case "google.rpc.ErrorInfo":
			if str(d["reason"]) != "RATE_LIMIT_EXCEEDED" {
				continue
			}
			md := d["metadata"]
			q := Quota{ID: field(md, "quota_limit"), Metric: field(md, "quota_metric")}
			q.Limit, q.Known = number(value(md, "quota_limit_value"))
			qs = append(qs, q)
		}
	}
	lines := quotaLine.FindAllStringSubmatch(f.Message, -1)
	if len(qs) == 0 {
		for _, l := range lines {
			n, ok := number(l[2])
			qs = append(qs, Quota{Metric: l[1], Limit: n, Known: ok})
		}
		return qs
	}
	for i := range qs {
		for _, l := range lines {
			if qs[i].Known || l[1] != qs[i].Metric {
				continue
			}
			qs[i].Limit, qs[i].Known = number(l[2])
		}
	}
	return qs
}

// RetryAfter returns the delay the server stated: the larger of RetryInfo's
// retryDelay (whole seconds) and the message's "Please retry in 36.4s".
func (f Fault) RetryAfter() time.Duration {
	var d time.Duration
	for _, det := range f.Details {
		if detailType(det) != "google.rpc.RetryInfo" {
			continue
		}
		if x, err := time.ParseDuration(str(det["retryDelay"])); err == nil && x > 0 {
			d = x
			break
		}
	}
	if m := retryText.FindStringSubmatch(f.Message); m != nil {
		if x, err := time.ParseDuration(m[1]); err == nil && x > d {
			d = x
		}
	}
	return min(d, MaxStatedDelay)
}

// MaxStatedDelay bounds a server-stated delay: every quota resets within a
// day, so a longer one is a misreading.
const MaxStatedDelay = 24 * time.Hour

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

// Embedded finds an error body inside text and reads it; it reports
// false when no body there parses and states a code or a status.
func Embedded(text string) (Fault, bool) {
	if !strings.Contains(text, `error"`) && !strings.Contains(text, `error'`) && !strings.Contains(text, `error\`) {
		return Fault{}, false
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
				if f, ok := bodyFault(body); ok && (f.Code != 0 || f.Status != "") {
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
	return Fault{}, false
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

// fieldFault reads the fields of error bodies written in text that does not
// parse as a whole (cut short, each line behind a log prefix, quotes lost in
// a paste): the status name or code, QuotaFailure quota ids and values,
// ErrorInfo reasons and quota limits, RetryInfo's delay.
func fieldFault(text string) Fault {
	f := Fault{Message: text}
	for _, m := range statusField.FindAllStringSubmatch(text, -1) {
		if code, ok := statusCodes[m[1]]; ok {
			f.Status, f.Code = m[1], code
			break
		}
	}
	if f.Code == 0 {
		for _, m := range codeField.FindAllStringSubmatch(text, -1) {
			if n, err := strconv.Atoi(m[1]); err == nil && n >= 400 && n <= 599 {
				f.Code = n
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
		f.Details = append(f.Details, map[string]any{"@type": "google.rpc.QuotaFailure", "violations": violations})
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
		f.Details = append(f.Details, info)
	}
	if m := retryDelayField.FindStringSubmatch(text); m != nil {
		f.Details = append(f.Details, map[string]any{"@type": "google.rpc.RetryInfo", "retryDelay": m[1]})
	}
	return f
}

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
	case QuotaText.MatchString(text), SpendText.MatchString(text):
		return 429
	case OverloadText.MatchString(text), DeadlineText.MatchString(text):
		return 503
	case ServiceDisabledText.MatchString(text), ProjectText.MatchString(text):
		return 403
	case KeyText.MatchString(text), LocationText.MatchString(text), UnsupportedText.MatchString(text), DeadlineShortText.MatchString(text):
		return 400
	case cancelText.MatchString(text):
		return 499
	}
	return 0
}

// FromText reads an error that reached us as text, with no error body in
// it that parses: the fields of one, with the status the text states beside
// them or implies.
func FromText(text string) (Fault, bool) {
	if len(text) > maxScan {
		text = text[:maxScan]
	}
	f := fieldFault(text)
	if f.Code == 0 {
		f.Code = statusOf(text)
	}
	if f.Code == 0 && f.Reason() == "RATE_LIMIT_EXCEEDED" {
		f.Code = 429
	}
	return f, f.Code != 0
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

var (
	// LocationText: 400 FAILED_PRECONDITION "User location is not supported
	// for the API use." (also "... without a billing account linked.").
	LocationText = regexp.MustCompile(`(?i)user location is not supported|not available in your country`)
	// ServiceDisabledText: "Generative Language API has not been used in
	// project N before or it is disabled."
	ServiceDisabledText = regexp.MustCompile(`(?i)has not been used in project .* or it is disabled`)
	// KeyText: messages that condemn the key or the project behind it.
	KeyText = regexp.MustCompile(`(?i)api key not valid|api key not found|api key expired|reported as leaked|unregistered callers|has been suspended`)
	// DeadlineText: 503 UNAVAILABLE "Deadline expired before operation could
	// complete."
	DeadlineText = regexp.MustCompile(`(?i)deadline expired`)
	// DeadlineShortText: 400 INVALID_ARGUMENT "Manually set deadline 5s is
	// too short. Minimum allowed deadline is 10s.": the caller's deadline.
	DeadlineShortText = regexp.MustCompile(`(?i)deadline \S+ is too short`)
	// UnsupportedText: 400s about a feature this model lacks: "Thinking
	// level is not supported for this model.", "Unable to submit request
	// because thinking_level MEDIUM is not supported by this model.",
	// "Penalty is not enabled for models/gemini-2.5-flash", "The requested
	// combination of response modalities is not supported by the model.",
	// "`function_response.parts` is not supported for this model", and the
	// Live API's "Operation is not implemented, or supported, or enabled.".
	UnsupportedText = regexp.MustCompile(`(?i)is not (?:supported|enabled) (?:by|for) (?:this|the) model|is not enabled for models/|operation\s+is\s+not\s+implemented,\s+or\s+supported,\s+or\s+enabled`)
	// ProjectText: 403s that refuse the project itself: "Permission denied
	// on resource project default." (CONSUMER_INVALID, also without its
	// details), "Project 'projects/x' not found or deleted.".
	ProjectText = regexp.MustCompile(`(?i)permission denied on resource project|project '[^']*' not found or deleted`)
	// cancelText: 499 CANCELLED "The operation was cancelled.".
	cancelText = regexp.MustCompile(`(?i)the operation was cancell?ed`)
	// SpendText: 429s of a spend or prepay cap, which carry no details:
	// "Your project has exceeded its monthly spending cap.", "Your billing
	// account has exceeded its monthly spending cap.", "Your prepayment
	// credits are depleted."
	SpendText = regexp.MustCompile(`(?i)spending cap|spend cap|credits are depleted`)
	// retryText: "Please retry in 36.429760048s.", "retry in 1m30s".
	retryText = regexp.MustCompile(`(?i)retry in ((?:\d+(?:\.\d+)?(?:ns|us|µs|ms|h|m|s))+)`)
	// quotaLine: "* Quota exceeded for metric: M, limit: N, model: X".
	quotaLine = regexp.MustCompile(`Quota exceeded for metric: ([^,\s]+), limit: (\d+)`)
)

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
	// QuotaText: the API's own wordings of a 429: "Resource has been
	// exhausted (e.g. check quota).", Vertex AI's "Resource exhausted.
	// Please try again later.", "You exceeded your current quota", "Quota
	// exceeded for metric: ...", "Quota exceeded for quota metric '...'",
	// "Quota exceeded for aiplatform.googleapis.com/...".
	QuotaText = regexp.MustCompile(`(?i)\bresource (?:has been )?exhausted\b|you exceeded your current quota|quota exceeded for (?:quota metric|metric:|aiplatform\.googleapis\.)`)
	// OverloadText: the API's wordings of a 503.
	OverloadText = regexp.MustCompile(`(?i)the model is overloaded|model is currently experiencing high demand`)
)
