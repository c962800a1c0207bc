package geminiguard_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
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

// unavailableFirst answers the first n GET requests with the API's 503
// UNAVAILABLE body, as a brownout does, and sends the rest to rt.
type unavailableFirst struct {
	rt http.RoundTripper
	n  atomic.Int64
}

func (u *unavailableFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodGet && u.n.Add(-1) >= 0 {
		body := `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`
		return &http.Response{StatusCode: http.StatusServiceUnavailable, Status: "503 Service Unavailable", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/json; charset=UTF-8"}}, Body: io.NopCloser(bytes.NewReader([]byte(body))),
			ContentLength: int64(len(body)), Request: r}, nil
	}
	return u.rt.RoundTrip(r)
}

// TestGetModelIsARead: GetModel returns the model as the API describes it,
// from the model named only (no cascade), retrying a 503 after a backoff;
// an unknown name is the API's 404, returned, with nothing else asked.
func TestGetModelIsARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash, DisplayName: "Flash", InputTokenLimit: 1000})
		front := &unavailableFirst{rt: srv.Transport()}
		front.n.Store(1)
		c, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
			geminiguard.WithHTTPClient(&http.Client{Transport: front}), geminiguard.WithCascade(pro, flash), geminiguard.WithStartupCheck(false))
		require.NoError(t, err)
		defer c.Close()

		start := time.Now()
		m, err := c.GetModel(t.Context(), flash, nil)
		require.NoError(t, err)
		assert.Equal(t, "models/"+flash, m.Name)
		assert.Equal(t, "Flash", m.DisplayName)
		assert.Equal(t, int32(1000), m.InputTokenLimit)
		assert.Equal(t, 1, srv.Hits(flash, geminitest.VerbGet), "the 503 (in front of the fake), then the answer")
		assert.Positive(t, time.Since(start), "the retry waited its backoff")

		m, err = c.GetModel(t.Context(), "models/"+pro, nil)
		require.NoError(t, err)
		assert.Equal(t, "models/"+pro, m.Name)

		_, err = c.GetModel(t.Context(), "gemini-flsh", nil)
		var apiErr genai.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, 404, apiErr.Code)
		assert.Equal(t, geminiguard.ClassNotFound, geminiguard.Classify(err).Class)
		assert.Equal(t, 1, srv.Hits("gemini-flsh", geminitest.VerbGet), "no retry of a 404")
		assert.ErrorContains(t, err, `model "gemini-flsh", named by the call, does not exist`)
		_, err = c.GetModel(t.Context(), "gemini-flsh", nil)
		require.ErrorAs(t, err, &apiErr, "the name is not cooled down: the next read asks the API again")
		assert.Equal(t, 2, srv.Hits("gemini-flsh", geminitest.VerbGet))
		assert.Zero(t, srv.Total(pro)+srv.Total(flash), "no generation")

		_, err = c.GetModel(t.Context(), "", nil)
		assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class)
		c.Close()
		_, err = c.GetModel(t.Context(), flash, nil)
		assert.ErrorIs(t, err, geminiguard.ErrClosed)
	})
}

// TestListModelsIsARead: ListModels returns a page of the API's models as
// genai's Models.List does, in one request; its errors are the API's.
func TestListModelsIsARead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: pro}, geminitest.Model{Name: flash}, geminitest.Model{Name: lite})
		c, sent := newCountingClient(t, srv)
		defer c.Close()

		page, err := c.ListModels(t.Context(), &genai.ListModelsConfig{PageSize: 2})
		require.NoError(t, err)
		require.Len(t, page.Items, 2)
		assert.True(t, strings.HasPrefix(page.Items[0].Name, "models/"))
		require.NotEmpty(t, page.NextPageToken)
		next, err := c.ListModels(t.Context(), &genai.ListModelsConfig{PageSize: 2, PageToken: page.NextPageToken})
		require.NoError(t, err)
		var names []string
		for _, m := range append(page.Items, next.Items...) {
			names = append(names, m.Name)
		}
		assert.ElementsMatch(t, []string{"models/" + pro, "models/" + flash, "models/" + lite}, names)
		assert.Equal(t, int64(2), sent.n.Load())

		srv.ScriptList(geminitest.Step{Fault: geminitest.APIKeyInvalid})
		_, err = c.ListModels(t.Context(), nil)
		var apiErr genai.APIError
		require.ErrorAs(t, err, &apiErr)
		assert.Equal(t, 400, apiErr.Code)
		assert.Equal(t, int64(3), sent.n.Load())
	})
}

// TestMediaAndReadsOfABackendAreRefused: a Backend entry (a local model)
// has no SDK client: GetModel and GenerateVideos on it used to dereference
// a nil one and panic. Now each is refused before anything is sent.
func TestMediaAndReadsOfABackendAreRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gem := geminitest.New(geminitest.Model{Name: pro})
		local, backend := newLocal(t)
		c := newClient(t, gem, nil, geminiguard.WithCascade(pro, localEntry), geminiguard.WithBackend(localEntry, "gemma3:4b", backend))

		_, err := c.GetModel(t.Context(), localEntry, nil)
		requireRefusedRequest(t, err, `GetModel's model "local/gemma3" is a Backend (WithBackend)`)
		_, err = c.GenerateVideos(t.Context(), localEntry, "a lighthouse", nil, nil)
		requireRefusedRequest(t, err, `GenerateVideos' model "local/gemma3" is a Backend (WithBackend)`)
		assert.Zero(t, local.Hits())
	})
}
