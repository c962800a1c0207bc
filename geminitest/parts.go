package geminitest

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"

	"google.golang.org/genai"
)

// What the fake refuses in a request's contents, as the real API does, and
// the thought signatures its models stamp and check.

// refuse writes the 400 of contents the real API refuses (checkContents)
// and reports whether it did.
func refuse(w http.ResponseWriter, contents []*genai.Content) bool {
	e, refused := checkContents(contents)
	if refused {
		writeError(w, e)
	}
	return refused
}

// checkContents returns the 400 the real API answers for contents it
// refuses, and false when it accepts them: a content without parts, a role
// other than "user" and "model" (or none), a part without data (an empty
// text, as the SDK sends it: {}), a function response turn that does not
// follow a function call turn, or that answers a different number of calls.
// A part that carries only a thought signature is accepted (streams end
// with one, and SDK chats send it back).
func checkContents(contents []*genai.Content) (apiError, bool) {
	for i, c := range contents {
		if c == nil || len(c.Parts) == 0 {
			return emptyParts(i), true
		}
		if c.Role != "" && c.Role != genai.RoleUser && c.Role != genai.RoleModel {
			return invalidRole(), true
		}
		responses := 0
		for j, p := range c.Parts {
			if p == nil || !hasData(p) && len(p.ThoughtSignature) == 0 {
				return emptyPart(i, j), true
			}
			if p.FunctionResponse != nil {
				responses++
			}
		}
		if responses == 0 {
			continue
		}
		calls := 0
		if i > 0 && contents[i-1] != nil && contents[i-1].Role == genai.RoleModel {
			calls = functionCalls(contents[i-1])
		}
		switch {
		case calls == 0:
			return invalidArgument(responseNotAfterCall), true
		case calls != responses:
			return invalidArgument(responseCountMismatch), true
		}
	}
	return apiError{}, false
}

// hasData reports whether p carries one of the data fields of a part.
func hasData(p *genai.Part) bool {
	return p.Text != "" || p.InlineData != nil || p.FileData != nil || p.FunctionCall != nil ||
		p.FunctionResponse != nil || p.ExecutableCode != nil || p.CodeExecutionResult != nil ||
		p.ToolCall != nil || p.ToolResponse != nil
}

func functionCalls(c *genai.Content) int {
	n := 0
	for _, p := range c.Parts {
		if p != nil && p.FunctionCall != nil {
			n++
		}
	}
	return n
}

// The documented stand-in signatures for function calls a model did not
// make (a history moved from another model, a call written by hand): the
// strings as the REST API takes them, so their base64-decoded bytes.
// https://ai.google.dev/gemini-api/docs/thought-signatures (FAQ)
var standIns = [][]byte{mustURLBase64("skip_thought_signature_validator"), mustURLBase64("context_engineering_is_the_way_to_go")}

func mustURLBase64(s string) []byte {
	b, err := base64.URLEncoding.DecodeString(s)
	if err != nil {
		panic("geminitest: " + err.Error())
	}
	return b
}

// stamp returns the thought signature model puts on the parts of the answer
// responseID: opaque to clients, recognisably the model's to the fake.
func stamp(model, responseID string) []byte {
	return []byte(stampPrefix(model) + responseID)
}

func stampPrefix(model string) string { return "geminitest:" + model + ":" }

// checkSignatures returns the 400 a model that requires signatures (Gemini
// 3) answers, and false when it accepts contents: every signature must be
// the model's own or a documented stand-in ("Corrupted thought signature."
// otherwise; Vertex AI's "Thought signature is not valid"), and in the
// current turn (the contents after the last user content that is not only
// function responses) the first function call of every model content must
// carry one.
func checkSignatures(model string, contents []*genai.Content, vertex bool) (apiError, bool) {
	own := []byte(stampPrefix(model))
	for _, c := range contents {
		for _, p := range c.Parts {
			sig := p.ThoughtSignature
			if len(sig) == 0 || bytes.HasPrefix(sig, own) || bytes.Equal(sig, standIns[0]) || bytes.Equal(sig, standIns[1]) {
				continue
			}
			if vertex {
				return invalidArgument(vertexSignatureInvalid), true
			}
			return invalidArgument(signatureCorrupted), true
		}
	}
	for i := currentTurn(contents); i < len(contents); i++ {
		if contents[i].Role != genai.RoleModel {
			continue
		}
		for _, p := range contents[i].Parts {
			if p.FunctionCall == nil {
				continue
			}
			if len(p.ThoughtSignature) == 0 {
				return signatureMissing(p.FunctionCall.Name, i+1), true
			}
			break // only a step's first call carries the signature
		}
	}
	return apiError{}, false
}

