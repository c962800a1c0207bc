package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/fleet"
	"github.com/geminiguard/geminiguard/geminitest"
	"github.com/geminiguard/geminiguard/redisstore"
)

// The fleet tests' helpers, as the root package's tests have them.

const lite = "gemini-2.5-flash-lite"

// newClient builds a Client on the fake's in-memory transport, given opts.
func newClient(t *testing.T, srv *geminitest.Server, opts ...geminiguard.Option) *geminiguard.Client {
	t.Helper()
	c, err := geminiguard.New(t.Context(), append([]geminiguard.Option{
		geminiguard.WithAPIKey(geminitest.Key),
		geminiguard.WithBaseURL(geminitest.BaseURL),
		geminiguard.WithHTTPClient(srv.HTTPClient()),
	}, opts...)...)
	require.NoError(t, err)
	return c
}

// newFleet builds n Clients on one fake, one project, sharing store (none
// when nil), each given opts.
func newFleet(t *testing.T, srv *geminitest.Server, n int, store fleet.SharedState, opts ...geminiguard.Option) []*geminiguard.Client {
	t.Helper()
	if store != nil {
		opts = append(opts, geminiguard.WithSharedState(store))
	}
	replicas := make([]*geminiguard.Client, n)
	for i := range replicas {
		replicas[i] = newClient(t, srv, append([]geminiguard.Option{geminiguard.WithStartupCheck(false)}, opts...)...)
		t.Cleanup(func() { replicas[i].Close() })
	}
	return replicas
}

// rateLimited adds up the server 429s the fleet's Clients got from model.
func rateLimited(replicas []*geminiguard.Client, model string) int64 {
	var n int64
	for _, c := range replicas {
		for _, m := range c.Stats().Models {
			if m.Model == model {
				n += m.Failures[geminiguard.ClassRateLimit] + m.Failures[geminiguard.ClassDailyQuota]
			}
		}
	}
	return n
}

// ask sends one prompt and returns the answer, the call record and the error.
func ask(ctx context.Context, c *geminiguard.Client, model string) (*genai.GenerateContentResponse, geminiguard.CallRecord, error) {
	var rec geminiguard.CallRecord
	resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), model, genai.Text("Say hi"), nil)
	return resp, rec, err
}

// askWith sends prompt with config and returns the answer's text, the call
// record, how long the call took and the error.
func askWith(ctx context.Context, c *geminiguard.Client, prompt string, config *genai.GenerateContentConfig) (string, geminiguard.CallRecord, time.Duration, error) {
	var rec geminiguard.CallRecord
	start := time.Now()
	resp, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text(prompt), config)
	took := time.Since(start)
	if err != nil {
		return "", rec, took, err
	}
	return resp.Text(), rec, took, nil
}

// keyed returns a context carrying the idempotency key.
func keyed(ctx context.Context, key string) context.Context {
	return geminiguard.Idempotent(ctx, key)
}

// projectSpy is a redisstore.Store that records the project its Clients
// lease for, so that a test can publish to it beside them.
type projectSpy struct {
	*redisstore.Store
	mu      sync.Mutex
	project string
}

func (s *projectSpy) Lease(ctx context.Context, r fleet.LeaseRequest) (fleet.Lease, error) {
	s.mu.Lock()
	s.project = r.Project
	s.mu.Unlock()
	return s.Store.Lease(ctx, r)
}

// Project returns the project of the last lease.
func (s *projectSpy) Project() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.project
}
