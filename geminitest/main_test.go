package geminitest_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

func TestMain(m *testing.M) {
	// The SDK reads these; a developer's real key or base URL must never
	// reach the fake, and their warnings would only add noise.
	for _, k := range []string{
		"GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_API_KEY", "GEMINI_API_KEY",
		"GOOGLE_CLOUD_PROJECT", "GOOGLE_CLOUD_LOCATION", "GOOGLE_CLOUD_REGION",
		"GOOGLE_GEMINI_BASE_URL", "GOOGLE_VERTEX_BASE_URL",
	} {
		os.Unsetenv(k)
	}
	// The SDK log.Printf's every stream error it yields.
	log.SetOutput(io.Discard)
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"))
}

const flash = "gemini-2.5-flash"

// wire is one way of reaching the fake.
type wire struct {
	name   string
	client func(t *testing.T, fake *geminitest.Server) *genai.Client
}

var (
	inMemory = wire{"in-memory", func(t *testing.T, fake *geminitest.Server) *genai.Client {
		return newClient(t, fake.ClientConfig())
	}}
	http1 = wire{"httptest-h1", func(t *testing.T, fake *geminitest.Server) *genai.Client {
		srv := httptest.NewServer(fake)
		t.Cleanup(srv.Close)
		return newClient(t, geminitest.ClientConfigFor(srv))
	}}
	http2 = wire{"httptest-h2", func(t *testing.T, fake *geminitest.Server) *genai.Client {
		srv := httptest.NewUnstartedServer(fake)
		srv.EnableHTTP2 = true
		srv.StartTLS()
		t.Cleanup(srv.Close)
		return newClient(t, geminitest.ClientConfigFor(srv))
	}}
)

func newClient(t *testing.T, cfg *genai.ClientConfig) *genai.Client {
	t.Helper()
	c, err := genai.NewClient(context.Background(), cfg)
	require.NoError(t, err)
	return c
}

func prompt(s string) []*genai.Content { return genai.Text(s) }

// streamed is what ranging over a stream gave.
type streamed struct {
	chunks []*genai.GenerateContentResponse
	err    error
}

func (s streamed) text() string {
	var b strings.Builder
	for _, c := range s.chunks {
		b.WriteString(c.Text())
	}
	return b.String()
}

// finishReasons returns the non-empty finish reasons of the chunks.
func (s streamed) finishReasons() []genai.FinishReason {
	var out []genai.FinishReason
	for _, c := range s.chunks {
		if len(c.Candidates) > 0 && c.Candidates[0].FinishReason != "" {
			out = append(out, c.Candidates[0].FinishReason)
		}
	}
	return out
}

func stream(ctx context.Context, c *genai.Client, model string, cfg *genai.GenerateContentConfig) streamed {
	var s streamed
	for chunk, err := range c.Models.GenerateContentStream(ctx, model, prompt("stream please"), cfg) {
		if err != nil {
			s.err = err
			break
		}
		s.chunks = append(s.chunks, chunk)
	}
	return s
}

// apiError returns err as a genai.APIError, failing the test if it is not one.
func apiError(t *testing.T, err error) genai.APIError {
	t.Helper()
	var e genai.APIError
	require.Truef(t, errors.As(err, &e), "want a genai.APIError, got %T: %v", err, err)
	return e
}

// detailTypes returns the @type of each detail of e.
func detailTypes(e genai.APIError) []string {
	var out []string
	for _, d := range e.Details {
		out = append(out, strings.TrimPrefix(d["@type"].(string), "type.googleapis.com/"))
	}
	return out
}

// violations returns the quotaId → quotaValue of e's QuotaFailure.
func violations(t *testing.T, e genai.APIError) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range e.Details {
		if d["@type"] != "type.googleapis.com/google.rpc.QuotaFailure" {
			continue
		}
		for _, v := range d["violations"].([]any) {
			v := v.(map[string]any)
			out[v["quotaId"].(string)] = v["quotaValue"].(string)
		}
	}
	return out
}

// retryDelay returns e's RetryInfo.retryDelay, "" when none.
func retryDelay(e genai.APIError) string {
	for _, d := range e.Details {
		if d["@type"] == "type.googleapis.com/google.rpc.RetryInfo" {
			return d["retryDelay"].(string)
		}
	}
	return ""
}
