package geminiguard

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"

	"google.golang.org/genai"
)

// Chats creates chat sessions whose every message goes through the Client's
// chain. It mirrors genai.Client.Chats, so that code written for the SDK
// changes client.Chats.Create to client.Chats().Create; genai's own Chat
// cannot be used, as it calls the SDK's Models directly. Safe for concurrent
// use. The zero value is not usable: get one from Client.Chats.
type Chats struct {
	c *Client
}

// Chats returns the Client's chat sessions factory.
func (c *Client) Chats() *Chats {
	return &Chats{c: c}
}

// Create starts a chat session with model ("" means the cascade's primary),
// config for every message (never mutated; nil for none) and history, the
// turns so far (nil for none), as genai's Chats.Create does. history is
// copied: the caller's slice is never written, and appending to it later
// does not change the chat.
//
// Errors: a refusal, before anything is sent, when the Chats is the zero
// value or history holds a nil turn or a role other than "user" and
// "model". ctx is not used; it is there to mirror genai.
func (ch *Chats) Create(_ context.Context, model string, config *genai.GenerateContentConfig, history []*genai.Content) (*Chat, error) {
	if ch == nil || ch.c == nil {
		return nil, errors.New("geminiguard: Chats is the zero value: get one from Client.Chats")
	}
	for i, turn := range history {
		switch {
		case turn == nil:
			return nil, fmt.Errorf("geminiguard: chat history[%d] is nil: remove it", i)
		case turn.Role != genai.RoleUser && turn.Role != genai.RoleModel:
			return nil, fmt.Errorf("geminiguard: chat history[%d] has role %q: set it to %q or %q", i, turn.Role, genai.RoleUser, genai.RoleModel)
		}
	}
	comprehensive := slices.Clone(history)
	return &Chat{
		c:             ch.c,
		model:         model,
		config:        config,
		comprehensive: comprehensive,
		curated:       curate(comprehensive),
	}, nil
}

// Chat is a multi-turn conversation, in the shape of genai.Chat: each
// message is sent with the curated history before it, through the chain
// (limiter, breaker, retry, cascade, Fallback, stream deadlines and resume),
// and the exchange is recorded as genai records it:
//
//   - an answer, whichever model of the cascade gave it, adds the user turn
//     and the answer's model turn to both histories; the next message is
//     sent to the chat's model again, with the whole curated history;
//   - an answer that is no valid model turn (no candidate, no parts, an
//     empty part) adds the exchange to the comprehensive history only;
//   - the Fallback's answer (IsFallback) is no model's: it is added to the
//     comprehensive history only, so the models never read it as their own;
//   - an error adds nothing, as in genai, except one that holds a model's
//     blocked or empty answer (a *ResponseError, which genai returns without
//     error), alone or in the *CascadeError of the models tried after it:
//     the exchange with the first such answer is added to the comprehensive
//     history only;
//   - a streamed answer is recorded once it has ended well, as one model turn
//     holding the parts of its chunks in order (genai keeps one model
//     content per chunk; the API reads both alike); a resumed stream's turn
//     holds the whole text once. A stream the caller stops early adds
//     nothing.
//
// A Chat is not safe for concurrent use, as genai's is not: send one message
// at a time, and read History between messages. The zero value is not
// usable: create a Chat with Chats.Create.
type Chat struct {
	c             *Client
	model         string
	config        *genai.GenerateContentConfig
	comprehensive []*genai.Content // every turn, the failed exchanges' too
	curated       []*genai.Content // the valid turns, sent with each message
}

// SendMessage is Send with parts copied, as genai's Chat.SendMessage.
func (ch *Chat) SendMessage(ctx context.Context, parts ...genai.Part) (*genai.GenerateContentResponse, error) {
	return ch.Send(ctx, partPointers(parts)...)
}

