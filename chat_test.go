package geminiguard_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// turn is a history entry as "role: text", the text of every part joined.
func turn(c *genai.Content) string {
	var b strings.Builder
	for _, p := range c.Parts {
		b.WriteString(p.Text)
	}
	return c.Role + ": " + b.String()
}

// turns returns history as turn strings.
func turns(history []*genai.Content) []string {
	out := make([]string, len(history))
	for i, c := range history {
		out[i] = turn(c)
	}
	return out
}

// exchanges returns history as turn strings, a run of model turns joined
// into one: genai keeps one model content per streamed chunk, a Chat one per
// answer (the API reads both alike).
func exchanges(history []*genai.Content) []string {
	var out []string
	for i, c := range history {
		if i > 0 && c.Role == genai.RoleModel && history[i-1].Role == genai.RoleModel {
			out[len(out)-1] += strings.TrimPrefix(turn(c), c.Role+": ")
			continue
		}
		out = append(out, turn(c))
	}
	return out
}

// say sends text on chat and returns the answer's text.
func say(t *testing.T, chat *geminiguard.Chat, text string) (string, error) {
	t.Helper()
	resp, err := chat.SendMessage(t.Context(), genai.Part{Text: text})
	if err != nil {
		return "", err
	}
	return resp.Text(), nil
}

func TestChatHistoryAfterCascade(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Text: "Pro here.", Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: flash, Text: "Flash here."},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))
		history := make([]*genai.Content, 2, 4) // room to append in place: the chat must not
		history[0], history[1] = genai.NewContentFromText("Earlier", genai.RoleUser), genai.NewContentFromText("Noted.", genai.RoleModel)
		chat, err := c.Chats().Create(t.Context(), "", nil, history)
		require.NoError(t, err)

		got, err := say(t, chat, "Hi")
		require.NoError(t, err)
		assert.Equal(t, "Flash here.", got, "the primary 503'd, the secondary answered")
		want := []string{"user: Earlier", "model: Noted.", "user: Hi", "model: Flash here."}
		assert.Equal(t, want, turns(chat.History(true)))
		assert.Equal(t, want, turns(chat.History(false)))
		assert.Nil(t, history[:3][2], "the caller's history is not written")

		got, err = say(t, chat, "And then?")
		require.NoError(t, err)
		assert.Equal(t, "Pro here.", got, "the next message goes to the chat's model again")
		reqs := srv.Requests(pro)
		require.Len(t, reqs, 2)
		assert.Equal(t, []string{"user: Earlier", "model: Noted.", "user: Hi", "model: Flash here.", "user: And then?"}, turns(reqs[1].Contents),
			"the primary gets the whole history, the secondary's answer included")
		assert.Contains(t, string(reqs[1].Body), `"Flash here."`)
		assert.Equal(t, []string{"user: Earlier", "model: Noted.", "user: Hi"}, turns(srv.Requests(flash)[0].Contents))
		assert.Len(t, chat.History(true), 6)
	})
}

func TestChatStreamHistoryAfterResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 4, Text: "Once upon a time, a retry storm met a token bucket, and the bucket won.",
			Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween, CutAfter: 2}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(true))
		chat, err := c.Chats().Create(t.Context(), "", nil, nil)
		require.NoError(t, err)
		full := srv.FullText(flash)

		var text strings.Builder
		for resp, err := range chat.SendMessageStream(t.Context(), genai.Part{Text: "Tell me a story"}) {
			require.NoError(t, err)
			text.WriteString(resp.Text())
		}
		require.Equal(t, full, text.String(), "the cut stream was resumed")
		require.Len(t, srv.Requests(flash), 2, "the cut and the resume")

		want := []string{"user: Tell me a story", "model: " + full}
		assert.Equal(t, want, turns(chat.History(true)), "one model turn, the whole text once")
		assert.Equal(t, want, turns(chat.History(false)))

		_, err = say(t, chat, "Again")
		require.NoError(t, err)
		next := srv.Requests(flash)[2]
		assert.Equal(t, []string{"user: Tell me a story", "model: " + full, "user: Again"}, turns(next.Contents))
		var body struct{ Contents []*genai.Content }
		require.NoError(t, json.Unmarshal(next.Body, &body))
		assert.Equal(t, []string{"user: Tell me a story", "model: " + full, "user: Again"}, turns(body.Contents), "the request body: no text sent twice")
	})
}

