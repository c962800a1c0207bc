package fault

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genai"
)

// Read takes the code from the body, else from an HTTP status line, else
// from the status name, and unwraps the error bodies a Message holds.
func TestRead(t *testing.T) {
	for _, tt := range []struct {
		name   string
		ae     genai.APIError
		code   int
		status string
		msg    string
	}{
		{"structured", genai.APIError{Code: 429, Status: "RESOURCE_EXHAUSTED", Message: "quota"}, 429, "RESOURCE_EXHAUSTED", "quota"},
		{"status line", genai.APIError{Status: "503 Service Unavailable", Message: "<html>"}, 503, "", "<html>"},
		{"status name only", genai.APIError{Status: "PERMISSION_DENIED"}, 403, "PERMISSION_DENIED", ""},
		{"neither", genai.APIError{Status: "weird"}, 0, "", ""},
		{"JSON array in Message", genai.APIError{Status: "200 OK", Message: `[{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}]`}, 503, "UNAVAILABLE", "overloaded"},
		{"proxy body around the API's", genai.APIError{Code: 500, Message: `{"error":{"message":"{\"error\":{\"code\":429,\"message\":\"inner\",\"status\":\"RESOURCE_EXHAUSTED\"}}"}}`}, 429, "RESOURCE_EXHAUSTED", "inner"},
		{"body without code", genai.APIError{Message: `{"error":{"message":"m","status":"NOT_FOUND"}}`}, 404, "NOT_FOUND", "m"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := Read(tt.ae)
			assert.Equal(t, tt.code, f.Code)
			assert.Equal(t, tt.status, f.Status)
			assert.Equal(t, tt.msg, f.Message)
		})
	}
	f := Read(genai.APIError{Message: `{"error":{"code":403,"errors":[{"message":"x"},{"reason":"forbidden"}],"details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"SERVICE_DISABLED"},"junk"]}}`})
	assert.Equal(t, "forbidden", f.Legacy, "the first legacy reason")
	assert.Equal(t, "SERVICE_DISABLED", f.Reason())
	assert.Empty(t, Fault{}.Reason())
}

// Embedded finds an error body in text in the shapes other layers print
// it: JSON, a Python repr, escaped once or twice.
func TestEmbedded(t *testing.T) {
	for _, tt := range []struct {
		name string
		text string
		code int
		ok   bool
	}{
		{"json", `googleapi: {"error": {"code": 429, "message": "x"}} (attempt 2)`, 429, true},
		{"python repr", `429 RESOURCE_EXHAUSTED. {'error': {'code': 429, 'message': 'It\'s "spent"', 'status': 'RESOURCE_EXHAUSTED', 'ok': True, 'x': False, 'y': None}}`, 429, true},
		{"escaped", `log: "{\"error\": {\"code\": 503, \"status\": \"UNAVAILABLE\"}}"`, 503, true},
		{"escaped twice", `{\\"error\\": {\\"code\\": 500}}`, 500, true},
		{"escaped newlines", `{\n  "error": {\n    "code": 400\n  }\n}`, 400, true},
		{"python hex escape", `{'error': {'code': 404, 'message': 'caf\xe9'}}`, 404, true},
		{"no code nor status", `bad input: {"error": {"message": "missing"}}`, 0, false},
		{"cut short", `{"error": {"code": 429, "message": "cut`, 0, false},
		{"no body", `connection refused`, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := Embedded(tt.text)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.code, f.Code)
		})
	}
}

// FromText reads the fields of a body that does not parse, else the status
// the text states or its wording implies.
func TestFromText(t *testing.T) {
	for _, tt := range []struct {
		text string
		code int
	}{
		{"429 RESOURCE_EXHAUSTED: quota", 429},
		{"[503 Service Unavailable]", 503},
		{"504 Deadline Exceeded", 504},
		{"googleapi: Error 403: denied", 403},
		{"status_code=500 boom", 500},
		{"grpc: UNAVAILABLE", 503},
		{"Resource has been exhausted (e.g. check quota).", 429},
		{"The model is overloaded.", 503},
		{"Generative Language API has not been used in project 1 before or it is disabled.", 403},
		{"API key not valid. Please pass a valid API key.", 400},
		{"The operation was cancelled.", 499},
		{`"status": "RESOURCE_EXHAUSTED", "message": "cut`, 429},
		{`"code": 503, "message": "cut`, 503},
		{`reason: "RATE_LIMIT_EXCEEDED" quota_limit: "GenerateRequestsPerMinutePerProjectPerModel" quota_limit_value: "10"`, 429},
		{"processed 429 items in 503 ms", 0},
	} {
		f, ok := FromText(tt.text)
		assert.Equal(t, tt.code != 0, ok, tt.text)
		assert.Equal(t, tt.code, f.Code, tt.text)
	}
}

// Quotas reads QuotaFailure violations and ErrorInfo quota metadata, with
// limits the structure leaves out taken from the message; RetryAfter is the
// larger stated delay, bounded.
func TestQuotasAndRetryAfter(t *testing.T) {
	f := Fault{
		Message: "* Quota exceeded for metric: m/day, limit: 0, model: x\nPlease retry in 36.5s.",
		Details: []map[string]any{
			{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{
				map[string]any{"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaMetric": "m/day"},
				map[string]any{"quotaId": "PerMinute", "quotaValue": "15"},
			}},
			{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "36s"},
		},
	}
	assert.Equal(t, []Quota{
		{ID: "GenerateRequestsPerDayPerProjectPerModel-FreeTier", Metric: "m/day", Limit: 0, Known: true},
		{ID: "PerMinute", Limit: 15, Known: true},
	}, f.Quotas())
	assert.Equal(t, 36500*time.Millisecond, f.RetryAfter(), "the message's exact delay")

	info := Fault{Details: []map[string]any{
		{"@type": "google.rpc.ErrorInfo", "reason": "OTHER"},
		{"@type": "google.rpc.ErrorInfo", "reason": "RATE_LIMIT_EXCEEDED", "metadata": map[string]string{"quota_limit": "L", "quota_metric": "M", "quota_limit_value": "250000"}},
	}}
	assert.Equal(t, []Quota{{ID: "L", Metric: "M", Limit: 250000, Known: true}}, info.Quotas())

	text := Fault{Message: "Quota exceeded for metric: a, limit: 10\nQuota exceeded for metric: b, limit: 7"}
	assert.Equal(t, []Quota{{Metric: "a", Limit: 10, Known: true}, {Metric: "b", Limit: 7, Known: true}}, text.Quotas())

	long := Fault{Details: []map[string]any{{"@type": "google.rpc.RetryInfo", "retryDelay": "48h"}}}
	assert.Equal(t, MaxStatedDelay, long.RetryAfter())
	assert.Zero(t, Fault{}.RetryAfter())
}

func TestNumber(t *testing.T) {
	for _, tt := range []struct {
		v  any
		n  int
		ok bool
	}{{float64(10), 10, true}, {1.5, 0, false}, {float64(-1), 0, false}, {" 250000 ", 250000, true}, {"-3", 0, false}, {true, 0, false}} {
		n, ok := number(tt.v)
		assert.Equal(t, tt.n, n, "%v", tt.v)
		assert.Equal(t, tt.ok, ok, "%v", tt.v)
	}
	assert.Len(t, list([]map[string]any{{}, {}}), 2)
	assert.Nil(t, list("x"))
	assert.Nil(t, value(map[string]string{}, "k"))
}
