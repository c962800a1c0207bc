package geminiguard_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

const (
	pro3   = "gemini-3-pro-preview"
	flash3 = "gemini-3-flash-preview"
)

// toolLoopFake serves a tool loop of three turns on two Gemini 3 models
// that check thought signatures: the first turn asks for the weather, the
// second (after its response) for the time, the third answers. The primary
// fails the middle turn with a 503; the secondary answers it.
func toolLoopFake() *geminitest.Server {
	decide := func(failMiddle bool) func(geminitest.Request, int) geminitest.Step {
		return func(r geminitest.Request, _ int) geminitest.Step {
			switch functionResponses(r.Contents) {
			case 0:
				return geminitest.Step{Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: "c1", Name: "get_weather", Args: map[string]any{"city": "Paris"}}}}}
			case 1:
				if failMiddle {
					return geminitest.Step{Fault: geminitest.Overloaded}
				}
				return geminitest.Step{Parts: []*genai.Part{{Text: "Checking the clock.", Thought: true}, {FunctionCall: &genai.FunctionCall{ID: "c2", Name: "get_time", Args: map[string]any{"tz": "CET"}}}}}
			}
			return geminitest.Step{Text: "Sunny in Paris, and it is noon."}
		}
	}
	return geminitest.New(
		geminitest.Model{Name: pro3, RequireSignatures: true, Decide: decide(true)},
		geminitest.Model{Name: flash3, RequireSignatures: true, Decide: decide(false)},
	)
}

func functionResponses(contents []*genai.Content) int {
	n := 0
	for _, c := range contents {
		for _, p := range c.Parts {
			if p.FunctionResponse != nil {
				n++
			}
		}
	}
	return n
}

// toolResult is the user turn that answers the call in the model turn c.
func toolResult(c *genai.Content) *genai.Content {
	for _, p := range c.Parts {
		if fc := p.FunctionCall; fc != nil {
			return genai.NewContentFromParts([]*genai.Part{genai.NewPartFromFunctionResponse(fc.Name, map[string]any{"ok": true})}, genai.RoleUser)
		}
	}
	panic("no function call in the model turn")
}

func snapshot(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

var standIn, _ = base64.URLEncoding.DecodeString("skip_thought_signature_validator")

// A tool loop whose middle turn the secondary answers after the primary
// fails: each request is made valid for the model it goes to (the fake, a
// Gemini 3 on both sides, refuses a foreign or missing signature with the
// real 400), on a copy: the caller's history is never written.
func TestToolLoopSurvivesACascadeSwitch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := toolLoopFake()
		c := newClient(t, fake, nil, geminiguard.WithCascade(pro3, flash3), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))

		history := genai.Text("Weather and time in Paris?")
		var models []string
		for turn := range 3 {
			before := snapshot(t, history)
			var rec geminiguard.CallRecord
			resp, err := c.GenerateContent(geminiguard.RecordCall(t.Context(), &rec), "", history, nil)
			require.NoError(t, err, "turn %d: %+v", turn+1, rec.Attempts)
			assert.Equal(t, before, snapshot(t, history), "turn %d wrote the caller's history", turn+1)
			models = append(models, rec.Model)
			for _, a := range rec.Attempts {
				if a.Err != nil {
					assert.ErrorContains(t, a.Err, "overloaded", "turn %d: only the primary's 503 fails", turn+1)
				}
			}
			history = append(history, resp.Candidates[0].Content)
			if turn < 2 {
				history = append(history, toolResult(resp.Candidates[0].Content))
			}
		}
		assert.Equal(t, []string{pro3, flash3, pro3}, models)
		assert.Equal(t, "Sunny in Paris, and it is noon.", history[len(history)-1].Parts[0].Text)

		// What each model was sent: its own signatures kept, the other's
		// replaced by the documented stand-in on a step's first call and
		// dropped elsewhere.
		proSig, flashCall, flashThought := history[1].Parts[0].ThoughtSignature, history[3].Parts[1], history[3].Parts[0]
		require.NotEmpty(t, proSig)
		require.NotEmpty(t, flashCall.ThoughtSignature)
		toFlash := fake.Requests(flash3)[0].Contents
		assert.Equal(t, standIn, toFlash[1].Parts[0].ThoughtSignature)
		reqs := fake.Requests(pro3)
		toPro := reqs[len(reqs)-1].Contents
		assert.Equal(t, proSig, toPro[1].Parts[0].ThoughtSignature)
		assert.Empty(t, toPro[3].Parts[0].ThoughtSignature, "flash's thought part")
		assert.True(t, toPro[3].Parts[0].Thought)
		assert.Equal(t, standIn, toPro[3].Parts[1].ThoughtSignature)
		assert.NotEmpty(t, flashThought.ThoughtSignature, "the history keeps flash's signatures")
	})
}

// The same loop in a Chat, unary (Send) and streamed (SendStream): the
// secondary answers the middle turn, and the history holds each model's
// answer as it came, its signatures included.
func TestChatToolLoopSurvivesACascadeSwitch(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		t.Run(map[bool]string{false: "Send", true: "SendStream"}[streamed], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fake := toolLoopFake()
				c := newClient(t, fake, nil, geminiguard.WithCascade(pro3, flash3), geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}))
				chat, err := c.Chats().Create(t.Context(), "", nil, nil)
				require.NoError(t, err)

				send := func(ctx context.Context, parts ...*genai.Part) (*genai.Content, error) {
					if !streamed {
						resp, err := chat.Send(ctx, parts...)
						if err != nil {
							return nil, err
						}
						return resp.Candidates[0].Content, nil
					}
					turn := &genai.Content{Role: genai.RoleModel}
					for chunk, err := range chat.SendStream(ctx, parts...) {
						if err != nil {
							return nil, err
						}
						turn.Parts = append(turn.Parts, chunk.Candidates[0].Content.Parts...)
					}
					return turn, nil
				}
				var models []string
				var answers []*genai.Content
				next := []*genai.Part{genai.NewPartFromText("Weather and time in Paris?")}
				for turn := range 3 {
					var rec geminiguard.CallRecord
					answer, err := send(geminiguard.RecordCall(t.Context(), &rec), next...)
					require.NoError(t, err, "turn %d: %+v", turn+1, rec.Attempts)
					models = append(models, rec.Model)
					answers = append(answers, answer)
					if turn < 2 {
						next = toolResult(answer).Parts
					}
				}
				assert.Equal(t, []string{pro3, flash3, pro3}, models)
				history := chat.History(true)
				require.Len(t, history, 6)
				for i, answer := range answers {
					assert.Equal(t, snapshot(t, answer.Parts), snapshot(t, history[2*i+1].Parts), "turn %d as the model gave it", i+1)
				}
				assert.NotEmpty(t, history[3].Parts[1].ThoughtSignature, "flash's own signature stays in the history")
				reqs := fake.Requests(pro3)
				assert.Equal(t, standIn, reqs[len(reqs)-1].Contents[3].Parts[1].ThoughtSignature, "and the primary is sent the stand-in")
			})
		})
	}
}
