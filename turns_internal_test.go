package geminiguard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genai"
)

func TestContentsFor(t *testing.T) {
	var s signers
	s.learn("pro", &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{Content: &genai.Content{Parts: []*genai.Part{
		{FunctionCall: &genai.FunctionCall{Name: "f"}, ThoughtSignature: []byte("pro-sig")},
	}}}}})
	call := func(sig string) *genai.Content {
		p := &genai.Part{FunctionCall: &genai.FunctionCall{Name: "f"}}
		if sig != "" {
			p.ThoughtSignature = []byte(sig)
		}
		return genai.NewContentFromParts([]*genai.Part{p}, genai.RoleModel)
	}
	response := genai.NewContentFromParts([]*genai.Part{genai.NewPartFromFunctionResponse("f", nil)}, genai.RoleUser)
	loop := func(calls ...*genai.Content) []*genai.Content {
		out := genai.Text("go")
		for _, c := range calls {
			out = append(out, c, response)
		}
		return out
	}
	sigOf := func(contents []*genai.Content, i int) []byte { return contents[i].Parts[0].ThoughtSignature }

	own := loop(call("pro-sig"))
	got := s.contentsFor("pro", "pro", own)
	assert.Same(t, &own[0], &got[0], "nothing to change: the contents themselves")

	unknown := loop(call("caller-sig"))
	assert.Equal(t, []byte("caller-sig"), sigOf(s.contentsFor("pro", "pro", unknown), 1), "an unknown signature goes to the first model as it is")
	assert.Equal(t, standInSignature, sigOf(s.contentsFor("flash", "pro", unknown), 1), "and is the first model's to the others")
	assert.Equal(t, standInSignature, sigOf(s.contentsFor("flash", "flash", own), 1), "a known signature is its model's, whoever is first")

	unsigned := loop(call(""), call(""))
	got = s.contentsFor("pro", "pro", unsigned)
	assert.Equal(t, standInSignature, sigOf(got, 1))
	assert.Equal(t, standInSignature, sigOf(got, 3))
	assert.Nil(t, sigOf(unsigned, 1), "the caller's contents are not written")

	// Before the current turn, another model's signature is dropped and no
	// stand-in is needed.
	earlier := append(loop(call("pro-sig")), genai.NewContentFromText("done", genai.RoleModel), genai.NewContentFromText("next?", genai.RoleUser))
	got = s.contentsFor("flash", "pro", earlier)
	assert.Nil(t, sigOf(got, 1))
	assert.Equal(t, []byte("pro-sig"), sigOf(earlier, 1))
}

func TestContentsForAllocatesNothingWhenNothingChanges(t *testing.T) {
	var s signers
	contents := genai.Text("hi")
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = s.contentsFor("pro", "pro", contents) }))
}
