package geminiguard

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/fault"
)

// TestClassifyTextPrecision: texts that mention quotas, codes or delays in
// another sense stay unknown, and a client's own wait is not the server's.
func TestClassifyTextPrecision(t *testing.T) {
	for _, text := range []string{
		// syscall.EDQUOT (go/src/syscall/zerrors_linux_amd64.go)
		"write /var/lib/app/cache: disk quota exceeded",
		// grpc-go rpc_util.go, a local message-size limit
		"rpc error: code = ResourceExhausted desc = grpc: received message larger than max (5000000 vs. 4194304)",
		// Gemini CLI's own notice beside a 429 (https://github.com/google-gemini/gemini-cli/issues/14831)
		"Possible quota limitations in place or slow response times detected. Switching to the gemini-2.5-flash model for the rest of this session.",
		"processed 429 items in 503 ms",
		"storage quota exceeded for bucket uploads",
		`bad input: {"error": "missing field"}`,
		"please retry in 5s",
	} {
		got := Classify(errors.New(text))
		assert.Equal(t, wantUnknown, ruleless(got), text)
	}
}

// FuzzClassifyText feeds Classify errors that are text — as another layer
// hands them over, and inside an APIError's Message — and checks that it
// never panics, keeps its invariants, and that text around an error body
// does not change the body's verdict.
func FuzzClassifyText(f *testing.F) {
	for _, row := range corpusRows {
		f.Add(row.err.Error(), "", "")
	}
	for _, tc := range wireCases {
		f.Add(tc.body, "worker: ", " (attempt 3)")
	}
	f.Add(`{'error': {'code': 429, 'status': 'RESOURCE_EXHAUSTED', 'details': [{'@type': 'type.googleapis.com/google.rpc.RetryInfo', 'retryDelay': '99999999h'}]}}`, "Please retry in 1m30s ", "")
	f.Add(`{\\n \"error\": {\\n \"code\": \\'503\\'}}`, `\`, `'`)
	f.Fuzz(func(t *testing.T, body, prefix, suffix string) {
		text := prefix + body + suffix
		for _, err := range []error{errors.New(text), genai.APIError{Message: text}, genai.APIError{Code: 500, Message: text}} {
			got := classify(err) // without Classify's guard: a panic here is a bug
			require.Equal(t, got, classify(err), "deterministic")
			require.True(t, got.Class > ClassNone && got.Class < numClasses, "class %v", got.Class)
			require.True(t, got.Scope >= ScopeRequest && got.Scope <= ScopeProject, "scope %v", got.Scope)
			require.GreaterOrEqual(t, got.RetryAfter, time.Duration(0))
			require.LessOrEqual(t, got.RetryAfter, fault.MaxStatedDelay)
		}
		if _, ok := fault.Embedded(body); !ok || strings.ContainsAny(prefix+suffix, "{[") {
			return
		}
		bare, around := classify(errors.New(body)), classify(errors.New(text))
		require.Equal(t, bare.Class, around.Class, "text around a body")
		require.Equal(t, bare.RetryAfter, around.RetryAfter, "text around a body")
	})
}

// BenchmarkClassify: the SDK's APIError (the common path) and another
// layer's text.
func BenchmarkClassify(b *testing.B) {
	api := sdkError(wireCases[0].status, wireCases[0].body)
	text := corpusRows[0].err
	b.Run("APIError", func(b *testing.B) {
		for b.Loop() {
			Classify(api)
		}
	})
	b.Run("text", func(b *testing.B) {
		for b.Loop() {
			Classify(text)
		}
	})
}
