package geminiguard_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// vertexFlash is the cascade entry of flash on Vertex AI.
const vertexFlash = "vertex/" + flash

// newVertex returns a Vertex AI fake serving models and an SDK client on it.
func newVertex(t *testing.T, models ...geminitest.Model) (*geminitest.Server, *genai.Client) {
	t.Helper()
	srv := geminitest.NewVertex("my-project", "us-central1", models...)
	sdk, err := genai.NewClient(t.Context(), srv.ClientConfig())
	require.NoError(t, err)
	return srv, sdk
}

// TestVertexBackendEndToEnd: a Client on a Vertex AI SDK client
// (WithGenAIClient) generates, streams, counts and embeds through the chain,
// and its startup check lists Vertex AI's publisher models.
func TestVertexBackendEndToEnd(t *testing.T) {
	srv, sdk := newVertex(t, geminitest.Model{Name: flash}, geminitest.Model{Name: "gemini-embedding-001"})
	c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash))
	require.NoError(t, err)
	ctx := t.Context()

	resp, rec, err := ask(ctx, c, "")
	require.NoError(t, err)
	assert.Equal(t, srv.FullText(flash), resp.Text())
	assert.Equal(t, flash, rec.Model)

	var text string
	for r, err := range c.GenerateContentStream(ctx, "", genai.Text("Say hi"), nil) {
		require.NoError(t, err)
		text += r.Text()
	}
	assert.Equal(t, srv.FullText(flash), text)

	n, err := c.CountTokens(ctx, flash, genai.Text("Say hi"), nil)
	require.NoError(t, err)
	assert.Equal(t, int32(2), n.TotalTokens)

	e, err := c.EmbedContent(ctx, "gemini-embedding-001", genai.Text("a"), &genai.EmbedContentConfig{OutputDimensionality: genai.Ptr[int32](4)})
	require.NoError(t, err)
	require.Len(t, e.Embeddings, 1)
	assert.Len(t, e.Embeddings[0].Values, 4)

	assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGenerate))
	assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbStream))
	assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbCountTokens))
	assert.Equal(t, 1, srv.Hits("gemini-embedding-001", geminitest.VerbEmbed))
	assert.Equal(t, 1, srv.Hits("", geminitest.VerbList)) // New's cascade check
}

// TestVertexResourceExhaustedCoolsDown: Vertex AI's 429 "Resource exhausted.
// Please try again later." (no details, no RetryInfo; sources in
// geminitest/vertex.go) is a rate limit of the model: retried after backoff,
// then the model cools down and the next model answers.
func TestVertexResourceExhaustedCoolsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, sdk := newVertex(t, geminitest.Model{Name: flash}, geminitest.Model{Name: pro})
		srv.Script(flash, geminitest.Step{Fault: geminitest.ResourceExhausted}, geminitest.Step{Fault: geminitest.ResourceExhausted},
			geminitest.Step{Fault: geminitest.ResourceExhausted}, geminitest.Step{Fault: geminitest.ResourceExhausted})
		c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash, pro),
			geminiguard.WithStartupCheck(false))
		require.NoError(t, err)

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model)
		require.NotEmpty(t, rec.Attempts)
		first := rec.Attempts[0]
		assert.Equal(t, flash, first.Model)
		v := geminiguard.Classify(first.Err)
		assert.Equal(t, geminiguard.ClassRateLimit, v.Class)
		assert.Equal(t, geminiguard.ScopeModel, v.Scope)
		assert.True(t, v.Retryable)

		st := modelStats(t, c, flash)
		assert.Equal(t, geminiguard.ClassRateLimit, st.CoolDownReason)
		assert.True(t, st.CoolDownUntil.After(time.Now()), "flash cools down")
		hits := srv.Total(flash)
		_, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model)
		assert.Equal(t, hits, srv.Total(flash), "a cooling model gets no request")
	})
}

