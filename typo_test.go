package geminiguard_test

import (
	"errors"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestMisspeltCallModelIsReturned: a call that names a model outside the
// cascade which the API does not know (404) gets that 404 back as a
// *ModelError matching ErrModelNotFound that names the model and the
// cascade; the cascade does not answer in its place, and the name is not
// cooled down: the next call asks the API again.
func TestMisspeltCallModelIsReturned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const typo = "gemini-3.5-flsh"
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		defer c.Close()

		for i := range 2 {
			var rec geminiguard.CallRecord
			resp, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), typo, genai.Text("hi"), nil)
			require.Error(t, err, "call %d", i+1)
			assert.Nil(t, resp)
			var me *geminiguard.ModelError
			require.True(t, errors.As(err, &me), "a *ModelError: %v", err)
			assert.Equal(t, typo, me.Model)
			assert.ErrorIs(t, err, geminiguard.ErrModelNotFound)
			assert.NotErrorIs(t, err, geminiguard.ErrAllModelsFailed)
			var ae genai.APIError
			require.True(t, errors.As(err, &ae), "the API's 404 inside")
			assert.Equal(t, 404, ae.Code)
			assert.Contains(t, err.Error(), typo)
			assert.Contains(t, err.Error(), "the cascade is "+pro+", "+flash)
			assert.Equal(t, geminiguard.ClassNotFound, geminiguard.Classify(err).Class)
			assert.Len(t, rec.Attempts, 1, "the named model only")
			assert.Equal(t, i+1, srv.Total(typo), "asked again: no cool-down for a name the call gave")
		}
		assert.Zero(t, srv.Total(pro)+srv.Total(flash), "the cascade does not answer for a misspelt name")

		var got []error
		for _, err := range c.GenerateContentStream(t.Context(), typo, genai.Text("hi"), nil) {
			got = append(got, err)
		}
		require.Len(t, got, 1)
		assert.ErrorIs(t, got[0], geminiguard.ErrModelNotFound, "streams too")
		assert.Zero(t, srv.Total(pro)+srv.Total(flash))

		chat, err := c.Chats().Create(t.Context(), typo, nil, nil)
		require.NoError(t, err)
		_, err = chat.SendMessage(t.Context(), *genai.NewPartFromText("hi"))
		assert.ErrorIs(t, err, geminiguard.ErrModelNotFound, "chats too")
		assert.Empty(t, chat.History(false))

		_, rec, err := ask(t.Context(), c, flash)
		require.NoError(t, err, "a cascade model named by the call answers as before")
		assert.Equal(t, flash, rec.Model)
	})
}

// TestOptionsNamingAModelOutsideTheCascade: New refuses WithLimits and
// WithModelConfig for a model that is neither in the cascade, nor a
// WithModelBackend entry, nor declared with WithKnownModels, saying which
// models it knows; the same options for known models pass.
func TestOptionsNamingAModelOutsideTheCascade(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash}, geminitest.Model{Name: "gemini-embedding-001"})
	base := []geminiguard.Option{geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithStartupCheck(false), geminiguard.WithCascade(pro, flash)}
	noop := func(*genai.GenerateContentConfig) {}

	_, err := geminiguard.New(t.Context(), append(base,
		geminiguard.WithLimits("gemini-typo", geminiguard.Limits{RPM: 10}),
		geminiguard.WithModelConfig("models/gemini-typo2", noop))...)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `geminiguard: WithLimits("gemini-typo"): the model is not in the cascade (`+pro+", "+flash+`) and no WithModelBackend entry or WithKnownModels name: fix the name, or declare a model that calls name outside the cascade with WithKnownModels`)
	assert.Contains(t, err.Error(), `geminiguard: WithModelConfig("gemini-typo2"): the model is not in the cascade`)

	backend, err := genai.NewClient(t.Context(), srv.ClientConfig())
	require.NoError(t, err)
	c, err := geminiguard.New(t.Context(), append(base,
		geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 10}),
		geminiguard.WithModelConfig(flash, noop),
		geminiguard.WithModelBackend("second/"+pro, pro, backend),
		geminiguard.WithLimits("second/"+pro, geminiguard.Limits{RPM: 10}),
		geminiguard.WithKnownModels("models/gemini-embedding-001"),
		geminiguard.WithLimits("gemini-embedding-001", geminiguard.Limits{RPM: 1}),
		geminiguard.WithModelConfig("gemini-embedding-001", noop))...)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
