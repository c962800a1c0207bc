package geminiguard_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// itemKey is the context key of the item a call is about.
type itemKey struct{}

// item is what a wallpaper app knows of the item a caption is asked for.
type item struct{ category, id string }

// itemOf is the CategoryFallback key of the tests: the item in ctx.
func itemOf(ctx context.Context, _ geminiguard.FallbackRequest) (string, string) {
	it, _ := ctx.Value(itemKey{}).(item)
	return it.category, it.id
}

// captions returns n captions of category.
func captions(category string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s caption %d", category, i)
	}
	return out
}

// TestCategoryFallbackIsDeterministic: with every model down, the same item
// gets the same caption of its category on every call and from every
// Client, and the pick is pinned (FNV-1a of category, 0, id): a release
// that changed it would change every cached page.
func TestCategoryFallbackIsDeterministic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lists := map[string][]string{"sea": captions("sea", 40), "forest": captions("forest", 30), "": {"A quiet picture."}}
		srv := geminitest.New(always(flash, geminitest.Step{Fault: geminitest.Overloaded}))
		newOne := func() *geminiguard.Client {
			return newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithFallback(geminiguard.CategoryFallback(lists, itemOf)))
		}
		caption := func(c *geminiguard.Client, it item) string {
			resp, err := c.GenerateContent(context.WithValue(t.Context(), itemKey{}, it), "", genai.Text("Caption this"), nil)
			require.NoError(t, err)
			require.True(t, geminiguard.IsFallback(resp))
			return resp.Text()
		}
		a, b := newOne(), newOne()
		for _, it := range []item{{"sea", "wp-1"}, {"sea", "wp-2"}, {"forest", "wp-1"}} {
			first := caption(a, it)
			assert.Equal(t, first, caption(a, it), it)
			assert.Equal(t, first, caption(b, it), it)
			assert.Contains(t, lists[it.category], first)
		}
		assert.Equal(t, "sea caption 9", caption(a, item{"sea", "wp-1"}), "pinned: FNV-1a 64 of \"sea\\x00wp-1\" mod 40 is 9 (computed apart, in Python)")
		assert.Equal(t, "A quiet picture.", caption(a, item{"city", "wp-1"}), "a category without a list uses the \"\" list")

		none := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithFallback(geminiguard.CategoryFallback(map[string][]string{"sea": nil}, itemOf)))
		_, err := none.GenerateContent(context.WithValue(t.Context(), itemKey{}, item{"sea", "x"}), "", genai.Text("Caption this"), nil)
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed, "an empty list and no \"\" list: no answer")
	})
}

// TestCategoryFallbackSpreadsEvenly: over 20,000 ids, every caption of a
// 40-caption list is picked, each within 25% of the mean (500); ids that
// differ by one character land apart.
func TestCategoryFallbackSpreadsEvenly(t *testing.T) {
	list := captions("sea", 40)
	fb := geminiguard.CategoryFallback(map[string][]string{"sea": list}, itemOf)
	counts := map[string]int{}
	const ids = 20_000
	for i := range ids {
		ctx := context.WithValue(t.Context(), itemKey{}, item{"sea", fmt.Sprintf("wp-%d", i)})
		resp, err := fb(ctx, geminiguard.FallbackRequest{})
		require.NoError(t, err)
		counts[resp.Text()]++
	}
	require.Len(t, counts, len(list))
	mean := ids / len(list)
	lo, hi := ids, 0
	for c, n := range counts {
		assert.InDelta(t, mean, n, float64(mean)/4, c)
		lo, hi = min(lo, n), max(hi, n)
	}
	t.Logf("%d ids over %d captions: %d to %d each (mean %d)", ids, len(list), lo, hi, mean)

	nilKey := geminiguard.CategoryFallback(map[string][]string{"": list}, nil)
	r1, err := nilKey(t.Context(), geminiguard.FallbackRequest{Contents: genai.Text("Caption wp-1")})
	require.NoError(t, err)
	r2, err := nilKey(t.Context(), geminiguard.FallbackRequest{Contents: genai.Text("Caption wp-1")})
	require.NoError(t, err)
	assert.Equal(t, r1.Text(), r2.Text(), "a nil key picks by the prompt's text")
}