// TestVertexQuotaMetricIsRateLimit: Vertex AI's per-minute project quota
// 429 (aiplatform.googleapis.com/generate_content_requests_per_minute_...,
// no details) reads as a rate limit of the model, not a daily quota nor the
// project's: alone in its cascade, the model cools down and the call fails
// after one request.
func TestVertexQuotaMetricIsRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, sdk := newVertex(t, geminitest.Model{Name: flash})
		srv.Script(flash, geminitest.Step{Fault: geminitest.RateLimitMinute})
		c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false))
		require.NoError(t, err)
		_, rec, err := ask(t.Context(), c, "")
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		require.NotEmpty(t, rec.Attempts)
		v := geminiguard.Classify(rec.Attempts[0].Err)
		assert.Equal(t, geminiguard.ClassRateLimit, v.Class)
		assert.Equal(t, geminiguard.ScopeModel, v.Scope)
		assert.True(t, v.Retryable)
		assert.Equal(t, 1, srv.Total(flash))
		st := modelStats(t, c, flash)
		assert.Equal(t, geminiguard.ClassRateLimit, st.CoolDownReason)
		assert.True(t, c.Stats().ProjectCoolDownUntil.IsZero())
	})
}

// TestCascadeAcrossBackends: the Gemini API's flash answers 503s; the same
// model on Vertex AI, a WithModelBackend entry, answers.
func TestCascadeAcrossBackends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gem := geminitest.New(geminitest.Model{Name: flash})
		gem.Script(flash, geminitest.Step{Fault: geminitest.Overloaded}, geminitest.Step{Fault: geminitest.Overloaded},
			geminitest.Step{Fault: geminitest.Overloaded}, geminitest.Step{Fault: geminitest.Overloaded})
		vtx, sdk := newVertex(t, geminitest.Model{Name: flash, Text: "from Vertex AI"})
		c := newClient(t, gem, nil,
			geminiguard.WithCascade(flash, vertexFlash),
			geminiguard.WithModelBackend(vertexFlash, flash, sdk))

		resp, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, "from Vertex AI", resp.Text())
		assert.Equal(t, vertexFlash, rec.Model)
		assert.False(t, rec.Fallback)
		var models []string
		for _, a := range rec.Attempts {
			models = append(models, a.Model)
		}
		require.NotEmpty(t, models)
		assert.Equal(t, flash, models[0])
		assert.Equal(t, vertexFlash, models[len(models)-1])
		assert.NoError(t, rec.Attempts[len(rec.Attempts)-1].Err)
		assert.Equal(t, geminiguard.ClassOverloaded, geminiguard.Classify(rec.Attempts[0].Err).Class)

		assert.Equal(t, len(models)-1, gem.Total(flash), "every Gemini API attempt reached the Gemini API")
		assert.Equal(t, 1, vtx.Total(flash), "the Vertex AI entry reached Vertex AI once")
		assert.Equal(t, 1, gem.Hits("", geminitest.VerbList), "the check listed the Gemini API")
		assert.Equal(t, 1, vtx.Hits("", geminitest.VerbList), "and Vertex AI, for the Vertex entry")
		assert.Equal(t, int64(1), modelStats(t, c, vertexFlash).Successes)
	})
}

// TestModelBackendProjectFailureStaysWithEntry: a project-wide failure of
// the Vertex AI entry (its credentials are refused) cools the entry down,
// not the Gemini API models of the Client's own key.
func TestModelBackendProjectFailureStaysWithEntry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gem := geminitest.New(geminitest.Model{Name: flash})
		vtx, _ := newVertex(t, geminitest.Model{Name: flash})
		cfg := vtx.ClientConfig()
		cfg.HTTPClient = vtx.HTTPClient() // no bearer token: 401 UNAUTHENTICATED
		sdk, err := genai.NewClient(t.Context(), cfg)
		require.NoError(t, err)
		c := newClient(t, gem, nil, geminiguard.WithCascade(vertexFlash, flash),
			geminiguard.WithModelBackend(vertexFlash, flash, sdk), geminiguard.WithStartupCheck(false))

		_, rec, err := ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		assert.Equal(t, geminiguard.ClassAuth, geminiguard.Classify(rec.Attempts[0].Err).Class)
		assert.True(t, c.Stats().ProjectCoolDownUntil.IsZero(), "the Client's project is not cooling down")
		assert.Equal(t, geminiguard.ClassAuth, modelStats(t, c, vertexFlash).CoolDownReason)
		_, rec, err = ask(t.Context(), c, "")
		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		assert.Equal(t, 1, vtx.Total(flash), "the refused entry cools down")
		assert.Equal(t, 2, gem.Total(flash))
	})
}

