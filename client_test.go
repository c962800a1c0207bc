package geminiguard_test

import (
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

func TestNewRejectsBadOptions(t *testing.T) {
	_, err := newOffline(t, geminiguard.WithCascade(),
		geminiguard.WithHeadroom(1.5),
		geminiguard.WithTimeouts(time.Minute, 30*time.Second),
		geminiguard.WithLimits(flash, geminiguard.Limits{RPM: -1}),
		geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: -2}),
		geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: -1}),
		geminiguard.WithJitterSource(nil),
	)
	require.Error(t, err)
	for _, want := range []string{"WithCascade", "WithHeadroom", "WithTimeouts", "RPM", "MaxAttempts", "FailureThreshold", "WithJitterSource(nil)"} {
		assert.Contains(t, err.Error(), want)
	}
	requireNoKey(t, err.Error())
}

func TestCallerConfigIsNotMutated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash))
		system := &genai.Content{Parts: []*genai.Part{{Text: "be terse"}}} // no Role: the SDK would set one in place
		options := &genai.HTTPOptions{}                                    // no Headers: the SDK would fill them in place
		cfg := &genai.GenerateContentConfig{Temperature: genai.Ptr[float32](0.2), SystemInstruction: system, HTTPOptions: options}
		want, wantSystem, wantOptions := *cfg, *system, *options

		_, err := c.GenerateContent(t.Context(), "", genai.Text("hi"), cfg)

		require.NoError(t, err)
		assert.Equal(t, want, *cfg)
		assert.Equal(t, wantSystem, *system)
		assert.Equal(t, wantOptions, *options)
		assert.Contains(t, string(srv.Requests(flash)[0].Body), `"systemInstruction":{"parts":[{"text":"be terse"}],"role":"user"}`)
	})
}

func TestWrappedSDKClientDoesNotRetryBehindOurBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}})
		cfg := srv.ClientConfig()
		cfg.HTTPOptions.RetryOptions = &genai.HTTPRetryOptions{} // the SDK's own: 5 attempts per call
		sdk, err := genai.NewClient(t.Context(), cfg)
		require.NoError(t, err)
		c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 2}))
		require.NoError(t, err)

		_, err = c.GenerateContent(t.Context(), "", genai.Text("hi"), nil)

		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		assert.Equal(t, 2, srv.Hits(flash, geminitest.VerbGenerate), "our 2 attempts, not 2 × the SDK's 5")
	})
}

func TestExactTokenCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash), geminiguard.WithExactTokenCount(true),
			geminiguard.WithLimits(flash, geminiguard.Limits{TPM: 1_000_000}))

		for range 3 {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err)
		}

		assert.Equal(t, 3, srv.Hits(flash, geminitest.VerbCountTokens), "one countTokens per call, before sending it")
		assert.Equal(t, int64(3*2), c.Stats().Models[0].TokensUsed, `"Say hi" counts 2 tokens in the fake`)
	})
}

func TestWrappedSDKClientIsSafeForConcurrentCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const embedder = "gemini-embedding-001"
		srv := geminitest.New(geminitest.Model{Name: flash}, geminitest.Model{Name: embedder})
		cfg := srv.ClientConfig()
		cfg.HTTPOptions.RetryOptions = &genai.HTTPRetryOptions{}
		sdk, err := genai.NewClient(t.Context(), cfg)
		require.NoError(t, err)
		c, err := geminiguard.New(t.Context(), geminiguard.WithGenAIClient(sdk), geminiguard.WithCascade(flash))
		require.NoError(t, err)

		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				_, err := c.GenerateContent(t.Context(), "", genai.Text("hi"), nil)
				assert.NoError(t, err)
				_, err = c.EmbedContent(t.Context(), embedder, genai.Text("hi"), nil)
				assert.NoError(t, err)
			})
		}
		wg.Wait()

		assert.Equal(t, 8, srv.Hits(flash, geminitest.VerbGenerate), "one request per call, every call answered")
		assert.Equal(t, 8, srv.Hits(embedder, geminitest.VerbEmbed))
	})
}
