package geminiguard

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/internal/inert"
)

// listedAPI is an upstream whose model list holds names as given.
type listedAPI struct {
	*inert.API
	names []string
}

func (l listedAPI) List(context.Context, *genai.ListModelsConfig) (genai.Page[genai.Model], error) {
	var p genai.Page[genai.Model]
	for _, n := range l.names {
		p.Items = append(p.Items, &genai.Model{Name: n})
	}
	return p, nil
}

// TestListedNamesInEveryForm: CheckCascade finds a model by its short name
// whatever form of name the list gives it: the Gemini API's, Vertex AI's
// publisher name, or Vertex AI's full resource name.
func TestListedNamesInEveryForm(t *testing.T) {
	c := inertClient(t, inert.New())
	got, err := c.listModels(t.Context(), listedAPI{API: inert.New(), names: []string{
		"models/gemini-2.5-flash",
		"publishers/google/models/gemini-2.5-pro",
		"projects/p-1/locations/us-central1/publishers/google/models/gemini-2.5-flash-lite",
	}})
	require.NoError(t, err)
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	assert.Equal(t, []string{"gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.5-pro"}, names)
}
