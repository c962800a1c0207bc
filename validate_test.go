package geminiguard_test

import (
	"math"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// countingTransport counts every request that reaches the fake, those to
// paths it does not serve included (srv.Hits counts only its routes).
type countingTransport struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// newCountingClient builds a Client with pro then flash, on srv's transport
// behind a countingTransport, without a startup check, so that the count is
// of the calls alone.
func newCountingClient(t *testing.T, srv *geminitest.Server, opts ...geminiguard.Option) (*geminiguard.Client, *countingTransport) {
	t.Helper()
	sent := &countingTransport{rt: srv.Transport()}
	base := []geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key),
		geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(&http.Client{Transport: sent}),
		geminiguard.WithCascade(pro, flash),
		geminiguard.WithStartupCheck(false),
	}
	c, err := geminiguard.New(t.Context(), append(base, opts...)...)
	require.NoError(t, err)
	return c, sent
}

// requireRefusedRequest checks err is the boundary's refusal of a bad
// request: request-scoped, not a cascade failure, saying what to fix.
func requireRefusedRequest(t *testing.T, err error, wantInMessage ...string) {
	t.Helper()
	require.Error(t, err)
	v := geminiguard.Classify(err)
	assert.Equal(t, geminiguard.ClassBadRequest, v.Class)
	assert.Equal(t, geminiguard.ScopeRequest, v.Scope)
	assert.False(t, v.Retryable)
	assert.NotErrorIs(t, err, geminiguard.ErrAllModelsFailed)
	assert.Regexp(t, `^geminiguard: `, err.Error())
	for _, w := range wantInMessage {
		assert.Contains(t, err.Error(), w)
	}
	requireNoKey(t, err.Error())
}

// requireNothingCooling checks that no model is cooling down or open.
func requireNothingCooling(t *testing.T, c *geminiguard.Client) {
	t.Helper()
	st := c.Stats()
	assert.True(t, st.ProjectCoolDownUntil.IsZero(), "the project is not cooling down")
	for _, m := range st.Models {
		assert.True(t, m.CoolDownUntil.IsZero(), "model %s is not cooling down (%s)", m.Model, m.CoolDownReason)
		assert.Equal(t, geminiguard.StateClosed, m.State, "model %s", m.Model)
	}
}

func ptr[T any](v T) *T { return &v }

// unencodable are requests the SDK cannot JSON-encode, each with the words
// its refusal must contain.
func unencodable() []struct {
	name     string
	contents []*genai.Content
	config   *genai.GenerateContentConfig
	want     []string
} {
	nan, inf := math.NaN(), math.Inf(1)
	return []struct {
		name     string
		contents []*genai.Content
		config   *genai.GenerateContentConfig
		want     []string
	}{
		{"NaN temperature", nil, &genai.GenerateContentConfig{Temperature: ptr(float32(nan))},
			[]string{"GenerateContentConfig.Temperature is NaN", "finite"}},
		{"+Inf topP", nil, &genai.GenerateContentConfig{TopP: ptr(float32(inf))},
			[]string{"GenerateContentConfig.TopP is +Inf"}},
		{"-Inf frequency penalty", nil, &genai.GenerateContentConfig{FrequencyPenalty: ptr(float32(-inf))},
			[]string{"GenerateContentConfig.FrequencyPenalty is -Inf"}},
		{"Inf deep in a response schema", nil, &genai.GenerateContentConfig{
			ResponseMIMEType: "application/json",
			ResponseSchema: &genai.Schema{Type: genai.TypeObject, Properties: map[string]*genai.Schema{
				"ages": {Type: genai.TypeArray, Items: &genai.Schema{Type: genai.TypeNumber, Maximum: ptr(inf)}},
			}},
		}, []string{`GenerateContentConfig.ResponseSchema.Properties["ages"].Items.Maximum is +Inf`}},
		{"NaN in a JSON schema", nil, &genai.GenerateContentConfig{
			ResponseMIMEType:   "application/json",
			ResponseJsonSchema: map[string]any{"type": "object", "properties": map[string]any{"x": map[string]any{"type": "number", "minimum": nan}}},
		}, []string{`GenerateContentConfig.ResponseJsonSchema["properties"]["x"]["minimum"] is NaN`}},
		{"NaN in a tool's parameters", nil, &genai.GenerateContentConfig{Tools: []*genai.Tool{{
			FunctionDeclarations: []*genai.FunctionDeclaration{{Name: "f", ParametersJsonSchema: map[string]any{"default": []any{1.0, inf}}}},
		}}}, []string{`GenerateContentConfig.Tools[0].FunctionDeclarations[0].ParametersJsonSchema["default"][1] is +Inf`}},
		{"NaN in a function call's arguments", []*genai.Content{
			genai.NewContentFromText("what is 0/0?", genai.RoleUser),
			{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{Name: "div", Args: map[string]any{"q": nan}}}}},
		}, nil, []string{`contents[1].Parts[0].FunctionCall.Args["q"] is NaN`}},
	}
}

