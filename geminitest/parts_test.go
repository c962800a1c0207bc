package geminitest_test

import (
	"encoding/base64"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

const pro3 = "gemini-3-pro-preview"

func weatherCall(id string) *genai.Part {
	return &genai.Part{FunctionCall: &genai.FunctionCall{ID: id, Name: "get_weather", Args: map[string]any{"city": "Paris"}}}
}

func weatherResponse(id string) *genai.Part {
	return &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: id, Name: "get_weather", Response: map[string]any{"sky": "clear"}}}
}

func TestStepPartsAnswerAnyPart(t *testing.T) {
	parts := []*genai.Part{
		{Text: "planning", Thought: true},
		weatherCall("c1"),
		{FunctionCall: &genai.FunctionCall{ID: "c2", Name: "get_time", Args: map[string]any{"tz": "CET"}}},
		{InlineData: &genai.Blob{MIMEType: "image/png", Data: []byte{0x89, 'P', 'N', 'G'}}},
		{ExecutableCode: &genai.ExecutableCode{Language: genai.LanguagePython, Code: "print(1)"}},
	}
	fake := geminitest.New(geminitest.Model{Name: pro3, Script: []geminitest.Step{{Parts: parts}, {Parts: parts}}})
	c := inMemory.client(t, fake)

	r, err := c.Models.GenerateContent(t.Context(), pro3, prompt("weather?"), nil)
	require.NoError(t, err)
	got := r.Candidates[0].Content.Parts
	require.Len(t, got, len(parts))
	assert.Equal(t, genai.FinishReasonStop, r.Candidates[0].FinishReason)
	assert.Equal(t, "c1", got[1].FunctionCall.ID)
	assert.Equal(t, map[string]any{"city": "Paris"}, got[1].FunctionCall.Args)
	assert.Equal(t, "get_time", got[2].FunctionCall.Name)
	assert.Equal(t, parts[3].InlineData, got[3].InlineData)
	assert.Equal(t, parts[4].ExecutableCode, got[4].ExecutableCode)
	// Signed: the thought part and the first call only, as Gemini 3 signs.
	assert.NotEmpty(t, got[0].ThoughtSignature)
	assert.NotEmpty(t, got[1].ThoughtSignature)
	assert.Empty(t, got[2].ThoughtSignature)
	assert.Empty(t, parts[1].ThoughtSignature, "the step's parts are not written")

	s := stream(t.Context(), c, pro3, nil)
	require.NoError(t, s.err)
	require.Len(t, s.chunks, len(parts), "one event per part")
	assert.Equal(t, "c1", s.chunks[1].Candidates[0].Content.Parts[0].FunctionCall.ID)
	assert.Equal(t, []genai.FinishReason{genai.FinishReasonStop}, s.finishReasons())
}

// A tool loop's fake in a few lines: Decide answers a call, then the text
// once the function's response is in.
func TestDecideBuildsAToolLoop(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: pro3, RequireSignatures: true, Decide: func(r geminitest.Request, _ int) geminitest.Step {
		if last := r.Contents[len(r.Contents)-1]; last.Parts[0].FunctionResponse != nil {
			return geminitest.Step{Text: "Clear skies in Paris."}
		}
		return geminitest.Step{Parts: []*genai.Part{weatherCall("c1")}}
	}})
	c := inMemory.client(t, fake)

	history := prompt("Weather in Paris?")
	r, err := c.Models.GenerateContent(t.Context(), pro3, history, nil)
	require.NoError(t, err)
	require.NotNil(t, r.Candidates[0].Content.Parts[0].FunctionCall)
	history = append(history, r.Candidates[0].Content, genai.NewContentFromParts([]*genai.Part{weatherResponse("c1")}, genai.RoleUser))
	r, err = c.Models.GenerateContent(t.Context(), pro3, history, nil)
	require.NoError(t, err)
	assert.Equal(t, "Clear skies in Paris.", r.Text())
}

