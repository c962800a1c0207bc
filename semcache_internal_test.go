package geminiguard

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genai"
)

func TestWholeAnswer(t *testing.T) {
	text := func(reason genai.FinishReason) *genai.GenerateContentResponse {
		return &genai.GenerateContentResponse{Candidates: []*genai.Candidate{{Content: genai.NewContentFromText("Sunny.", genai.RoleModel), FinishReason: reason}}}
	}
	assert.True(t, wholeAnswer(text(genai.FinishReasonStop)))
	assert.True(t, wholeAnswer(text("")), "no finish reason: as the API sends a whole answer's last chunk")
	assert.False(t, wholeAnswer(text(genai.FinishReasonMaxTokens)), "cut short")
	assert.False(t, wholeAnswer(text(genai.FinishReasonSafety)), "blocked")
	assert.False(t, wholeAnswer(&genai.GenerateContentResponse{PromptFeedback: &genai.GenerateContentResponsePromptFeedback{BlockReason: genai.BlockedReasonSafety}}), "prompt blocked")
	assert.False(t, wholeAnswer(&genai.GenerateContentResponse{Candidates: []*genai.Candidate{{FinishReason: genai.FinishReasonStop}}}), "empty")
	assert.False(t, wholeAnswer(markFallback(text(genai.FinishReasonStop))), "a Fallback's")
	assert.False(t, wholeAnswer(nil))
}

// BenchmarkSemanticLookup measures the flat scan of a lookup among n
// entries of one family and config, 768 dimensions each (the fake's and
// text-embedding-004's default).
func BenchmarkSemanticLookup(b *testing.B) {
	const dims = 768
	rng := rand.New(rand.NewPCG(1, 2))
	vector := func() []float32 {
		v := make([]float32, dims)
		for i := range v {
			v[i] = float32(rng.NormFloat64())
		}
		return normalised(v)
	}
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			s := NewSemanticCache(SemanticCacheConfig{Size: n, TTL: time.Hour})
			for i := range n {
				s.add(&semEntry{key: fmt.Sprint(i), scope: "f:c", vec: vector(), json: []byte(`{}`)}, time.Now().Add(time.Hour))
			}
			q := vector()
			b.ReportAllocs()
			for b.Loop() {
				s.nearest("f:c", q)
			}
		})
	}
}
