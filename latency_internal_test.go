package geminiguard

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/genai"
)

func TestLatencyBucketsHoldTheirMiddle(t *testing.T) {
	prev := -1
	for d := 2 * time.Millisecond; d < 4*time.Hour; d = d * 21 / 20 {
		i := latencyBucket(d)
		assert.GreaterOrEqual(t, i, prev, "buckets grow with the latency (%v)", d)
		prev = i
		assert.InDelta(t, 1, float64(latencyMid(i))/float64(d), 0.125, "%v is within 12%% of its bucket's middle %v", d, latencyMid(i))
	}
	assert.Equal(t, 0, latencyBucket(0))
	assert.Equal(t, latencyBuckets-1, latencyBucket(math.MaxInt64), "an abandoned attempt: beyond every answer")
}

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

func TestLatenciesCutAfterWarmup(t *testing.T) {
	var l latencies
	for range cutWarmup - 1 {
		l.record(0, 800*time.Millisecond)
	}
	_, ok := l.cut(0)
	assert.False(t, ok, "not before cutWarmup answers")
	l.record(0, 800*time.Millisecond)
	d, ok := l.cut(0)
	assert.True(t, ok)
	assert.InDelta(t, 2.4, d.Seconds(), 0.2, "three times the median")
	_, ok = l.cut(1)
	assert.False(t, ok, "another class learns apart")
	for range 1000 {
		l.record(0, 100*time.Millisecond)
	}
	d, _ = l.cut(0)
	assert.Equal(t, cutFloor, d, "never below the floor")
}