func TestRefusesWhatTheAPIRefuses(t *testing.T) {
	user := func(parts ...*genai.Part) *genai.Content { return genai.NewContentFromParts(parts, genai.RoleUser) }
	model := func(parts ...*genai.Part) *genai.Content { return genai.NewContentFromParts(parts, genai.RoleModel) }
	for _, tc := range []struct {
		name     string
		contents []*genai.Content
		message  string
	}{
		{"no parts", []*genai.Content{user(genai.NewPartFromText("hi")), {Role: genai.RoleModel}}, "* GenerateContentRequest.contents[1].parts: contents.parts must not be empty.\n"},
		{"role assistant", []*genai.Content{{Role: "assistant", Parts: []*genai.Part{{Text: "hi"}}}}, "Please use a valid role: user, model."},
		{"empty text part", []*genai.Content{user(genai.NewPartFromText("hi"), genai.NewPartFromText(""))}, "* GenerateContentRequest.contents[0].parts[1].data: required oneof field 'data' must have one initialized field\n"},
		{"response without call", []*genai.Content{user(genai.NewPartFromText("hi")), model(genai.NewPartFromText("ok")), user(weatherResponse("c1"))}, "Please ensure that function response turn comes immediately after a function call turn."},
		{"responses not matching calls", []*genai.Content{user(genai.NewPartFromText("hi")), model(weatherCall("c1")), user(weatherResponse("c1"), weatherResponse("c2"))}, "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash})
			c := inMemory.client(t, fake)
			_, err := c.Models.GenerateContent(t.Context(), flash, tc.contents, nil)
			e := apiError(t, err)
			assert.Equal(t, 400, e.Code)
			assert.Equal(t, "INVALID_ARGUMENT", e.Status)
			assert.Equal(t, tc.message, e.Message)
			var serr error
			for _, err := range c.Models.GenerateContentStream(t.Context(), flash, tc.contents, nil) {
				serr = err
				break
			}
			assert.Equal(t, tc.message, apiError(t, serr).Message, "the stream route refuses the same way")
		})
	}
}

func TestSignaturesOfGemini3(t *testing.T) {
	const flash3 = "gemini-3-flash-preview"
	fake := geminitest.New(
		geminitest.Model{Name: pro3, RequireSignatures: true, Script: []geminitest.Step{{Parts: []*genai.Part{weatherCall("c1")}}}},
		geminitest.Model{Name: flash3, RequireSignatures: true},
		geminitest.Model{Name: flash}, // an older model checks nothing
	)
	c := inMemory.client(t, fake)
	r, err := c.Models.GenerateContent(t.Context(), pro3, prompt("Weather in Paris?"), nil)
	require.NoError(t, err)
	signed := r.Candidates[0].Content
	require.NotEmpty(t, signed.Parts[0].ThoughtSignature)
	loop := func(call *genai.Content) []*genai.Content {
		return append(prompt("Weather in Paris?"), call, genai.NewContentFromParts([]*genai.Part{weatherResponse("c1")}, genai.RoleUser))
	}
	with := func(sig []byte) *genai.Content {
		p := *signed.Parts[0]
		p.ThoughtSignature = sig
		return genai.NewContentFromParts([]*genai.Part{&p}, genai.RoleModel)
	}
	standIn, err := base64.URLEncoding.DecodeString("skip_thought_signature_validator")
	require.NoError(t, err)

	_, err = c.Models.GenerateContent(t.Context(), pro3, loop(signed), nil)
	require.NoError(t, err, "its own signature")
	_, err = c.Models.GenerateContent(t.Context(), flash3, loop(with(standIn)), nil)
	require.NoError(t, err, "the documented stand-in")
	_, err = c.Models.GenerateContent(t.Context(), flash, loop(signed), nil)
	require.NoError(t, err, "an older model")

	_, err = c.Models.GenerateContent(t.Context(), flash3, loop(signed), nil)
	assert.Equal(t, "Corrupted thought signature.", apiError(t, err).Message, "another model's signature")
	_, err = c.Models.GenerateContent(t.Context(), flash3, loop(with(nil)), nil)
	e := apiError(t, err)
	assert.Equal(t, 400, e.Code)
	assert.Equal(t, "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, "+
		"and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:get_weather` , "+
		"position 2. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", e.Message)
	// A call of an earlier turn is not checked for a missing signature.
	earlier := append(loop(with(nil)), genai.NewContentFromText("fine", genai.RoleModel), genai.NewContentFromText("and now?", genai.RoleUser))
	_, err = c.Models.GenerateContent(t.Context(), flash3, earlier, nil)
	require.NoError(t, err)
}