// TestCheckCascadeVertexShutdowns: CheckCascade checks each entry through its
// own backend, and reads a Vertex AI entry's shutdown under "vertex/"+model,
// never the Gemini API's date of the model.
func TestCheckCascadeVertexShutdowns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gem := geminitest.New(geminitest.Model{Name: flash})
		vtx, sdk := newVertex(t, geminitest.Model{Name: pro})
		soon := time.Now().Add(30 * 24 * time.Hour).UTC().Truncate(24 * time.Hour)
		later := time.Now().Add(400 * 24 * time.Hour).UTC().Truncate(24 * time.Hour)
		c := newClient(t, gem, nil, geminiguard.WithStartupCheck(false),
			geminiguard.WithCascade(flash, vertexFlash, "vertex/pro"),
			geminiguard.WithModelBackend(vertexFlash, flash, sdk),
			geminiguard.WithModelBackend("vertex/pro", pro, sdk),
			geminiguard.WithShutdowns(map[string]geminiguard.Shutdown{
				flash:           {Date: later},
				"vertex/" + pro: {Date: soon, Replacement: "gemini-3-pro"},
			}))
		report, err := c.CheckCascade(t.Context())
		require.ErrorIs(t, err, geminiguard.ErrModelNotFound)
		assert.Contains(t, err.Error(), vertexFlash)
		require.Len(t, report.Models, 3)
		assert.Equal(t, "ok", report.Models[0].Verdict)
		assert.Equal(t, "missing", report.Models[1].Verdict, "Vertex AI does not serve flash here")
		assert.Nil(t, report.Models[1].Shutdown, "the Gemini API's date is not Vertex AI's")
		assert.Equal(t, "shutdown soon", report.Models[2].Verdict)
		require.NotNil(t, report.Models[2].Shutdown)
		assert.Equal(t, soon, report.Models[2].Shutdown.Date)
		assert.Equal(t, 1, vtx.Hits("", geminitest.VerbList), "one listing per backend client")
	})
}

// TestWithModelBackendRefusals: the option says what to fix.
func TestWithModelBackendRefusals(t *testing.T) {
	_, err := geminiguard.New(context.Background(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithStartupCheck(false),
		geminiguard.WithModelBackend("", flash, nil), geminiguard.WithModelBackend(vertexFlash, flash, nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `WithModelBackend("", "`+flash+`")`)
	assert.Contains(t, err.Error(), "pass the *genai.Client from genai.NewClient")
}

// TestOTelProviderPerBackend: a call to the Vertex AI entry is reported
// with gen_ai.provider.name gcp.vertex_ai, one to the Gemini API's model
// with gcp.gemini.
func TestOTelProviderPerBackend(t *testing.T) {
	gem := geminitest.New(geminitest.Model{Name: flash})
	_, sdk := newVertex(t, geminitest.Model{Name: flash})
	tel := newTelemetry()
	c := newClient(t, gem, nil, append(tel.opts, geminiguard.WithCascade(flash, vertexFlash),
		geminiguard.WithModelBackend(vertexFlash, flash, sdk))...)

	for _, model := range []string{flash, vertexFlash} {
		_, rec, err := ask(t.Context(), c, model)
		require.NoError(t, err)
		assert.Equal(t, model, rec.Model)
	}
	providers := map[string]string{}
	for _, p := range histogram(t, tel.metrics(t), "gen_ai.client.operation.duration", "s") {
		model, _ := p.Attributes.Value("gen_ai.request.model")
		provider, _ := p.Attributes.Value("gen_ai.provider.name")
		providers[model.String()] = provider.String()
	}
	assert.Equal(t, map[string]string{flash: "gcp.gemini", vertexFlash: "gcp.vertex_ai"}, providers)
}
