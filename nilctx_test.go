package geminiguard_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// clientMethods calls each Client method that takes a context with ctx (and,
// with chats, each Chat method) and returns its error by method name; a
// stream's is the one error it yields (the test checks there is one).
func clientMethods(t *testing.T, c *geminiguard.Client, ctx context.Context, chats bool) map[string]error {
	t.Helper()
	hi := genai.Text("hi")
	errs := map[string]error{}
	_, errs["GenerateContent"] = c.GenerateContent(ctx, "", hi, nil)
	_, errs["EmbedContent"] = c.EmbedContent(ctx, "gemini-embedding-001", hi, nil)
	_, errs["CountTokens"] = c.CountTokens(ctx, flash, hi, nil)
	_, errs["ComputeTokens"] = c.ComputeTokens(ctx, flash, hi, nil)
	_, errs["CheckCascade"] = c.CheckCascade(ctx)
	errs["GenerateContentStream"] = onlyStreamError(t, c.GenerateContentStream(ctx, "", hi, nil))
	if !chats {
		return errs
	}
	chat, err := c.Chats().Create(ctx, "", nil, nil)
	require.NoError(t, err)
	_, errs["Chat.SendMessage"] = chat.SendMessage(ctx, *genai.NewPartFromText("hi"))
	errs["Chat.SendMessageStream"] = onlyStreamError(t, chat.SendMessageStream(ctx, *genai.NewPartFromText("hi")))
	return errs
}

// onlyStreamError ranges over a stream that must yield one error and
// nothing else, and returns that error.
func onlyStreamError(t *testing.T, seq func(func(*genai.GenerateContentResponse, error) bool)) error {
	t.Helper()
	var errs []error
	for resp, err := range seq {
		assert.Nil(t, resp)
		errs = append(errs, err)
	}
	require.Len(t, errs, 1, "a stream yields its error once")
	return errs[0]
}

// TestNilContextIsRefused: a nil context makes New and every method that
// takes one return an error that says what to pass, as
// net/http.NewRequestWithContext does, without panicking and before
// anything is sent.
func TestNilContextIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		var nilCtx context.Context
		for _, check := range []bool{true, false} {
			c, err := geminiguard.New(nilCtx, geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
				geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(check))
			require.Error(t, err, "startup check %v", check)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), "geminiguard: nil Context")
			assert.Contains(t, err.Error(), "context.Background()", "says what to pass")
		}

		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false))
		errs := clientMethods(t, c, nilCtx, true)
		require.Len(t, errs, 8)
		for method, err := range errs {
			require.Error(t, err, method)
			assert.Contains(t, err.Error(), "geminiguard: nil Context", method)
			assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, method)
		}
		for _, verb := range []geminitest.Verb{geminitest.VerbGenerate, geminitest.VerbStream, geminitest.VerbCountTokens} {
			assert.Zero(t, srv.Hits(flash, verb), "nothing sent: %v", verb)
		}
		assert.Zero(t, srv.Hits("", geminitest.VerbList), "no listing")
		assert.Zero(t, c.Stats().Calls, "a refusal is no call")

		_, _, err := ask(t.Context(), c, "")
		require.NoError(t, err, "the Client works on")
	})
}

// TestClientNotMadeByNew: a Client not made by New (the zero value, a nil
// pointer) says so from every method that returns an error, its Chats too,
// and Stats and GenAI do not panic.
func TestClientNotMadeByNew(t *testing.T) {
	for name, c := range map[string]*geminiguard.Client{"zero": {}, "nil": nil} {
		t.Run(name, func(t *testing.T) {
			errs := clientMethods(t, c, t.Context(), c != nil) // a nil Client's Chats is the zero Chats, which says so
			require.NotEmpty(t, errs)
			for method, err := range errs {
				require.Error(t, err, method)
				assert.Contains(t, err.Error(), "geminiguard: Client must be made with New", method)
				assert.NotErrorIs(t, err, geminiguard.ErrAllModelsFailed, method)
				assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, method)
			}
			assert.Equal(t, geminiguard.Stats{}, c.Stats())
			assert.Nil(t, c.GenAI())
			err := c.Close()
			require.Error(t, err)
			assert.Contains(t, err.Error(), "geminiguard: Client must be made with New")
		})
	}
}