// Send sends parts as the user's next turn, with the curated history,
// through Client.GenerateContent, and records the exchange (see Chat). The
// user turn holds the parts themselves, in a slice of its own, as genai's
// Chat.Send does; they must not be modified afterwards.
//
// Errors: those of Client.GenerateContent; a refusal, before anything is
// sent, when the Chat is the zero value.
func (ch *Chat) Send(ctx context.Context, parts ...*genai.Part) (*genai.GenerateContentResponse, error) {
	if ch == nil || ch.c == nil {
		return nil, errZeroChat
	}
	user := userTurn(parts)
	resp, err := ch.c.GenerateContent(ctx, ch.model, ch.request(user), ch.config)
	if err != nil {
		if resp := refusedAnswer(err); resp != nil {
			ch.record(user, []*genai.Content{firstContent(resp)}, false)
		}
		return nil, err
	}
	valid := validResponse(resp) && !IsFallback(resp)
	ch.record(user, []*genai.Content{firstContent(resp)}, valid)
	return resp, nil
}

// SendMessageStream is SendStream with parts copied, as genai's
// Chat.SendMessageStream.
func (ch *Chat) SendMessageStream(ctx context.Context, parts ...genai.Part) iter.Seq2[*genai.GenerateContentResponse, error] {
	return ch.SendStream(ctx, partPointers(parts)...)
}

// SendStream sends parts as the user's next turn, with the curated history,
// through Client.GenerateContentStream, yields its chunks, and records the
// exchange once the stream has ended (see Chat). The user turn holds the
// parts themselves, as Send's does. Lazy until ranged; the first error ends
// the stream.
//
// Errors: those of Client.GenerateContentStream; a refusal when the Chat is
// the zero value.
func (ch *Chat) SendStream(ctx context.Context, parts ...*genai.Part) iter.Seq2[*genai.GenerateContentResponse, error] {
	return func(yield func(*genai.GenerateContentResponse, error) bool) {
		if ch == nil || ch.c == nil {
			yield(nil, errZeroChat)
			return
		}
		user := userTurn(parts)
		var answer []*genai.Content
		valid, hasData, finished := true, false, false
		for chunk, err := range ch.c.GenerateContentStream(ctx, ch.model, ch.request(user), ch.config) {
			if err != nil {
				if resp := refusedAnswer(err); resp != nil {
					ch.record(user, append(answer, firstContent(resp)), false)
				}
				yield(nil, err)
				return
			}
			switch {
			case IsFallback(chunk):
				valid = false
			case validResponse(chunk):
				hasData = true
			case len(chunk.Candidates) == 0 || !emptyContent(chunk.Candidates[0].Content):
				valid = false
			}
			if len(chunk.Candidates) > 0 {
				if c := chunk.Candidates[0]; c.Content != nil {
					answer = append(answer, c.Content)
				}
				if r := chunk.Candidates[0].FinishReason; r != "" && r != genai.FinishReasonUnspecified {
					finished = true
				}
			}
			if !yield(chunk, nil) {
				return
			}
		}
		ch.record(user, answer, valid && hasData && finished)
	}
}

// History returns the curated history when curated is true (the valid turns,
// sent with each message), else the comprehensive one (every turn, failed
// exchanges and the Fallback's answers too). The slice is the caller's; the
// contents are shared with the Chat and must not be modified.
func (ch *Chat) History(curated bool) []*genai.Content {
	if ch == nil {
		return nil
	}
	if curated {
		return slices.Clone(ch.curated)
	}
	return slices.Clone(ch.comprehensive)
}

var errZeroChat = errors.New("geminiguard: Chat is the zero value: create it with Chats.Create")

// request returns the curated history followed by user, in a new slice.
func (ch *Chat) request(user *genai.Content) []*genai.Content {
	contents := make([]*genai.Content, 0, len(ch.curated)+1)
	return append(append(contents, ch.curated...), user)
}

// record adds the exchange of user and answer (one content, or a stream's
// chunk contents, joined into one model turn) to the comprehensive history,
// and to the curated one when valid, as genai's Chat does.
func (ch *Chat) record(user *genai.Content, answer []*genai.Content, valid bool) {
	turn := joinTurn(answer)
	ch.comprehensive = append(ch.comprehensive, user, turn)
	if valid {
		ch.curated = append(ch.curated, user, turn)
	}
}

