package geminiguard

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"
)

func ptr[T any](v T) *T { return &v }

// cyclic is a map that holds itself.
func cyclic() map[string]any {
	m := map[string]any{}
	m["self"] = m
	return m
}

func TestCheckGenerateFlaws(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	text := genai.Text("hi")
	type point struct {
		X, Y float64
		skip float64 // unexported: JSON leaves it out
	}
	cases := []struct {
		name     string
		contents []*genai.Content
		config   *genai.GenerateContentConfig
		want     string // "" for a request that passes
	}{
		{"nil config", text, nil, ""},
		{"finite everything", text, &genai.GenerateContentConfig{Temperature: ptr(float32(0.2)), TopP: ptr(float32(1)),
			ResponseSchema: &genai.Schema{Type: genai.TypeNumber, Minimum: ptr(-1e308), Maximum: ptr(1e308)}}, ""},
		{"unexported NaN is not encoded", text, &genai.GenerateContentConfig{ResponseJsonSchema: point{X: 1, skip: nan}}, ""},
		{"a type with its own MarshalJSON is trusted", text, &genai.GenerateContentConfig{ResponseJsonSchema: map[string]any{"at": time.Time{}}}, ""},
		{"topK", text, &genai.GenerateContentConfig{TopK: ptr(float32(nan))}, "GenerateContentConfig.TopK is NaN: use a finite number"},
		{"presence penalty", text, &genai.GenerateContentConfig{PresencePenalty: ptr(float32(-inf))}, "GenerateContentConfig.PresencePenalty is -Inf"},
		{"schema default", text, &genai.GenerateContentConfig{ResponseSchema: &genai.Schema{AnyOf: []*genai.Schema{{}, {Default: nan}}}},
			"GenerateContentConfig.ResponseSchema.AnyOf[1].Default is NaN"},
		{"schema example", text, &genai.GenerateContentConfig{ResponseSchema: &genai.Schema{Example: []any{map[string]any{"x": float32(inf)}}}},
			`GenerateContentConfig.ResponseSchema.Example[0]["x"] is +Inf`},
		{"struct in a JSON schema", text, &genai.GenerateContentConfig{ResponseJsonSchema: []point{{X: 1}, {Y: nan}}},
			"GenerateContentConfig.ResponseJsonSchema[1].Y is NaN"},
		{"map with int keys", text, &genai.GenerateContentConfig{ResponseJsonSchema: map[int]*float64{7: ptr(inf)}},
			"GenerateContentConfig.ResponseJsonSchema[7] is +Inf"},
		{"func in a JSON schema", text, &genai.GenerateContentConfig{ResponseJsonSchema: map[string]any{"f": func() {}}},
			`GenerateContentConfig.ResponseJsonSchema["f"] is a func: JSON cannot encode it`},
		{"cycle", text, &genai.GenerateContentConfig{ResponseJsonSchema: cyclic()}, `GenerateContentConfig.ResponseJsonSchema["self"]["self"]`},
		{"tool response schema", text, &genai.GenerateContentConfig{Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{
			nil, {Name: "f", Response: &genai.Schema{Items: &genai.Schema{Minimum: ptr(nan)}}}}}}},
			"GenerateContentConfig.Tools[0].FunctionDeclarations[1].Response.Items.Minimum is NaN"},
		{"dynamic threshold", text, &genai.GenerateContentConfig{Tools: []*genai.Tool{{GoogleSearchRetrieval: &genai.GoogleSearchRetrieval{
			DynamicRetrievalConfig: &genai.DynamicRetrievalConfig{DynamicThreshold: ptr(float32(nan))}}}}},
			"GenerateContentConfig.Tools[0].GoogleSearchRetrieval.DynamicRetrievalConfig.DynamicThreshold is NaN"},
		{"custom search config", text, &genai.GenerateContentConfig{Tools: []*genai.Tool{{ExaAISearch: &genai.ToolExaAISearch{CustomConfigs: map[string]any{"k": inf}}}}},
			`GenerateContentConfig.Tools[0].ExaAISearch.CustomConfigs["k"] is +Inf`},
		{"nil tool", text, &genai.GenerateContentConfig{Tools: []*genai.Tool{nil}}, "GenerateContentConfig.Tools[0] is nil: remove it"},
		{"nil safety setting", text, &genai.GenerateContentConfig{SafetySettings: []*genai.SafetySetting{nil}}, "GenerateContentConfig.SafetySettings[0] is nil"},
		{"latitude", text, &genai.GenerateContentConfig{ToolConfig: &genai.ToolConfig{RetrievalConfig: &genai.RetrievalConfig{LatLng: &genai.LatLng{Latitude: ptr(nan)}}}},
			"GenerateContentConfig.ToolConfig.RetrievalConfig.LatLng.Latitude is NaN"},
		{"extra body", text, &genai.GenerateContentConfig{HTTPOptions: &genai.HTTPOptions{ExtraBody: map[string]any{"generationConfig": map[string]any{"seed": nan}}}},
			`GenerateContentConfig.HTTPOptions.ExtraBody["generationConfig"]["seed"] is NaN`},
		{"video fps", []*genai.Content{{Parts: []*genai.Part{{VideoMetadata: &genai.VideoMetadata{FPS: ptr(inf)}}}}}, nil,
			"contents[0].Parts[0].VideoMetadata.FPS is +Inf"},
		{"function response", []*genai.Content{{Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{Response: map[string]any{"r": nan}}}}}}, nil,
			`contents[0].Parts[0].FunctionResponse.Response["r"] is NaN`},
		{"partial argument", []*genai.Content{{Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{PartialArgs: []*genai.PartialArg{nil, {NumberValue: ptr(nan)}}}}}}}, nil,
			"contents[0].Parts[0].FunctionCall.PartialArgs[1].NumberValue is NaN"},
		{"part metadata", []*genai.Content{{Parts: []*genai.Part{{PartMetadata: map[string]any{"m": inf}}}}}, nil,
			`contents[0].Parts[0].PartMetadata["m"] is +Inf`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkGenerate(tc.contents, tc.config)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.True(t, strings.HasPrefix(err.Error(), "geminiguard: "+tc.want), "got %q", err.Error())
			assert.Less(t, len(err.Error()), 400, "a short message, even for a cycle")
			assert.Equal(t, Verdict{Class: ClassBadRequest, Scope: ScopeRequest}, Classify(err))
		})
	}
}

