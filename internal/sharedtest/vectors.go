package sharedtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geminiguard/geminiguard/fleet"
)

// RunVectors runs the suite of fleet.VectorStore. newStore returns an
// empty store each time it is called, cleaned up by t.
func RunVectors(t *testing.T, newStore func(t *testing.T) fleet.VectorStore) {
	for _, c := range []struct {
		name string
		run  func(*testing.T, fleet.VectorStore)
	}{
		{"AddThenReadByMark", addThenReadByMark},
		{"NewestKeptPagesBounded", newestKeptPagesBounded},
		{"ScopesAndProjectsApart", scopesAndProjectsApart},
		{"ExpiredLeftOut", expiredLeftOut},
		{"VectorsCancelledContext", vectorsCancelledContext},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(t, newStore(t)) })
	}
}

const scope = "gemini-3.5-flash:5e0b"

// entry returns the i-th entry of the vector tests.
func entry(i int) fleet.VectorEntry {
	return fleet.VectorEntry{
		Key:      fmt.Sprintf("gemini-3.5-flash:%064x", i),
		Template: fmt.Sprintf("%064x", i+1),
		Vector:   []float32{0.6, -0.8, float32(i)},
		Answer:   []byte(fmt.Sprintf(`{"candidates":[{"content":{"parts":[{"text":"answer %d"}]}}]}`, i)),
	}
}

func addVector(t *testing.T, s fleet.VectorStore, project, scope string, e fleet.VectorEntry, ttl time.Duration) {
	t.Helper()
	require.NoError(t, s.AddVector(context.Background(), project, scope, e, ttl))
}

func vectors(t *testing.T, s fleet.VectorStore, project, scope, after string) ([]fleet.VectorEntry, string) {
	t.Helper()
	got, mark, err := s.Vectors(context.Background(), project, scope, after)
	require.NoError(t, err)
	return got, mark
}

// sameEntry asserts that got is want as stored for ttl around now.
func sameEntry(t *testing.T, want, got fleet.VectorEntry, ttl time.Duration) {
	t.Helper()
	assert.WithinDuration(t, time.Now().Add(ttl), got.Expires, slack)
	got.Expires = time.Time{}
	assert.Equal(t, want, got)
}

func addThenReadByMark(t *testing.T, s fleet.VectorStore) {
	got, mark := vectors(t, s, project, scope, "")
	assert.Empty(t, got)
	assert.Empty(t, mark, "nothing read: the mark given back")

	addVector(t, s, project, scope, entry(0), time.Hour)
	addVector(t, s, project, scope, fleet.VectorEntry{Key: "gemini-3.5-flash:ab", Answer: []byte(`{}`)}, time.Hour) // exact only
	got, mark = vectors(t, s, project, scope, "")
	require.Len(t, got, 2)
	sameEntry(t, entry(0), got[0], time.Hour)
	sameEntry(t, fleet.VectorEntry{Key: "gemini-3.5-flash:ab", Answer: []byte(`{}`)}, got[1], time.Hour)
	assert.NotEmpty(t, mark)

	again, same := vectors(t, s, project, scope, mark)
	assert.Empty(t, again, "nothing after the mark")
	assert.Equal(t, mark, same)

	addVector(t, s, project, scope, entry(0), time.Hour) // the same key again: kept beside
	addVector(t, s, project, scope, entry(2), time.Minute)
	got, next := vectors(t, s, project, scope, mark)
	require.Len(t, got, 2, "only what came after the mark")
	sameEntry(t, entry(0), got[0], time.Hour)
	sameEntry(t, entry(2), got[1], time.Minute)
	assert.NotEqual(t, mark, next)
}

func newestKeptPagesBounded(t *testing.T, s fleet.VectorStore) {
	const extra = 5
	for i := range fleet.MaxVectors + extra {
		addVector(t, s, project, scope, entry(i), time.Hour)
	}
	var keys []string
	mark := ""
	for page := 0; ; page++ {
		require.Less(t, page, fleet.MaxVectors, "pages never end")
		got, next := vectors(t, s, project, scope, mark)
		assert.LessOrEqual(t, len(got), fleet.VectorsPerRead)
		if len(got) == 0 {
			assert.Equal(t, mark, next)
			break
		}
		for _, e := range got {
			keys = append(keys, e.Key)
		}
		mark = next
	}
	require.Len(t, keys, fleet.MaxVectors, "the newest MaxVectors kept")
	assert.Equal(t, entry(extra).Key, keys[0], "the oldest dropped")
	assert.Equal(t, entry(fleet.MaxVectors+extra-1).Key, keys[len(keys)-1])
}

func scopesAndProjectsApart(t *testing.T, s fleet.VectorStore) {
	addVector(t, s, project, scope, entry(0), time.Hour)
	addVector(t, s, project, "gemini-3.5-flash:77aa", entry(1), time.Hour)
	addVector(t, s, "p-other", scope, entry(2), time.Hour)
	for _, c := range []struct {
		project, scope string
		want           int
	}{{project, scope, 0}, {project, "gemini-3.5-flash:77aa", 1}, {"p-other", scope, 2}} {
		got, _ := vectors(t, s, c.project, c.scope, "")
		require.Len(t, got, 1, "%s %s", c.project, c.scope)
		assert.Equal(t, entry(c.want).Key, got[0].Key, "%s %s", c.project, c.scope)
	}
}

func expiredLeftOut(t *testing.T, s fleet.VectorStore) {
	addVector(t, s, project, scope, entry(0), time.Millisecond)
	addVector(t, s, project, scope, entry(1), time.Hour)
	_, first := vectors(t, s, project, scope, "")
	require.Eventually(t, func() bool {
		got, mark := vectors(t, s, project, scope, "")
		return len(got) == 1 && got[0].Key == entry(1).Key && mark == first
	}, slack, time.Millisecond, "the expired entry left out; the mark past it")
}

func vectorsCancelledContext(t *testing.T, s fleet.VectorStore) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, s.AddVector(ctx, project, scope, entry(0), time.Hour), context.Canceled)
	_, _, err := s.Vectors(ctx, project, scope, "")
	require.ErrorIs(t, err, context.Canceled)
	got, _ := vectors(t, s, project, scope, "")
	assert.Empty(t, got, "nothing added")
}
