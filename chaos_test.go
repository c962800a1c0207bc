package geminiguard_test

import (
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

const rehearsal = "I am rehearsing an outage"

// chaosTransport returns geminitest.Chaos with c in front of srv, the
// stand-in for the real API.
func chaosTransport(t *testing.T, srv *geminitest.Server, c geminitest.ChaosConfig) http.RoundTripper {
	t.Helper()
	c.Enable = rehearsal
	rt, err := geminitest.Chaos(srv.Transport(), c)
	require.NoError(t, err)
	return rt
}

func TestChaosFaultsAreClassifiedAsTheRealOnes(t *testing.T) {
	cases := []struct {
		name   string
		config geminitest.ChaosConfig
		class  geminiguard.Class
		after  time.Duration
	}{
		{"overloaded", geminitest.ChaosConfig{Overloaded: 1}, geminiguard.ClassOverloaded, 0},
		{"rate limited", geminitest.ChaosConfig{RateLimited: 1}, geminiguard.ClassRateLimit, 7 * time.Second},
		{"daily quota", geminitest.ChaosConfig{DailyQuota: 1}, geminiguard.ClassDailyQuota, 43 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: flash})
			cfg := srv.ClientConfig()
			cfg.HTTPClient = &http.Client{Transport: chaosTransport(t, srv, tc.config)}
			sdk, err := genai.NewClient(t.Context(), cfg)
			require.NoError(t, err)

			_, err = sdk.Models.GenerateContent(t.Context(), flash, genai.Text("hi"), nil)

			v := geminiguard.Classify(err)
			assert.Equal(t, tc.class, v.Class)
			assert.Equal(t, geminiguard.ScopeModel, v.Scope)
			assert.Equal(t, tc.after, v.RetryAfter)
			assert.Equal(t, 0, srv.Total(flash))
		})
	}
}

func TestChaosOverloadedFailsOverThroughTheChain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Chaos in front of the whole API: every generate request of every
		// model draws. A fifth of them get a 503; retries and the cascade answer.
		srv := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: lite})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, lite),
			geminiguard.WithHTTPClient(&http.Client{Transport: chaosTransport(t, srv, geminitest.ChaosConfig{Overloaded: 0.2, Seed: 7})}))
		defer c.Close()

		attempts := 0
		for range 20 {
			resp, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.NotEmpty(t, resp.Text())
			attempts += len(rec.Attempts)
		}
		assert.Greater(t, attempts, 20, "chaos answered some attempts with a 503")
		assert.Equal(t, 20, srv.Total(flash)+srv.Total(lite), "the 503s never reached the API")
	})
}

func TestChaosCutStreamsResumeToTheWholeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Chunks: 6, ChunkInterval: 50 * time.Millisecond})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithStreamResume(true),
			geminiguard.WithHTTPClient(&http.Client{Transport: chaosTransport(t, srv, geminitest.ChaosConfig{CutStream: 0.5, Seed: 3})}))
		defer c.Close()

		for range 20 {
			text, _, err := streamed(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, srv.FullText(flash), text, "no character lost or repeated")
		}
		assert.Greater(t, srv.Hits(flash, geminitest.VerbStream), 20, "chaos cut streams, and resumes healed them")
	})
}