func TestCheckGenerateCycle(t *testing.T) {
	err := checkGenerate(genai.Text("hi"), &genai.GenerateContentConfig{ResponseJsonSchema: cyclic()})
	require.Error(t, err)
	assert.Regexp(t, `^geminiguard: GenerateContentConfig.ResponseJsonSchema(\["self"\])+\.\.\. nests more than 1000 levels deep: remove the cycle`, err.Error())
}

func TestCheckEmbed(t *testing.T) {
	require.NoError(t, checkEmbed(genai.Text("hi"), nil))
	require.NoError(t, checkEmbed(genai.Text("hi"), &genai.EmbedContentConfig{TaskType: "RETRIEVAL_DOCUMENT"}))
	err := checkEmbed(genai.Text("hi"), &genai.EmbedContentConfig{HTTPOptions: &genai.HTTPOptions{ExtraBody: map[string]any{"x": math.NaN()}}})
	require.EqualError(t, err, `geminiguard: EmbedContentConfig.HTTPOptions.ExtraBody["x"] is NaN: use a finite number (JSON has no NaN or infinities)`)
}

// TestCheckGenerateNoAllocs: the boundary check costs no allocation on the
// requests calls make every day.
func TestCheckGenerateNoAllocs(t *testing.T) {
	text := genai.Text("Say hi")
	plain := &genai.GenerateContentConfig{
		Temperature:       ptr(float32(0.7)),
		TopP:              ptr(float32(0.95)),
		MaxOutputTokens:   1024,
		SystemInstruction: genai.NewContentFromText("Be brief.", genai.RoleUser),
		SafetySettings:    []*genai.SafetySetting{{Category: genai.HarmCategoryHarassment, Threshold: genai.HarmBlockThresholdBlockNone}},
		ResponseMIMEType:  "application/json",
		ResponseSchema: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{
			"score": {Type: genai.TypeNumber, Minimum: ptr(0.0), Maximum: ptr(1.0)},
			"tags":  {Type: genai.TypeArray, Items: &genai.Schema{Type: genai.TypeString}},
		}},
		Tools: []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{{
			Name: "lookup", ParametersJsonSchema: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string", "maxLength": 100.0}}},
		}}}},
	}
	chat := []*genai.Content{
		genai.NewContentFromText("What is the weather?", genai.RoleUser),
		{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{Name: "lookup", Args: map[string]any{"q": "weather", "n": 3.0}}}}},
		{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{Name: "lookup", Response: map[string]any{"t": 21.5}}}}},
	}
	for name, f := range map[string]func(){
		"nil config":   func() { _ = checkGenerate(text, nil) },
		"plain config": func() { _ = checkGenerate(text, plain) },
		"chat":         func() { _ = checkGenerate(chat, plain) },
		"embed":        func() { _ = checkEmbed(text, nil) },
	} {
		assert.Zero(t, testing.AllocsPerRun(100, f), name)
	}
}
