package geminitest_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

func TestGenerateOK(t *testing.T) {
	for _, w := range []wire{inMemory, http1, http2} {
		t.Run(w.name, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash})
			c := w.client(t, fake)

			r, err := c.Models.GenerateContent(t.Context(), flash, prompt("Say hi"), nil)
			require.NoError(t, err)
			full := fake.FullText(flash)
			assert.Equal(t, full, r.Text())
			assert.GreaterOrEqual(t, len(full), 200)
			assert.Contains(t, full, "Hello from gemini-2.5-flash. ")
			require.Len(t, r.Candidates, 1)
			assert.Equal(t, genai.FinishReasonStop, r.Candidates[0].FinishReason)
			assert.Equal(t, genai.RoleModel, r.Candidates[0].Content.Role)
			assert.Empty(t, r.Candidates[0].ContinuationToken)
			assert.Equal(t, flash, r.ModelVersion)
			assert.NotEmpty(t, r.ResponseID)
			require.NotNil(t, r.UsageMetadata)
			assert.Equal(t, int32(2), r.UsageMetadata.PromptTokenCount) // "Say hi": 6 chars
			assert.Equal(t, int32((len(full)+3)/4), r.UsageMetadata.CandidatesTokenCount)
			assert.Equal(t, r.UsageMetadata.PromptTokenCount+r.UsageMetadata.CandidatesTokenCount, r.UsageMetadata.TotalTokenCount)
		})
	}
}

func TestCountersAndRequests(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: "gemini-2.5-pro"})
	c := inMemory.client(t, fake)

	_, err := c.Models.GenerateContent(t.Context(), flash, prompt("one"), nil)
	require.NoError(t, err)
	_, err = c.Models.GenerateContent(t.Context(), flash, prompt("two"), &genai.GenerateContentConfig{Temperature: genai.Ptr[float32](0.2)})
	require.NoError(t, err)
	require.NoError(t, stream(t.Context(), c, flash, nil).err)
	_, err = c.Models.CountTokens(t.Context(), flash, prompt("count"), nil)
	require.NoError(t, err)
	_, err = c.Models.Get(t.Context(), flash, nil)
	require.NoError(t, err)
	_, err = c.Models.List(t.Context(), nil)
	require.NoError(t, err)

	assert.Equal(t, 2, fake.Hits(flash, geminitest.VerbGenerate))
	assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbStream))
	assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbCountTokens))
	assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbGet))
	assert.Equal(t, 1, fake.Hits("", geminitest.VerbList))
	assert.Equal(t, 3, fake.Total(flash))
	assert.Equal(t, 0, fake.Total("gemini-2.5-pro"))

	reqs := fake.Requests(flash)
	require.Len(t, reqs, 3)
	for i, want := range []struct {
		verb geminitest.Verb
		text string
	}{{geminitest.VerbGenerate, "one"}, {geminitest.VerbGenerate, "two"}, {geminitest.VerbStream, "stream please"}} {
		assert.Equal(t, want.verb, reqs[i].Verb)
		require.Len(t, reqs[i].Contents, 1)
		assert.Equal(t, genai.RoleUser, reqs[i].Contents[0].Role)
		assert.Equal(t, want.text, reqs[i].Contents[0].Parts[0].Text)
		assert.Equal(t, geminitest.Key, reqs[i].Header.Get("X-Goog-Api-Key"))
		assert.False(t, reqs[i].At.IsZero())
	}
	assert.JSONEq(t, `{"contents":[{"parts":[{"text":"two"}],"role":"user"}],"generationConfig":{"temperature":0.2}}`, string(reqs[1].Body))

	fake.Reset()
	assert.Equal(t, 0, fake.Total(flash))
	assert.Empty(t, fake.Requests(flash))
}

func TestBadKey(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash})
	cfg := fake.ClientConfig()
	cfg.APIKey = "AIza-real-looking-key"
	c := newClient(t, cfg)

	_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
	e := apiError(t, err)
	assert.Equal(t, 400, e.Code)
	assert.Equal(t, "INVALID_ARGUMENT", e.Status)
	assert.Equal(t, "API key not valid. Please pass a valid API key.", e.Message)
	require.NotEmpty(t, e.Details)
	assert.Equal(t, "API_KEY_INVALID", e.Details[0]["reason"])

	_, err = c.Models.List(t.Context(), nil)
	assert.Equal(t, 400, apiError(t, err).Code)
	assert.Equal(t, 1, fake.Total(flash), "rejected requests are counted")
	assert.Equal(t, 1, fake.Hits("", geminitest.VerbList))
}