// currentTurn returns the index of the last user content that is not only
// function responses: the turn the API validates signatures in starts there.
func currentTurn(contents []*genai.Content) int {
	for i := len(contents) - 1; i >= 0; i-- {
		if contents[i].Role == genai.RoleModel {
			continue
		}
		for _, p := range contents[i].Parts {
			if p.FunctionResponse == nil {
				return i
			}
		}
	}
	return 0
}

// signParts returns parts with the model's signature on the first function
// call and on every thought part that has none, copying what it changes.
func signParts(parts []*genai.Part, sig []byte) []*genai.Part {
	out := make([]*genai.Part, len(parts))
	first := true // no function call yet
	for i, p := range parts {
		out[i] = p
		if p == nil {
			continue
		}
		call := p.FunctionCall != nil
		if len(p.ThoughtSignature) == 0 && (p.Thought || call && first) {
			signed := *p
			signed.ThoughtSignature = sig
			out[i] = &signed
		}
		first = first && !call
	}
	return out
}

// ---- 400 bodies of refused contents ----

// emptyParts: https://github.com/egoist/chatwise-releases/issues/250
func emptyParts(i int) apiError {
	return invalidArgument(fmt.Sprintf("* GenerateContentRequest.contents[%d].parts: contents.parts must not be empty.\n", i))
}

// emptyPart (an empty text part, sent by the SDK as {}):
// https://github.com/router-for-me/CLIProxyAPI/issues/1292
func emptyPart(i, j int) apiError {
	return invalidArgument(fmt.Sprintf("* GenerateContentRequest.contents[%d].parts[%d].data: required oneof field 'data' must have one initialized field\n", i, j))
}

// invalidRole ("assistant", "system", "tool", ...):
// https://github.com/langbot-app/LangBot/issues/1486
func invalidRole() apiError { return invalidArgument("Please use a valid role: user, model.") }

// responseNotAfterCall:
// https://github.com/GoogleCloudPlatform/generative-ai/pull/368
const responseNotAfterCall = "Please ensure that function response turn comes immediately after a function call turn."

// responseCountMismatch: https://github.com/google-gemini/gemini-cli/issues/17208
const responseCountMismatch = "Please ensure that the number of function response parts is equal to the number of function call parts of the function call turn."

// signatureMissing: a Gemini 3 model's 400 for a step's first function call
// without a signature; position is the content's, counted from 1.
// https://github.com/manthanabc/paws/issues/103
func signatureMissing(name string, position int) apiError {
	return invalidArgument(fmt.Sprintf("Function call is missing a thought_signature in functionCall parts. "+
		"This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. "+
		"Additional data, function call `default_api:%s` , position %d. "+
		"Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.", name, position))
}

// signatureCorrupted: another model's signature, or none a model made.
// https://github.com/google-gemini/gemini-cli/issues/13467 (after a switch
// of model), https://github.com/lbjlaq/Antigravity-Manager/issues/970
const signatureCorrupted = "Corrupted thought signature."

// vertexSignatureInvalid is Vertex AI's text for the same.
// https://github.com/NoeFabris/opencode-antigravity-auth/issues/368
const vertexSignatureInvalid = "Unable to submit request because Thought signature is not valid.. " +
	"Learn more: https://cloud.google.com/vertex-ai/generative-ai/docs/model-reference/gemini"
