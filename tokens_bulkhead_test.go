package geminiguard_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// TestTokenCountsGoThroughBulkheads: CountTokens and ComputeTokens take a
// slot of the call's bulkhead as GenerateContent does: a full bulkhead
// refuses them at once, a misspelt name fails them before anything is
// sent, and a call that names none goes through the "default" one.
func TestTokenCountsGoThroughBulkheads(t *testing.T) {
	for _, row := range []struct {
		method string
		verb   geminitest.Verb
		count  func(context.Context, *geminiguard.Client) error
	}{
		{"CountTokens", geminitest.VerbCountTokens, func(ctx context.Context, c *geminiguard.Client) error {
			_, err := c.CountTokens(ctx, flash, genai.Text("How many tokens?"), nil)
			return err
		}},
		{"ComputeTokens", geminitest.VerbComputeTokens, func(ctx context.Context, c *geminiguard.Client) error {
			_, err := c.ComputeTokens(ctx, flash, genai.Text("How many tokens?"), nil)
			return err
		}},
	} {
		t.Run(row.method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.NewVertex("my-project", "us-central1", geminitest.Model{Name: flash})
				cfg := srv.ClientConfig()
				cfg.HTTPClient.Transport = slowTransport{base: cfg.HTTPClient.Transport, took: answerTime}
				sdk, err := genai.NewClient(t.Context(), cfg)
				require.NoError(t, err)
				c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash), geminiguard.WithStartupCheck(false),
					geminiguard.WithBulkhead("batch", geminiguard.Bulkhead{MaxConcurrent: 1}),
					geminiguard.WithBulkhead("default", geminiguard.Bulkhead{MaxConcurrent: 1}))
				require.NoError(t, err)

				var wg sync.WaitGroup
				wg.Go(func() { assert.NoError(t, row.count(feature("batch"), c)) })
				synctest.Wait() // the batch count holds the bulkhead's one slot

				start := time.Now()
				err = row.count(feature("batch"), c)
				require.ErrorIs(t, err, geminiguard.ErrBulkheadFull, "a full bulkhead refuses a count")
				assert.Zero(t, time.Since(start), "at once")

				err = row.count(feature("bacth"), c)
				require.Error(t, err)
				assert.Equal(t, geminiguard.ClassBadRequest, geminiguard.Classify(err).Class, "a misspelt name never escapes its limit")
				assert.Contains(t, err.Error(), `"bacth"`)

				require.NoError(t, row.count(t.Context(), c), "no name: the default bulkhead")
				wg.Wait()

				assert.Equal(t, 2, srv.Hits(flash, row.verb), "the refused counts sent nothing")
				assert.Equal(t, []geminiguard.BulkheadStats{
					{Name: "batch", Limit: 1, Admitted: 1, Rejected: 1},
					{Name: "default", Limit: 1, Admitted: 1},
				}, c.Stats().Bulkheads)
			})
		})
	}
}

// slowTransport answers each request took after base does (the fake
// answers counts at once).
type slowTransport struct {
	base http.RoundTripper
	took time.Duration
}

func (s slowTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	time.Sleep(s.took)
	return s.base.RoundTrip(req)
}
