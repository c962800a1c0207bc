package geminitest_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard/geminitest"
)

func post(ctx context.Context, t *testing.T, c *http.Client, path, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, geminitest.BaseURL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-Goog-Api-Key", geminitest.Key)
	return c.Do(req)
}

const (
	streamPath = "/v1beta/models/" + flash + ":streamGenerateContent?alt=sse"
	hiBody     = `{"contents":[{"parts":[{"text":"hi"}],"role":"user"}]}`
)

func TestTransportWire(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash, Chunks: 2})
	resp, err := post(t.Context(), t, fake.HTTPClient(), streamPath, hiBody)
	require.NoError(t, err)
	defer resp.Body.Close()

	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "200 OK", resp.Status)
	assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	events := strings.Split(strings.TrimSuffix(string(b), "\r\n\r\n"), "\r\n\r\n")
	require.Len(t, events, 2)
	for _, ev := range events {
		assert.True(t, strings.HasPrefix(ev, "data: {"), ev)
		assert.NotContains(t, ev, "\n")
	}

	resp, err = post(t.Context(), t, fake.HTTPClient(), "/v1beta/models/"+flash+":streamGenerateContent", hiBody)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "alt=sse is required")

	resp, err = post(t.Context(), t, fake.HTTPClient(), "/v1beta/models/"+flash+":embedContent", hiBody)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

// Closing the body ends a stalled handler at once.
func TestTransportCloseEndsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.StreamStallBetween}}})
		resp, err := post(t.Context(), t, fake.HTTPClient(), streamPath, hiBody)
		require.NoError(t, err)
		first, err := bufio.NewReader(resp.Body).ReadString('\n')
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(first, "data: "))

		start := time.Now()
		require.NoError(t, resp.Body.Close())
		assert.Zero(t, time.Since(start), "Close must not wait out the stall")
		_, err = resp.Body.Read(make([]byte, 1))
		assert.Error(t, err)
		// synctest.Test fails if the handler goroutine is still alive.
	})
}

// A context done before the headers fails RoundTrip with the context's error.
func TestTransportContextBeforeHeaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Latency: time.Hour})
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()

		start := time.Now()
		_, err := post(ctx, t, fake.HTTPClient(), "/v1beta/models/"+flash+":generateContent", hiBody)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))

		// And through the SDK.
		c := newClient(t, fake.ClientConfig())
		ctx, cancel = context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err = c.Models.GenerateContent(ctx, flash, prompt("hi"), nil)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// A context done while the body is read fails the read with the context's
// error.
func TestTransportContextDuringBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.StreamStallFirst}}})
		ctx, cancel := context.WithCancel(t.Context())
		resp, err := post(ctx, t, fake.HTTPClient(), streamPath, hiBody)
		require.NoError(t, err)
		defer resp.Body.Close()

		time.AfterFunc(time.Second, cancel)
		_, err = io.ReadAll(resp.Body)
		assert.ErrorIs(t, err, context.Canceled)
	})
}