func TestChatHistoryAfterFallback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here.",
			Script: []geminitest.Step{{Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithFallback(geminiguard.TextFallback("Busy, try later.")))
		chat, err := c.Chats().Create(t.Context(), "", nil, nil)
		require.NoError(t, err)

		resp, err := chat.SendMessage(t.Context(), genai.Part{Text: "Hi"})
		require.NoError(t, err)
		assert.True(t, geminiguard.IsFallback(resp))
		var streamed []*genai.GenerateContentResponse
		for resp, err := range chat.SendMessageStream(t.Context(), genai.Part{Text: "Hi?"}) {
			require.NoError(t, err)
			streamed = append(streamed, resp)
		}
		require.Len(t, streamed, 1)
		assert.True(t, geminiguard.IsFallback(streamed[0]))

		assert.Equal(t, []string{"user: Hi", "model: Busy, try later.", "user: Hi?", "model: Busy, try later."}, turns(chat.History(false)),
			"the comprehensive history keeps the Fallback's answers")
		assert.Empty(t, chat.History(true), "the curated history leaves them out: no model reads a canned answer as its own")

		got, err := say(t, chat, "Hello")
		require.NoError(t, err)
		assert.Equal(t, "Model here.", got)
		reqs := srv.Requests(flash)
		require.Len(t, reqs, 3)
		assert.Equal(t, []string{"user: Hello"}, turns(reqs[2].Contents))
		assert.NotContains(t, string(reqs[2].Body), "Busy")
		assert.Equal(t, []string{"user: Hello", "model: Model here."}, turns(chat.History(true)))
	})
}

func TestChatHistoryAfterError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Text: "Model here.",
			Script: []geminitest.Step{{}, {Fault: geminitest.FinishSafety}, {Fault: geminitest.Overloaded}}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
		chat, err := c.Chats().Create(t.Context(), flash, nil, nil)
		require.NoError(t, err)

		_, err = say(t, chat, "One")
		require.NoError(t, err)
		_, err = say(t, chat, "Two")
		require.ErrorIs(t, err, geminiguard.ErrBlocked)
		_, err = say(t, chat, "Three")
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)

		assert.Equal(t, []string{"user: One", "model: Model here.", "user: Two", "model: "}, turns(chat.History(false)),
			"a blocked answer is recorded, as genai records it; a failed call is not")
		assert.Equal(t, []string{"user: One", "model: Model here."}, turns(chat.History(true)), "the curated history drops the blocked exchange")

		_, err = say(t, chat, "Four")
		require.NoError(t, err)
		reqs := srv.Requests(flash)
		require.Len(t, reqs, 4)
		assert.Equal(t, []string{"user: One", "model: Model here.", "user: Four"}, turns(reqs[3].Contents))
		assert.NotContains(t, string(reqs[3].Body), "Two")
		assert.NotContains(t, string(reqs[3].Body), "Three")
	})
}

func TestChatCreateRefusesBadHistory(t *testing.T) {
	srv := geminitest.New(geminitest.Model{Name: flash})
	c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false))
	_, err := c.Chats().Create(t.Context(), "", nil, []*genai.Content{{Role: "system", Parts: []*genai.Part{{Text: "x"}}}})
	require.ErrorContains(t, err, `geminiguard: chat history[0] has role "system"`)
	_, err = c.Chats().Create(t.Context(), "", nil, []*genai.Content{nil})
	require.ErrorContains(t, err, "history[0] is nil")
	_, err = new(geminiguard.Chats).Create(t.Context(), "", nil, nil)
	require.ErrorContains(t, err, "zero value")
	_, err = new(geminiguard.Chat).SendMessage(t.Context(), genai.Part{Text: "x"})
	require.ErrorContains(t, err, "zero value")
	assert.Equal(t, 0, srv.Total(flash), "nothing was sent")
}

func TestChatStreamStoppedEarlyRecordsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 4})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		chat, err := c.Chats().Create(t.Context(), "", nil, nil)
		require.NoError(t, err)
		for _, err := range chat.SendMessageStream(t.Context(), genai.Part{Text: "Hi"}) {
			require.NoError(t, err)
			break
		}
		assert.Empty(t, chat.History(false), "an answer the caller stopped reading is no turn, as in genai")
		_, err = say(t, chat, "Hi again")
		require.NoError(t, err)
		assert.Equal(t, []string{"user: Hi again"}, turns(srv.Requests(flash)[1].Contents))
	})
}

// A chat whose primary is overloaded: the secondary answers, the history
// keeps its turn, and the next message goes to the primary with it.
func ExampleChats_Create() {
	fake := geminitest.New(
		geminitest.Model{Name: "gemini-3.5-flash", Text: "Four.", Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
		geminitest.Model{Name: "gemini-2.5-flash-lite", Text: "Two."},
	)
	ctx := context.Background()
	c, err := geminiguard.New(ctx,
		geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL), geminiguard.WithHTTPClient(fake.HTTPClient()),
		geminiguard.WithCascade("gemini-3.5-flash", "gemini-2.5-flash-lite"))
	if err != nil {
		fmt.Println(err)
		return
	}
	chat, err := c.Chats().Create(ctx, "", nil, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, q := range []string{"1 + 1?", "Times two?"} {
		resp, err := chat.SendMessage(ctx, genai.Part{Text: q})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(q, resp.Text())
	}
	for _, turn := range chat.History(true) {
		fmt.Println(turn.Role+":", turn.Parts[0].Text)
	}
	// Output:
	// 1 + 1? Two.
	// Times two? Four.
	// user: 1 + 1?
	// model: Two.
	// user: Times two?
	// model: Four.
}

// TestChatHistoryMatchesGenAIsChat runs genai's own Chat and this one on the
// same scripted exchanges of the chat's model, side by side (a streamed
// answer compared as one model turn): genai's talks
// to the model alone; this one's cascade goes on to a secondary that is
// always overloaded, so an exchange the model fails ends in an error, an
// empty answer in a *CascadeError. Both histories, and the requests the
// model gets, are genai's, unary and streamed.
func TestChatHistoryMatchesGenAIsChat(t *testing.T) {
	steps := []geminitest.Step{{}, {Fault: geminitest.StopNoParts}, {Fault: geminitest.Overloaded},
		{Fault: geminitest.FinishSafety}, {Fault: geminitest.NoCandidates}, {Fault: geminitest.MaxTokensEmpty}, {}}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				theirs := geminitest.New(geminitest.Model{Name: flash, Script: steps})
				sdk, err := genai.NewClient(t.Context(), theirs.ClientConfig())
				require.NoError(t, err)
				genaiChat, err := sdk.Chats.Create(t.Context(), flash, nil, nil)
				require.NoError(t, err)

				ours := geminitest.New(geminitest.Model{Name: flash, Script: steps},
					geminitest.Model{Name: lite, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
				c := newClient(t, ours, nil, geminiguard.WithCascade(flash, lite), geminiguard.WithStartupCheck(false),
					geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
				chat, err := c.Chats().Create(t.Context(), "", nil, nil)
				require.NoError(t, err)

				for i := range steps {
					msg := genai.Part{Text: fmt.Sprintf("Message %d", i)}
					if stream {
						for _, err := range genaiChat.SendMessageStream(t.Context(), msg) {
							if err != nil {
								break
							}
						}
						for _, err := range chat.SendMessageStream(t.Context(), msg) {
							if err != nil {
								break
							}
						}
					} else {
						_, _ = genaiChat.SendMessage(t.Context(), msg)
						_, _ = chat.SendMessage(t.Context(), msg)
					}
					require.Equal(t, exchanges(genaiChat.History(false)), exchanges(chat.History(false)), "the comprehensive history after message %d (%v)", i, steps[i].Fault)
					require.Equal(t, exchanges(genaiChat.History(true)), exchanges(chat.History(true)), "the curated history after message %d (%v)", i, steps[i].Fault)
				}
				require.Len(t, ours.Requests(flash), len(steps))
				for i, req := range theirs.Requests(flash) {
					assert.Equal(t, exchanges(req.Contents), exchanges(ours.Requests(flash)[i].Contents), "request %d to the chat's model", i)
				}
			})
		})
	}
}
