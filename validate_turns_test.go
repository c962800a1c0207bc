package geminiguard_test

import (
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

func userTurn(parts ...*genai.Part) *genai.Content {
	return genai.NewContentFromParts(parts, genai.RoleUser)
}

func modelTurn(parts ...*genai.Part) *genai.Content {
	return genai.NewContentFromParts(parts, genai.RoleModel)
}

func callPart(id, name string) *genai.Part {
	return &genai.Part{FunctionCall: &genai.FunctionCall{ID: id, Name: name, Args: map[string]any{"city": "Paris"}}}
}

func responsePart(id, name string) *genai.Part {
	return &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: id, Name: name, Response: map[string]any{"sky": "clear"}}}
}

// TestContentsTheAPIRefusesAreRefusedFirst: contents the real API
// certainly refuses with a 400 (and the fake with the real bodies) used to
// be sent, costing a request, tokens and a retry-budget share for a 400.
// Now each is refused before anything is sent, saying what to fix; the
// fake's own refusal of the same contents is checked first, through the
// SDK alone.
func TestContentsTheAPIRefusesAreRefusedFirst(t *testing.T) {
	hi := genai.NewPartFromText("hi")
	cases := []struct {
		name     string
		contents []*genai.Content
		want     []string
	}{
		{"content without parts", []*genai.Content{userTurn(hi), {Role: genai.RoleModel}},
			[]string{"contents[1].Parts is empty", "give it a part, or remove the content"}},
		{"content with an empty parts slice", []*genai.Content{{Role: genai.RoleUser, Parts: []*genai.Part{}}},
			[]string{"contents[0].Parts is empty"}},
		{"role assistant", []*genai.Content{userTurn(hi), {Role: "assistant", Parts: []*genai.Part{{Text: "hello"}}}, userTurn(hi)},
			[]string{`contents[1].Role is "assistant"`, `use "model"`}},
		{"role system", []*genai.Content{{Role: "system", Parts: []*genai.Part{{Text: "be brief"}}}, userTurn(hi)},
			[]string{`contents[0].Role is "system"`, "GenerateContentConfig.SystemInstruction"}},
		{"role tool", []*genai.Content{userTurn(hi), modelTurn(callPart("c1", "get_weather")), {Role: "tool", Parts: []*genai.Part{responsePart("c1", "get_weather")}}},
			[]string{`contents[2].Role is "tool"`, `use "user"`}},
		{"empty text part", []*genai.Content{userTurn(hi, genai.NewPartFromText(""))},
			[]string{"contents[0].Parts[1] is empty", "give it text or other data, or remove it"}},
		{"zero part", []*genai.Content{userTurn(&genai.Part{})},
			[]string{"contents[0].Parts[0] is empty"}},
		{"function response without a call", []*genai.Content{userTurn(hi), modelTurn(genai.NewPartFromText("ok")), userTurn(responsePart("c1", "get_weather"))},
			[]string{"contents[2] holds function responses", "contents[1] holds no function call"}},
		{"function response first", []*genai.Content{userTurn(responsePart("c1", "get_weather"))},
			[]string{"contents[0] holds function responses", "no model content with function calls before it"}},
		{"more responses than calls", []*genai.Content{userTurn(hi), modelTurn(callPart("c1", "get_weather")), userTurn(responsePart("c1", "get_weather"), responsePart("c2", "get_time"))},
			[]string{"contents[2] holds 2 function responses", "contents[1] holds 1 function call"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})

				// The fake refuses them as the API does.
				raw, err := genai.NewClient(t.Context(), srv.ClientConfig())
				require.NoError(t, err)
				_, err = raw.Models.GenerateContent(t.Context(), pro, tc.contents, nil)
				var apiErr genai.APIError
				require.ErrorAs(t, err, &apiErr)
				assert.Equal(t, 400, apiErr.Code, "the fake refuses it")
				srv.Reset()

				c, sent := newCountingClient(t, srv)
				resp, err := c.GenerateContent(t.Context(), "", tc.contents, nil)
				assert.Nil(t, resp)
				requireRefusedRequest(t, err, tc.want...)

				n := 0
				for resp, err := range c.GenerateContentStream(t.Context(), "", tc.contents, nil) {
					assert.Nil(t, resp)
					requireRefusedRequest(t, err, tc.want...)
					n++
				}
				assert.Equal(t, 1, n, "the stream yields its error once and ends")

				assert.Zero(t, sent.n.Load(), "nothing was sent")
				requireNothingCooling(t, c)
			})
		})
	}
}

// TestValidToolLoopIsSent: what the API accepts passes the pre-send checks:
// a content without a role, inline data, a thought part with its
// signature, a part with only a signature (streams end with one), parallel
// function calls and their responses beside other data, code execution.
func TestValidToolLoopIsSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		c, sent := newCountingClient(t, srv)
		sig := []byte("a signature the caller kept")
		contents := []*genai.Content{
			{Parts: []*genai.Part{genai.NewPartFromText("Weather and time in Paris?"), genai.NewPartFromBytes([]byte{0x89, 'P', 'N', 'G'}, "image/png")}},
			modelTurn(&genai.Part{Text: "Two calls.", Thought: true, ThoughtSignature: sig},
				callPart("c1", "get_weather"), callPart("c2", "get_time"), &genai.Part{ThoughtSignature: sig}),
			userTurn(responsePart("c1", "get_weather"), responsePart("c2", "get_time"), genai.NewPartFromText("and be brief")),
			modelTurn(&genai.Part{ExecutableCode: &genai.ExecutableCode{Language: genai.LanguagePython, Code: "print(1)"}},
				&genai.Part{CodeExecutionResult: &genai.CodeExecutionResult{Outcome: genai.OutcomeOK, Output: "1"}}),
			userTurn(genai.NewPartFromText("Thanks. And tomorrow?")),
		}

		var rec geminiguard.CallRecord
		resp, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", contents, nil)
		require.NoError(t, err)
		assert.NotEmpty(t, resp.Text())
		assert.Equal(t, pro, rec.Model)
		assert.Equal(t, int64(1), sent.n.Load())
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbGenerate))

		for _, err := range c.GenerateContentStream(t.Context(), "", contents, nil) {
			require.NoError(t, err)
		}
		assert.Equal(t, 1, srv.Hits(pro, geminitest.VerbStream))
	})
}