func TestUnknownAndUnlistedModels(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: "gemini-1.5-pro", Unlisted: true})
	c := inMemory.client(t, fake)

	for _, model := range []string{"gemini-1.5-pro", "nope"} {
		_, err := c.Models.GenerateContent(t.Context(), model, prompt("hi"), nil)
		e := apiError(t, err)
		assert.Equal(t, 404, e.Code)
		assert.Equal(t, "NOT_FOUND", e.Status)
		assert.Equal(t, "models/"+model+" is not found for API version v1beta, or is not supported for generateContent. "+
			"Call ListModels to see the list of available models and their supported methods.", e.Message)

		assert.Equal(t, 404, apiError(t, stream(t.Context(), c, model, nil).err).Code)
		_, err = c.Models.Get(t.Context(), model, nil)
		assert.Equal(t, 404, apiError(t, err).Code)
		assert.Equal(t, 2, fake.Total(model))
	}

	// Retiring a model at run time.
	fake.SetModel(geminitest.Model{Name: flash, Unlisted: true})
	_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
	assert.Equal(t, 404, apiError(t, err).Code)
}

func TestListPaging(t *testing.T) {
	var models []geminitest.Model
	for i := range 5 {
		models = append(models, geminitest.Model{Name: fmt.Sprintf("gemini-%d", i), DisplayName: fmt.Sprintf("Gemini %d", i)})
	}
	models = append(models, geminitest.Model{Name: "gemini-retired", Unlisted: true})
	fake := geminitest.New(models...)
	c := inMemory.client(t, fake)

	var names []string
	token := ""
	for range 3 {
		// Fresh List calls: Page.Next after a PageToken re-sends the first token
		// (research/gemini-wire.md §0.11).
		page, err := c.Models.List(t.Context(), &genai.ListModelsConfig{PageSize: 2, PageToken: token})
		require.NoError(t, err)
		for _, m := range page.Items {
			names = append(names, m.Name)
		}
		token = page.NextPageToken
	}
	assert.Equal(t, []string{"models/gemini-0", "models/gemini-1", "models/gemini-2", "models/gemini-3", "models/gemini-4"}, names)
	assert.Empty(t, token)

	var all []string
	for m, err := range c.Models.All(t.Context()) {
		require.NoError(t, err)
		all = append(all, m.Name)
	}
	assert.Equal(t, names, all)

	page, err := c.Models.List(t.Context(), &genai.ListModelsConfig{PageSize: 10, PageToken: "5"})
	require.NoError(t, err)
	assert.Empty(t, page.Items)
	_, err = c.Models.List(t.Context(), &genai.ListModelsConfig{PageToken: "garbage"})
	assert.Equal(t, 400, apiError(t, err).Code)
}

func TestScriptList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash})
		c := inMemory.client(t, fake)
		fake.ScriptList(geminitest.Step{Fault: geminitest.Overloaded, Latency: time.Second}, geminitest.Step{}, geminitest.Step{Fault: geminitest.APIKeyInvalid})
		start := time.Now()
		_, err := c.Models.List(t.Context(), nil)
		assert.Equal(t, 503, apiError(t, err).Code)
		assert.Equal(t, time.Second, time.Since(start), "the step's latency")
		page, err := c.Models.List(t.Context(), nil)
		require.NoError(t, err)
		assert.Len(t, page.Items, 1)
		_, err = c.Models.List(t.Context(), nil)
		assert.Equal(t, 400, apiError(t, err).Code)
		_, err = c.Models.List(t.Context(), nil)
		require.NoError(t, err, "normal again after the script")
		assert.Equal(t, 4, fake.Hits("", geminitest.VerbList))

		fake.ScriptList(geminitest.Step{Fault: geminitest.Internal})
		fake.Reset()
		_, err = c.Models.List(t.Context(), nil)
		require.NoError(t, err, "Reset forgets the script")
		assert.Panics(t, func() { fake.ScriptList(geminitest.Step{Fault: geminitest.FinishSafety}) })
	})
}

