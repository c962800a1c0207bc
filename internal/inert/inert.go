// Package inert is the upstream of geminiguard's overhead benchmarks: it
// answers at once, so that what a benchmark measures is what wraps it (the
// chain in the root package, the failsafe-go stack in the examples module),
// on the same answer in both.
package inert

import (
	"context"
	"iter"

	"google.golang.org/genai"
)

// Models are the cascade of the benchmarks: the overhead scenario's.
var Models = []string{"gemini-3.5-flash", "gemini-2.5-flash-lite"}

// Overloaded is the error an API fails with to open breakers: a 503
// UNAVAILABLE as the SDK reports it.
var Overloaded = genai.APIError{Code: 503, Status: "UNAVAILABLE", Message: "The model is overloaded. Please try again later."}

// API answers every GenerateContent at once with Resp, or with Fail when
// set, and counts the calls; its other methods panic (the benchmarks do not
// call them). It is not safe for concurrent use.
type API struct {
	Resp  *genai.GenerateContentResponse
	Fail  error
	Calls int
}

// New returns an API answering a valid, complete response.
func New() *API {
	return &API{Resp: &genai.GenerateContentResponse{
		Candidates: []*genai.Candidate{{
			Content:      genai.NewContentFromText("Hello from the inert upstream.", genai.RoleModel),
			FinishReason: genai.FinishReasonStop,
		}},
		UsageMetadata: &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 4, CandidatesTokenCount: 6, TotalTokenCount: 10},
		ModelVersion:  Models[0],
	}}
}

func (a *API) GenerateContent(context.Context, string, []*genai.Content, *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	a.Calls++
	if a.Fail != nil {
		return nil, a.Fail
	}
	return a.Resp, nil
}

func (a *API) GenerateContentStream(context.Context, string, []*genai.Content, *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error] {
	panic("inert: not used by the benchmarks")
}

func (a *API) List(context.Context, *genai.ListModelsConfig) (genai.Page[genai.Model], error) {
	panic("inert: not used by the benchmarks")
}

func (a *API) CountTokens(context.Context, string, []*genai.Content, *genai.CountTokensConfig) (*genai.CountTokensResponse, error) {
	panic("inert: not used by the benchmarks")
}

func (a *API) ComputeTokens(context.Context, string, []*genai.Content, *genai.ComputeTokensConfig) (*genai.ComputeTokensResponse, error) {
	panic("inert: not used by the benchmarks")
}

func (a *API) EmbedContent(context.Context, string, []*genai.Content, *genai.EmbedContentConfig) (*genai.EmbedContentResponse, error) {
	panic("inert: not used by the benchmarks")
}
