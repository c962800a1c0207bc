package geminiguard_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// incident runs six calls, one a second, through a Client of cascade flash,
// pro over srv, and returns the model that answered each.
func incident(t *testing.T, srv *geminitest.Server, opts ...geminiguard.Option) []string {
	c := newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithCascade(flash, pro), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1})}, opts...)...)
	var answered []string
	for range 6 {
		var rec geminiguard.CallRecord
		_, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("The secret prompt"), nil)
		require.NoError(t, err)
		answered = append(answered, rec.Model)
		time.Sleep(time.Second)
	}
	return answered
}

func TestRecorderReplaysAnIncident(t *testing.T) {
	var trace bytes.Buffer
	var recorded []string
	synctest.Test(t, func(t *testing.T) {
		overloaded := geminitest.Step{Fault: geminitest.Overloaded, Latency: 200 * time.Millisecond}
		srv := geminitest.New(
			geminitest.Model{Name: flash, Latency: 500 * time.Millisecond, Script: []geminitest.Step{overloaded, overloaded, overloaded}},
			geminitest.Model{Name: pro, Latency: 800 * time.Millisecond, Text: "The secret answer"})
		recorded = incident(t, srv, geminiguard.WithRecorder(&trace))
	})
	assert.Equal(t, []string{pro, pro, pro, flash, flash, flash}, recorded)

	lines := strings.Split(strings.TrimSpace(trace.String()), "\n")
	require.Len(t, lines, 9, "one line per upstream request: 3 failed, 6 answered")
	var first map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &first))
	assert.Equal(t, map[string]any{"at_ms": 0.0, "model": flash, "endpoint": "generate", "status": 503.0, "class": "overloaded", "latency_ms": 200.0}, first)
	assert.NotContains(t, trace.String(), "secret", "never a prompt or an answer")
	requireNoKey(t, trace.String())

	synctest.Test(t, func(t *testing.T) {
		models, err := geminitest.Replay(bytes.NewReader(trace.Bytes()))
		require.NoError(t, err)
		srv := geminitest.New(models...)
		start := time.Now()
		assert.Equal(t, recorded, incident(t, srv), "the replay answers as the incident did")
		assert.Equal(t, 3*(200+800)*time.Millisecond+3*500*time.Millisecond+6*time.Second, time.Since(start), "with the same latencies")
	})
}

func TestRecorderRecordsAStreamsChunksBeforeItsCut(t *testing.T) {
	var trace bytes.Buffer
	stream := func(t *testing.T, srv *geminitest.Server, opts ...geminiguard.Option) (chunks int, err error) {
		c := newClient(t, srv, nil, append([]geminiguard.Option{geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1})}, opts...)...)
		for _, err = range c.GenerateContentStream(t.Context(), "", genai.Text("The secret prompt"), nil) {
			if err != nil {
				return chunks, err
			}
			chunks++
		}
		return chunks, nil
	}
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 5, Latency: 300 * time.Millisecond,
			Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween, CutAfter: 2}}})
		chunks, err := stream(t, srv, geminiguard.WithRecorder(&trace))
		require.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		assert.Equal(t, 2, chunks)
		chunks, err = stream(t, srv, geminiguard.WithRecorder(&trace))
		require.NoError(t, err)
		assert.Equal(t, 5, chunks)
	})
	lines := strings.Split(strings.TrimSpace(trace.String()), "\n")
	require.Len(t, lines, 2)
	var cut, whole map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &cut))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &whole))
	assert.Equal(t, map[string]any{"at_ms": 0.0, "model": flash, "endpoint": "generate", "status": 200.0, "class": "stream_cut", "latency_ms": 300.0, "chunks": 2.0}, cut)
	assert.Equal(t, 5.0, whole["chunks"])
	assert.Equal(t, "none", whole["class"])

	synctest.Test(t, func(t *testing.T) {
		models, err := geminitest.Replay(strings.NewReader(lines[0] + "\n" + lines[1]))
		require.NoError(t, err)
		require.Len(t, models, 1)
		assert.Equal(t, 5, models[0].Chunks, "a whole answer's chunks")
		chunks, err := stream(t, geminitest.New(models...))
		require.ErrorIs(t, err, geminiguard.ErrStreamInterrupted)
		assert.Equal(t, 2, chunks, "the replay cuts where the recording was cut")
	})
}