func TestGet(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash, DisplayName: "Gemini 2.5 Flash", InputTokenLimit: 1000})
	c := inMemory.client(t, fake)

	m, err := c.Models.Get(t.Context(), flash, nil)
	require.NoError(t, err)
	assert.Equal(t, "models/"+flash, m.Name)
	assert.Equal(t, "Gemini 2.5 Flash", m.DisplayName)
	assert.Equal(t, "001", m.Version)
	assert.Equal(t, int32(1000), m.InputTokenLimit)
	assert.Equal(t, int32(65536), m.OutputTokenLimit)
	assert.Contains(t, m.SupportedActions, "generateContent")
}

func TestCountTokensAndEmbed(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: "text-embedding-004"})
	c := inMemory.client(t, fake)

	n, err := c.Models.CountTokens(t.Context(), flash, []*genai.Content{
		genai.NewContentFromText("count me", genai.RoleUser),
		genai.NewContentFromText("and me too", genai.RoleModel),
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, int32(5), n.TotalTokens) // 18 chars

	embed := func() *genai.EmbedContentResponse {
		r, err := c.Models.EmbedContent(t.Context(), "text-embedding-004",
			[]*genai.Content{genai.NewContentFromText("a", genai.RoleUser), genai.NewContentFromText("b", genai.RoleUser)},
			&genai.EmbedContentConfig{OutputDimensionality: genai.Ptr[int32](3)})
		require.NoError(t, err)
		return r
	}
	r := embed()
	require.Len(t, r.Embeddings, 2)
	assert.Len(t, r.Embeddings[0].Values, 3)
	assert.NotEqual(t, r.Embeddings[0].Values, r.Embeddings[1].Values)
	assert.Equal(t, r.Embeddings, embed().Embeddings, "deterministic")
	assert.Equal(t, 2, fake.Hits("text-embedding-004", geminitest.VerbEmbed))
}

// A client resumes a cut answer by sending the partial model turn.
func TestResumeFromPartialModelTurn(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash})
	c := inMemory.client(t, fake)
	full := fake.FullText(flash)
	contents := []*genai.Content{
		genai.NewContentFromText("hi", genai.RoleUser),
		genai.NewContentFromText(full[:50], genai.RoleModel),
	}

	r, err := c.Models.GenerateContent(t.Context(), flash, contents, nil)
	require.NoError(t, err)
	assert.Equal(t, full[50:], r.Text())

	var got string
	for chunk, err := range c.Models.GenerateContentStream(t.Context(), flash, contents, nil) {
		require.NoError(t, err)
		got += chunk.Text()
	}
	assert.Equal(t, full[50:], got)

	// A model turn that is not a prefix of the answer is a new question.
	r, err = c.Models.GenerateContent(t.Context(), flash, []*genai.Content{
		genai.NewContentFromText("hi", genai.RoleUser),
		genai.NewContentFromText("something else", genai.RoleModel),
	}, nil)
	require.NoError(t, err)
	assert.Equal(t, full, r.Text())
}

func TestContinuation(t *testing.T) {
	step := geminitest.Step{Continuation: true, Text: "part one, part two"}
	t.Run("unary", func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{step, {Text: step.Text}}})
		c := inMemory.client(t, fake)

		r, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
		require.NoError(t, err)
		assert.Equal(t, "part one, part two", r.Text())
		assert.Equal(t, genai.FinishReasonStop, r.Candidates[0].FinishReason)
		assert.Equal(t, 2, fake.Total(flash))
		var second struct {
			ContinuationToken []byte `json:"continuationToken"`
		}
		require.NoError(t, json.Unmarshal(fake.Requests(flash)[1].Body, &second))
		assert.NotEmpty(t, second.ContinuationToken)
	})
	t.Run("stream", func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Chunks: 2, Script: []geminitest.Step{{Continuation: true}}})
		c := inMemory.client(t, fake)

		s := stream(t.Context(), c, flash, nil)
		require.NoError(t, s.err)
		assert.Len(t, s.chunks, 4)
		assert.Equal(t, fake.FullText(flash), s.text())
		assert.Equal(t, []genai.FinishReason{genai.FinishReasonStop}, s.finishReasons())
		assert.Equal(t, 2, fake.Hits(flash, geminitest.VerbStream))
	})
	t.Run("turned off", func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{step}})
		c := inMemory.client(t, fake)

		r, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), &genai.GenerateContentConfig{AutomaticContinuation: genai.Ptr(false)})
		require.NoError(t, err)
		assert.Equal(t, "part one,", r.Text())
		assert.Equal(t, genai.FinishReasonContinuation, r.Candidates[0].FinishReason)
		assert.NotEmpty(t, r.Candidates[0].ContinuationToken)
		assert.Equal(t, 1, fake.Total(flash))
	})
}

func TestLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Latency: 800 * time.Millisecond})
		c := newClient(t, fake.ClientConfig())

		start := time.Now()
		_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
		require.NoError(t, err)
		assert.Equal(t, 800*time.Millisecond, time.Since(start))

		// Errors answer at once unless their step has a latency.
		fake.Script(flash, geminitest.Step{Fault: geminitest.Overloaded}, geminitest.Step{Fault: geminitest.Overloaded, Latency: 3 * time.Second})
		start = time.Now()
		require.Error(t, generate(t, c, flash))
		assert.Zero(t, time.Since(start))
		require.Error(t, generate(t, c, flash))
		assert.Equal(t, 3*time.Second, time.Since(start))
	})
}

func TestScriptThenFaultsAreDeterministic(t *testing.T) {
	run := func() []string {
		fake := geminitest.New(geminitest.Model{
			Name:   flash,
			Script: []geminitest.Step{{Fault: geminitest.Internal}},
			Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 0.5}},
			Seed:   42,
		})
		c := inMemory.client(t, fake)
		var out []string
		for range 40 {
			if err := generate(t, c, flash); err != nil {
				out = append(out, apiError(t, err).Status)
			} else {
				out = append(out, "OK")
			}
		}
		return out
	}
	first := run()
	assert.Equal(t, "INTERNAL", first[0])
	assert.Contains(t, first[1:], "UNAVAILABLE")
	assert.Contains(t, first[1:], "OK")
	assert.NotContains(t, first[1:], "INTERNAL")
	assert.Equal(t, first, run())
}

func TestDecide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var seen []int
		fake := geminitest.New(geminitest.Model{
			Name:   flash,
			Script: []geminitest.Step{{Fault: geminitest.Internal}}, // ignored
			Decide: func(r geminitest.Request, i int) geminitest.Step {
				seen = append(seen, i)
				if r.At.Sub(start) < time.Minute {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{}
			},
		})
		c := newClient(t, fake.ClientConfig())

		assert.Equal(t, 503, apiError(t, generate(t, c, flash)).Code)
		time.Sleep(time.Minute)
		require.NoError(t, generate(t, c, flash))
		assert.Equal(t, []int{0, 1}, seen)
	})
}

func TestScriptReplacesAndRewinds(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.Internal}}})
	c := inMemory.client(t, fake)

	assert.Equal(t, 500, apiError(t, generate(t, c, flash)).Code)
	require.NoError(t, generate(t, c, flash))
	fake.Reset()
	assert.Equal(t, 500, apiError(t, generate(t, c, flash)).Code)

	fake.Script(flash, geminitest.Step{Fault: geminitest.LeakedKey})
	assert.Equal(t, 403, apiError(t, generate(t, c, flash)).Code)
	assert.Panics(t, func() { fake.Script("nope") })
}

// Many concurrent calls over both wires, for the race detector.
func TestConcurrent(t *testing.T) {
	fake := geminitest.New(geminitest.Model{
		Name:   flash,
		Quota:  geminitest.Quota{RPM: 1000},
		Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.StreamCutBetween}, P: 0.3}},
	})
	clients := []*genai.Client{inMemory.client(t, fake), http1.client(t, fake)}
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			c := clients[i%2]
			if i%3 == 0 {
				_ = stream(t.Context(), c, flash, nil)
				return
			}
			_, err := c.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	assert.Equal(t, 40, fake.Total(flash))
	assert.Len(t, fake.Requests(flash), 40)
}