// TestUnencodableRequestIsRefusedAtOnce: a request the SDK cannot
// encode used to be posted as an empty body to a malformed path, and the
// 404 cooled every cascade model down. Now nothing is sent, nothing cools,
// and the next good call is answered by the primary.
func TestUnencodableRequestIsRefusedAtOnce(t *testing.T) {
	for _, tc := range unencodable() {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
				c, sent := newCountingClient(t, srv)
				contents := tc.contents
				if contents == nil {
					contents = genai.Text("Say hi")
				}

				start := time.Now()
				resp, err := c.GenerateContent(t.Context(), "", contents, tc.config)
				assert.Nil(t, resp)
				requireRefusedRequest(t, err, tc.want...)
				assert.Zero(t, time.Since(start), "refused at once")

				var got []error
				for resp, err := range c.GenerateContentStream(t.Context(), "", contents, tc.config) {
					assert.Nil(t, resp)
					got = append(got, err)
				}
				require.Len(t, got, 1, "the stream yields its error once and ends")
				requireRefusedRequest(t, got[0], tc.want...)

				assert.Zero(t, sent.n.Load(), "nothing was sent")
				requireNothingCooling(t, c)

				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err, "the next good call works")
				assert.Equal(t, pro, rec.Model)
				assert.Equal(t, int64(1), sent.n.Load())
			})
		})
	}
}

// TestMethodNotFoundIsNotARetiredModel: a 404 for a path the API
// does not have (here a base URL with a stray segment) is about the
// request, not the model: one request, no cascade, nothing cools down.
func TestMethodNotFoundIsNotARetiredModel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		c, sent := newCountingClient(t, srv, geminiguard.WithBaseURL(geminitest.BaseURL+"/proxy"))

		_, err := c.GenerateContent(t.Context(), "", genai.Text("Say hi"), nil)

		require.Error(t, err)
		v := geminiguard.Classify(err)
		assert.Equal(t, geminiguard.ClassBadRequest, v.Class)
		assert.Equal(t, geminiguard.ScopeRequest, v.Scope)
		assert.NotErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		assert.Equal(t, int64(1), sent.n.Load(), "one request: no retry, no other model")
		requireNothingCooling(t, c)
	})
}

// TestNilElementsAreRefused: nil contents or parts used to panic
// inside the SDK, and EmbedContent without contents returned an empty
// response. Now each is a request-scoped error naming the problem, with
// nothing sent.
func TestNilElementsAreRefused(t *testing.T) {
	hi := genai.NewContentFromText("hi", genai.RoleUser)
	cases := []struct {
		name     string
		contents []*genai.Content
		config   *genai.GenerateContentConfig
		want     string
	}{
		{"nil content", []*genai.Content{hi, nil}, nil, "contents[1] is nil"},
		{"nil part", []*genai.Content{{Role: genai.RoleUser, Parts: []*genai.Part{{Text: "a"}, nil}}}, nil, "contents[0].Parts[1] is nil"},
		{"nil part in the system instruction", genai.Text("hi"),
			&genai.GenerateContentConfig{SystemInstruction: &genai.Content{Parts: []*genai.Part{nil}}},
			"GenerateContentConfig.SystemInstruction.Parts[0] is nil"},
		{"no contents", nil, nil, "contents is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
				c, sent := newCountingClient(t, srv)

				resp, err := c.GenerateContent(t.Context(), "", tc.contents, tc.config)
				assert.Nil(t, resp)
				requireRefusedRequest(t, err, tc.want)

				n := 0
				for resp, err := range c.GenerateContentStream(t.Context(), "", tc.contents, tc.config) {
					assert.Nil(t, resp)
					requireRefusedRequest(t, err, tc.want)
					n++
				}
				assert.Equal(t, 1, n, "the stream yields its error once and ends")

				if tc.config == nil {
					eresp, err := c.EmbedContent(t.Context(), "gemini-embedding-001", tc.contents, nil)
					assert.Nil(t, eresp)
					requireRefusedRequest(t, err, tc.want)
				}

				assert.Zero(t, sent.n.Load(), "nothing was sent")
				requireNothingCooling(t, c)
				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err, "the next good call works")
				assert.Equal(t, pro, rec.Model)
			})
		})
	}
}