// userTurn returns parts as a user turn, in a slice of its own.
func userTurn(parts []*genai.Part) *genai.Content {
	return &genai.Content{Role: genai.RoleUser, Parts: slices.Clone(parts)}
}

// partPointers returns pointers to copies of parts.
func partPointers(parts []genai.Part) []*genai.Part {
	p := make([]*genai.Part, len(parts))
	for i := range parts {
		part := parts[i]
		p[i] = &part
	}
	return p
}

// refusedAnswer returns the response of the first blocked or empty answer
// among the attempts of a call that failed (a *ResponseError, which genai
// returns as an answer, alone or in a *CascadeError), nil for any other
// error and for one that holds a *StreamError: a cut stream, for which
// genai records nothing.
func refusedAnswer(err error) *genai.GenerateContentResponse {
	var (
		rerr *ResponseError
		serr *StreamError
	)
	if errors.As(err, &serr) || !errors.As(err, &rerr) {
		return nil
	}
	return rerr.Response
}

// firstContent returns the first candidate's content, nil when none.
func firstContent(resp *genai.GenerateContentResponse) *genai.Content {
	if resp == nil || len(resp.Candidates) == 0 {
		return nil
	}
	return resp.Candidates[0].Content
}

// joinTurn returns the model turn of an answer: the one content itself (a
// copy with role "model" when its role is another), or,
// for a stream's chunks, one content with their parts in order, the parts
// without data (the empty part some streams end with) left out. An answer
// without content is recorded as a model turn without parts, as genai does.
func joinTurn(answer []*genai.Content) *genai.Content {
	answer = slices.DeleteFunc(answer, func(c *genai.Content) bool { return c == nil })
	switch len(answer) {
	case 0:
		return &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{}}
	case 1:
		if answer[0].Role == genai.RoleModel {
			return answer[0]
		}
		turn := *answer[0] // a Fallback's content may lack the role
		turn.Role = genai.RoleModel
		return &turn
	}
	turn := &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{}}
	for _, c := range answer {
		for _, p := range c.Parts {
			if p != nil && partHasData(p) {
				turn.Parts = append(turn.Parts, p)
			}
		}
	}
	return turn
}

// curate returns the turns of history a message is sent with, by genai's
// rule: a user turn whose model answer is missing, invalid or empty is left
// out with that answer; empty model turns are dropped.
func curate(history []*genai.Content) []*genai.Content {
	curated := []*genai.Content{}
	for i := 0; i < len(history); {
		if history[i].Role == genai.RoleUser {
			curated = append(curated, history[i])
			i++
			continue
		}
		var outputs []*genai.Content
		valid := true
		for ; i < len(history) && history[i].Role == genai.RoleModel; i++ {
			if emptyContent(history[i]) {
				continue
			}
			outputs = append(outputs, history[i])
			valid = valid && validContent(history[i])
		}
		if valid && len(outputs) > 0 {
			curated = append(curated, outputs...)
		} else if n := len(curated); n > 0 && curated[n-1].Role == genai.RoleUser {
			curated = curated[:n-1]
		}
	}
	return curated
}

// validResponse reports whether resp's first candidate is a valid turn.
func validResponse(resp *genai.GenerateContentResponse) bool {
	return validContent(firstContent(resp))
}

// validContent reports whether c has parts, each with data (genai's rule).
func validContent(c *genai.Content) bool {
	if c == nil || len(c.Parts) == 0 {
		return false
	}
	for _, p := range c.Parts {
		if p == nil || !partHasData(p) {
			return false
		}
	}
	return true
}

// emptyContent reports whether c has parts and none carries data: the API
// ends some streamed turns with one (genai's rule).
func emptyContent(c *genai.Content) bool {
	if c == nil || len(c.Parts) == 0 {
		return false
	}
	for _, p := range c.Parts {
		if p == nil || partHasData(p) {
			return false
		}
	}
	return true
}

// partHasData reports whether p carries text or another data field.
func partHasData(p *genai.Part) bool {
	return p.Text != "" || p.InlineData != nil || p.FileData != nil || p.FunctionCall != nil ||
		p.FunctionResponse != nil || p.ExecutableCode != nil || p.CodeExecutionResult != nil
}
