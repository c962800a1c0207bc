package geminiguard_test

import (
	"fmt"
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

// TestStreamFirstEventWithoutCandidates answers a stream's first event with
// no candidates (usage only): the stream is judged as a unary answer is, so
// no empty chunk reaches the caller's loop and the next model answers, with
// the same upstream requests as GenerateContent makes on the same script,
// with or without resume; a Chat records the turn in its curated history.
func TestStreamFirstEventWithoutCandidates(t *testing.T) {
	models := func() *geminitest.Server {
		return geminitest.New(
			geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.NoCandidates}}},
			geminitest.Model{Name: lite},
		)
	}
	var unary map[string]int
	synctest.Test(t, func(t *testing.T) {
		srv := models()
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, lite), geminiguard.WithStartupCheck(false))
		resp, err := c.GenerateContent(t.Context(), "", genai.Text("Tell me a story"), nil)
		require.NoError(t, err)
		require.Equal(t, srv.FullText(lite), resp.Text())
		unary = map[string]int{flash: srv.Total(flash), lite: srv.Total(lite)}
	})
	for _, resume := range []bool{false, true} {
		t.Run(fmt.Sprintf("resume=%v", resume), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := models()
				c := newClient(t, srv, nil, geminiguard.WithCascade(flash, lite), geminiguard.WithStartupCheck(false),
					geminiguard.WithStreamResume(resume))
				var text strings.Builder
				var rec geminiguard.CallRecord
				for resp, err := range c.GenerateContentStream(geminiguard.RecordCall(t.Context(), &rec), "", genai.Text("Tell me a story"), nil) {
					require.NoError(t, err)
					require.NotEmpty(t, resp.Candidates, "no chunk without candidates reaches the caller")
					text.WriteString(resp.Text())
				}
				assert.Equal(t, srv.FullText(lite), text.String(), "the next model answered")
				assert.Equal(t, lite, rec.Model)
				assert.Zero(t, rec.Resumes, "nothing was shown before the secondary answered: no resume")
				assert.Equal(t, unary, map[string]int{flash: srv.Total(flash), lite: srv.Total(lite)}, "the upstream requests of the unary path")

				srv.Script(flash, geminitest.Step{Fault: geminitest.NoCandidates})
				chat, err := c.Chats().Create(t.Context(), "", nil, nil)
				require.NoError(t, err)
				for resp, err := range chat.SendMessageStream(t.Context(), genai.Part{Text: "Tell me a story"}) {
					require.NoError(t, err)
					require.NotEmpty(t, resp.Candidates)
				}
				want := []string{"user: Tell me a story", "model: " + srv.FullText(lite)}
				assert.Equal(t, want, turns(chat.History(true)), "the curated history holds the turn")
				assert.Equal(t, want, turns(chat.History(false)))
			})
		})
	}
}
