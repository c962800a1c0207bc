package geminitest_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

const (
	vertexProject  = "my-project"
	vertexLocation = "us-central1"
)

// TestVertexPathsThroughTheSDK: the SDK with Backend VertexAI reaches every
// method on the paths it builds, and each answers as Vertex AI does.
func TestVertexPathsThroughTheSDK(t *testing.T) {
	fake := geminitest.NewVertex(vertexProject, vertexLocation,
		geminitest.Model{Name: flash}, geminitest.Model{Name: "gemini-embedding-001"}, geminitest.Model{Name: "gemini-embedding-2"})
	cfg := fake.ClientConfig()
	var paths []string
	next := cfg.HTTPClient.Transport
	cfg.HTTPClient.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		return next.RoundTrip(r)
	})
	c := newClient(t, cfg)
	ctx := t.Context()

	r, err := c.Models.GenerateContent(ctx, flash, prompt("Say hi"), nil)
	require.NoError(t, err)
	assert.Equal(t, fake.FullText(flash), r.Text())
	assert.Equal(t, fake.FullText(flash), stream(ctx, c, flash, nil).text())
	n, err := c.Models.CountTokens(ctx, flash, prompt("Say hi"), nil)
	require.NoError(t, err)
	assert.Equal(t, int32(2), n.TotalTokens)
	m, err := c.Models.Get(ctx, flash, nil)
	require.NoError(t, err)
	assert.Equal(t, "publishers/google/models/"+flash, m.Name)
	page, err := c.Models.List(ctx, nil)
	require.NoError(t, err)
	require.Len(t, page.Items, 3)
	assert.Equal(t, "publishers/google/models/"+flash, page.Items[0].Name)
	e, err := c.Models.EmbedContent(ctx, "gemini-embedding-001", append(prompt("a"), prompt("b")...), &genai.EmbedContentConfig{OutputDimensionality: genai.Ptr[int32](8)})
	require.NoError(t, err)
	require.Len(t, e.Embeddings, 2)
	assert.Len(t, e.Embeddings[0].Values, 8)
	e2, err := c.Models.EmbedContent(ctx, "gemini-embedding-2", prompt("a"), nil)
	require.NoError(t, err)
	require.Len(t, e2.Embeddings, 1)
	assert.Len(t, e2.Embeddings[0].Values, 768)

	base := "/v1beta1/projects/my-project/locations/us-central1/publishers/google/models/"
	assert.Equal(t, []string{
		"POST " + base + flash + ":generateContent",
		"POST " + base + flash + ":streamGenerateContent",
		"POST " + base + flash + ":countTokens",
		"GET /v1beta1/publishers/google/models/" + flash,
		"GET /v1beta1/publishers/google/models",
		"POST " + base + "gemini-embedding-001:predict",
		"POST " + base + "gemini-embedding-2:embedContent",
	}, paths)
	assert.Equal(t, 2, fake.Total(flash))
	assert.Equal(t, 1, fake.Hits("gemini-embedding-001", geminitest.VerbEmbed))
	assert.Equal(t, 1, fake.Hits("gemini-embedding-2", geminitest.VerbEmbed))
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestVertexErrorBodies: the faults whose bodies differ on Vertex AI reach
// the SDK as Vertex AI sends them.
func TestVertexErrorBodies(t *testing.T) {
	fake := geminitest.NewVertex(vertexProject, vertexLocation, geminitest.Model{Name: flash})
	c := newClient(t, fake.ClientConfig())
	ctx := t.Context()
	for _, tc := range []struct {
		fault  geminitest.Fault
		code   int
		status string
		prefix string
	}{
		// https://github.com/google-gemini/gemini-cli/issues/14831
		{geminitest.ResourceExhausted, 429, "RESOURCE_EXHAUSTED", "Resource exhausted. Please try again later. Please refer to https://cloud.google.com/vertex-ai/generative-ai/docs/error-code-429"},
		// https://github.com/GoogleCloudPlatform/Open_Data_QnA/issues/61
		{geminitest.RateLimitMinute, 429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_model with base model: gemini-2.5-flash."},
		// https://github.com/truefoundry/models/pull/946
		{geminitest.NotFound, 404, "NOT_FOUND", "Publisher Model `projects/my-project/locations/us-central1/publishers/google/models/gemini-2.5-flash` was not found"},
		{geminitest.Overloaded, 503, "UNAVAILABLE", "The model is overloaded."},
	} {
		fake.Script(flash, geminitest.Step{Fault: tc.fault})
		_, err := c.Models.GenerateContent(ctx, flash, prompt("hi"), nil)
		e := apiError(t, err)
		assert.Equal(t, tc.code, e.Code, tc.fault.String())
		assert.Equal(t, tc.status, e.Status, tc.fault.String())
		assert.True(t, strings.HasPrefix(e.Message, tc.prefix), "%s: %s", tc.fault, e.Message)
		assert.Empty(t, e.Details, tc.fault.String())
	}

	q := geminitest.NewVertex(vertexProject, vertexLocation, geminitest.Model{Name: flash, Quota: geminitest.Quota{RPM: 1}})
	qc := newClient(t, q.ClientConfig())
	_, err := qc.Models.GenerateContent(ctx, flash, prompt("one"), nil)
	require.NoError(t, err)
	_, err = qc.Models.GenerateContent(ctx, flash, prompt("two"), nil)
	assert.Contains(t, apiError(t, err).Message, "generate_content_requests_per_minute_per_project_per_base_model")
}

// TestVertexAccess: another project, no token, and a Gemini API path are
// refused as Vertex AI refuses them; express mode (an API key) is served.
func TestVertexAccess(t *testing.T) {
	fake := geminitest.NewVertex(vertexProject, vertexLocation, geminitest.Model{Name: flash})
	ctx := t.Context()

	other := fake.ClientConfig()
	other.Project = "someone-else"
	_, err := newClient(t, other).Models.GenerateContent(ctx, flash, prompt("hi"), nil)
	e := apiError(t, err)
	assert.Equal(t, 403, e.Code)
	assert.Equal(t, "Permission 'aiplatform.endpoints.predict' denied on resource '//aiplatform.googleapis.com/projects/someone-else/locations/us-central1/publishers/google/models/gemini-2.5-flash' (or it may not exist).", e.Message)

	noToken := fake.ClientConfig()
	noToken.HTTPClient = fake.HTTPClient()
	_, err = newClient(t, noToken).Models.GenerateContent(ctx, flash, prompt("hi"), nil)
	assert.Equal(t, "UNAUTHENTICATED", apiError(t, err).Status)

	express := &genai.ClientConfig{Backend: genai.BackendVertexAI, APIKey: geminitest.Key, HTTPClient: fake.HTTPClient(),
		HTTPOptions: genai.HTTPOptions{BaseURL: geminitest.BaseURL}}
	r, err := newClient(t, express).Models.GenerateContent(ctx, flash, prompt("hi"), nil)
	require.NoError(t, err)
	assert.Equal(t, fake.FullText(flash), r.Text())

	_, err = newClient(t, geminitest.New(geminitest.Model{Name: flash}).ClientConfig()).Models.GenerateContent(ctx, flash, prompt("hi"), nil)
	require.NoError(t, err)
	gemini := fake.ClientConfig()
	gemini.Backend, gemini.Project, gemini.Location, gemini.APIKey = genai.BackendGeminiAPI, "", "", geminitest.Key
	_, err = newClient(t, gemini).Models.GenerateContent(ctx, flash, prompt("hi"), nil)
	assert.Equal(t, 404, apiError(t, err).Code)
	assert.Equal(t, 3, fake.Total(flash))
}

// TestVertexOverSockets: ClientConfigFor gives a Vertex AI config for an
// httptest.Server whose handler is a Vertex AI Server.
func TestVertexOverSockets(t *testing.T) {
	fake := geminitest.NewVertex(vertexProject, vertexLocation, geminitest.Model{Name: flash})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	cfg := geminitest.ClientConfigFor(srv)
	assert.Equal(t, genai.BackendVertexAI, cfg.Backend)
	r, err := newClient(t, cfg).Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
	require.NoError(t, err)
	assert.Equal(t, fake.FullText(flash), r.Text())
}

// TestVertexComputeTokens: computeTokens answers in Vertex AI's shape (token
// ids as JSON strings, tokens as base64), which the SDK decodes, one
// tokensInfo per content with its role; the Gemini API has no such path.
func TestVertexComputeTokens(t *testing.T) {
	fake := geminitest.NewVertex(vertexProject, vertexLocation, geminitest.Model{Name: flash})
	cfg := fake.ClientConfig()
	var raw string
	next := cfg.HTTPClient.Transport
	cfg.HTTPClient.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := next.RoundTrip(r)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			raw, resp.Body = string(b), io.NopCloser(bytes.NewReader(b))
		}
		return resp, err
	})
	c := newClient(t, cfg)
	contents := []*genai.Content{genai.NewContentFromText("Hello!", genai.RoleUser), genai.NewContentFromText("Hi there", genai.RoleModel)}

	r, err := c.Models.ComputeTokens(t.Context(), flash, contents, nil)

	require.NoError(t, err)
	require.Len(t, r.TokensInfo, 2)
	assert.Equal(t, genai.RoleUser, r.TokensInfo[0].Role)
	assert.Equal(t, [][]byte{[]byte("Hell"), []byte("o!")}, r.TokensInfo[0].Tokens)
	assert.Len(t, r.TokensInfo[0].TokenIDs, 2)
	assert.Equal(t, genai.RoleModel, r.TokensInfo[1].Role)
	assert.Equal(t, [][]byte{[]byte("Hi t"), []byte("here")}, r.TokensInfo[1].Tokens)
	assert.Contains(t, raw, `"tokens":["SGVsbA==","byE="],"tokenIds":["`, "base64 tokens, ids as strings")
	assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbComputeTokens))
	assert.Zero(t, fake.Hits(flash, geminitest.VerbCountTokens))

	gemini := geminitest.New(geminitest.Model{Name: flash})
	req := httptest.NewRequest(http.MethodPost, "/v1beta/models/"+flash+":computeTokens", strings.NewReader(`{"contents":[]}`))
	req.Header.Set("X-Goog-Api-Key", geminitest.Key)
	w := httptest.NewRecorder()
	gemini.ServeHTTP(w, req)
	assert.Equal(t, http.StatusNotFound, w.Code, "the Gemini API serves no computeTokens")
}
