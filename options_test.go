package geminiguard_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestKeyNeverPrinted: printing the Client used to print the API
// key.
func TestKeyNeverPrinted(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: lite})
	c := newClient(t, srv, nil, geminiguard.WithStartupCheck(false))
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		requireNoKey(t, fmt.Sprintf(verb, c))
	}
}

// TestNewRejectsConflictingSDKOptions: WithGenAIClient with an option that
// builds the SDK client used to win silently.
func TestNewRejectsConflictingSDKOptions(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: lite})
	gc, err := genai.NewClient(t.Context(), srv.ClientConfig())
	require.NoError(t, err)
	for _, tc := range []struct {
		opt  geminiguard.Option
		name string
	}{
		{geminiguard.WithAPIKey(geminitest.Key), "WithAPIKey"},
		{geminiguard.WithBaseURL(geminitest.BaseURL), "WithBaseURL"},
		{geminiguard.WithHTTPClient(srv.HTTPClient()), "WithHTTPClient"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(gc), tc.opt, geminiguard.WithStartupCheck(false))
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), "WithGenAIClient")
			assert.Contains(t, err.Error(), tc.name)
			requireNoKey(t, err.Error())
		})
	}
	c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(gc), geminiguard.WithStartupCheck(false))
	require.NoError(t, err, "WithGenAIClient alone is fine")
	_, err = c.GenerateContent(t.Context(), lite, genai.Text("hi"), nil)
	require.NoError(t, err)
}
