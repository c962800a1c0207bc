package geminiguard_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestStreamChunkRacingTheWatchdogIsNeverCut sends a chunk exactly when the
// stall watchdog fires: the first chunk at the first-chunk deadline, or the
// next chunks at the idle deadline. In fake time the chunk and the timer
// wake at the same instant, in either order. Whichever wins, a timer that
// raced a chunk the caller was given never cuts the stream: a stall that
// ends a stream after it showed text comes a whole idle deadline after the
// last chunk the caller saw, and a first chunk that lost its race is a stall
// of the attempt, before anything is shown.
func TestStreamChunkRacingTheWatchdogIsNeverCut(t *testing.T) {
	const runs = 40
	for _, tc := range []struct {
		name        string
		latency     time.Duration // to the first chunk
		interval    time.Duration // between chunks
		first, idle time.Duration // the stream deadlines
	}{
		{name: "first chunk at the first-chunk deadline", latency: 2 * time.Second, interval: 100 * time.Millisecond, first: 2 * time.Second, idle: 10 * time.Second},
		{name: "next chunks at the idle deadline", latency: 100 * time.Millisecond, interval: time.Second, first: 10 * time.Second, idle: time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				whole, cutByRacer := 0, 0
				for range runs {
					srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 3, Latency: tc.latency, ChunkInterval: tc.interval})
					c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false),
						geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}), geminiguard.WithStreamDeadlines(tc.first, tc.idle))
					var text string
					var last time.Time // when the caller got its last chunk
					for resp, err := range c.GenerateContentStream(t.Context(), "", genai.Text("Tell me a story"), nil) {
						if err != nil {
							if !last.IsZero() && time.Since(last) < tc.idle {
								cutByRacer++
								t.Logf("cut as stalled %v after the chunk that raced the timer: %v", time.Since(last), err)
							}
							text = ""
							break
						}
						text += resp.Text()
						last = time.Now()
					}
					if text != "" {
						require.Equal(t, srv.FullText(flash), text, "a stream without error is the whole answer")
						whole++
					}
				}
				assert.Zero(t, cutByRacer, "streams cut by the timer their last chunk raced, of %d", runs)
				t.Logf("%d of %d streams whole (in fake time the watchdog mostly wins a tie)", whole, runs)
			})
		})
	}
}
