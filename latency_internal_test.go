package geminiguard

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genai"
)

func TestLatencyClass(t *testing.T) {
	budget := func(n int32) *genai.ThinkingConfig { return &genai.ThinkingConfig{ThinkingBudget: &n} }
	for _, tt := range []struct {
		cfg  *genai.GenerateContentConfig
		want int
	}{
		{nil, 0},
		{&genai.GenerateContentConfig{}, 0},
		{&genai.GenerateContentConfig{MaxOutputTokens: 1024}, 1},
		{&genai.GenerateContentConfig{MaxOutputTokens: 1024, ThinkingConfig: budget(2048)}, 2},
		{&genai.GenerateContentConfig{MaxOutputTokens: 65536}, 3},
		{&genai.GenerateContentConfig{ThinkingConfig: budget(-1)}, 3},
		{&genai.GenerateContentConfig{ThinkingConfig: &genai.ThinkingConfig{ThinkingLevel: genai.ThinkingLevelHigh}}, 3},
	} {
		assert.Equal(t, tt.want, latencyClass(tt.cfg), "%+v", tt.cfg)
	}
}
