package geminitest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

const rehearsal = "I am rehearsing an outage"

// chaosClient returns an SDK client whose calls go through Chaos with c in
// front of fake, the stand-in for the real API.
func chaosClient(t *testing.T, fake *geminitest.Server, c geminitest.ChaosConfig) *genai.Client {
	t.Helper()
	rt, err := geminitest.Chaos(fake.Transport(), c)
	require.NoError(t, err)
	cfg := fake.ClientConfig()
	cfg.HTTPClient = &http.Client{Transport: rt}
	return newClient(t, cfg)
}

func TestChaosErrorFaultsAreTheRealBodiesAndNeverReachTheAPI(t *testing.T) {
	cases := []struct {
		name   string
		config geminitest.ChaosConfig
		code   int
		status string
		msg    string
		types  []string
		quota  map[string]string // quotaId → quotaValue of the QuotaFailure
		retry  string
	}{
		{"overloaded", geminitest.ChaosConfig{Overloaded: 1}, 503, "UNAVAILABLE",
			"The model is overloaded. Please try again later.", nil, nil, ""},
		{"rate limited", geminitest.ChaosConfig{RateLimited: 1}, 429, "RESOURCE_EXHAUSTED",
			"* Quota exceeded for metric: generativelanguage.googleapis.com/generate_requests_per_model, limit: 1000, model: " + flash,
			[]string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
			map[string]string{"GenerateRequestsPerMinutePerProjectPerModel": "1000"}, "7s"},
		{"daily quota", geminitest.ChaosConfig{DailyQuota: 1}, 429, "RESOURCE_EXHAUSTED",
			"* Quota exceeded for metric: generativelanguage.googleapis.com/generate_requests_per_model_per_day, limit: 10000, model: " + flash,
			[]string{"google.rpc.QuotaFailure", "google.rpc.Help", "google.rpc.RetryInfo"},
			map[string]string{"GenerateRequestsPerDayPerProjectPerModel": "10000"}, "43s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake := geminitest.New(geminitest.Model{Name: flash})
			tc.config.Enable = rehearsal
			client := chaosClient(t, fake, tc.config)

			_, err := client.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
			e := apiError(t, err)
			s := stream(t.Context(), client, flash, nil)
			se := apiError(t, s.err)

			assert.Equal(t, tc.code, e.Code)
			assert.Equal(t, tc.status, e.Status)
			assert.Contains(t, e.Message, tc.msg)
			assert.Equal(t, tc.types, detailTypes(e))
			if tc.quota != nil {
				assert.Equal(t, tc.quota, violations(t, e))
			}
			assert.Equal(t, tc.retry, retryDelay(e))
			assert.Equal(t, e, se, "a stream request gets the same answer")
			assert.Empty(t, s.chunks)
			assert.Equal(t, 0, fake.Total(flash), "the real API never saw the requests")
		})
	}
}

func TestChaosCutsAStreamAfterItsFirstEvent(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash, Chunks: 4})
	client := chaosClient(t, fake, geminitest.ChaosConfig{CutStream: 1, Enable: rehearsal})

	s := stream(t.Context(), client, flash, nil)

	require.ErrorIs(t, s.err, io.ErrUnexpectedEOF)
	require.Len(t, s.chunks, 1)
	assert.True(t, strings.HasPrefix(fake.FullText(flash), s.text()))
	assert.Less(t, len(s.text()), len(fake.FullText(flash)))
	assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbStream), "the cut stream came from the real API")
}

func TestChaosCutStreamLeavesUnaryCallsAlone(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash})
	client := chaosClient(t, fake, geminitest.ChaosConfig{CutStream: 1, Enable: rehearsal})

	resp, err := client.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)

	require.NoError(t, err)
	assert.Equal(t, fake.FullText(flash), resp.Text())
}

func TestChaosStallWaitsThenAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash})
		client := chaosClient(t, fake, geminitest.ChaosConfig{Stall: 1, StallFor: time.Minute, Enable: rehearsal})
		start := time.Now()

		resp, err := client.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)

		require.NoError(t, err)
		assert.Equal(t, fake.FullText(flash), resp.Text())
		assert.Equal(t, time.Minute, time.Since(start))
	})
}

func TestChaosStallEndsWithTheRequestsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := geminitest.New(geminitest.Model{Name: flash})
		client := chaosClient(t, fake, geminitest.ChaosConfig{Stall: 1, Enable: rehearsal}) // an hour
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()

		_, err := client.Models.GenerateContent(ctx, flash, prompt("hi"), nil)
		s := stream(ctx, client, flash, nil)

		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, s.err, context.DeadlineExceeded)
		assert.Equal(t, 3*time.Second, time.Since(start))
		assert.Equal(t, 0, fake.Total(flash), "a stalled request never reached the real API")
	})
}

func TestChaosNeverTouchesListOrCountTokens(t *testing.T) {
	fake := geminitest.New(geminitest.Model{Name: flash})
	client := chaosClient(t, fake, geminitest.ChaosConfig{Overloaded: 1, Enable: rehearsal})

	_, listErr := client.Models.List(t.Context(), nil)
	_, getErr := client.Models.Get(t.Context(), flash, nil)
	_, countErr := client.Models.CountTokens(t.Context(), flash, prompt("hi"), nil)

	require.NoError(t, listErr)
	require.NoError(t, getErr)
	require.NoError(t, countErr)
	assert.Equal(t, 1, fake.Hits(flash, geminitest.VerbCountTokens))
}

// raw sends a generate and a stream request with t and returns each status
// and body, byte for byte.
func raw(t *testing.T, rt http.RoundTripper) []string {
	t.Helper()
	var out []string
	for _, path := range []string{":generateContent", ":streamGenerateContent?alt=sse"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, geminitest.BaseURL+"/v1beta/models/"+flash+path,
			strings.NewReader(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}`))
		require.NoError(t, err)
		req.Header.Set("x-goog-api-key", geminitest.Key)
		resp, err := (&http.Client{Transport: rt}).Do(req)
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		out = append(out, resp.Status+" "+resp.Header.Get("Content-Type")+"\n"+string(b))
	}
	return out
}

func TestChaosAtRateZeroPassesEverythingThroughByteForByte(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		direct := raw(t, geminitest.New(geminitest.Model{Name: flash}).Transport())
		rt, err := geminitest.Chaos(geminitest.New(geminitest.Model{Name: flash}).Transport(), geminitest.ChaosConfig{Enable: rehearsal})
		require.NoError(t, err)

		through := raw(t, rt)

		require.Len(t, through, 2)
		assert.Equal(t, direct, through)
		assert.Contains(t, through[1], "data: ")
	})
}

func TestChaosDrawsAreSeededAndSafeForConcurrentUse(t *testing.T) {
	config := geminitest.ChaosConfig{Overloaded: 0.3, RateLimited: 0.2, Seed: 42, Enable: rehearsal}
	codes := func(concurrent bool) map[int]int {
		fake := geminitest.New(geminitest.Model{Name: flash})
		client := chaosClient(t, fake, config)
		var mu sync.Mutex
		got := map[int]int{}
		one := func() {
			_, err := client.Models.GenerateContent(t.Context(), flash, prompt("hi"), nil)
			code := 200
			if err != nil {
				code = apiError(t, err).Code
			}
			mu.Lock()
			defer mu.Unlock()
			got[code]++
		}
		var wg sync.WaitGroup
		for range 200 {
			if concurrent {
				wg.Go(one)
			} else {
				one()
			}
		}
		wg.Wait()
		assert.Equal(t, got[200], fake.Total(flash), "only the passed requests reached the API")
		return got
	}

	first, again, concurrent := codes(false), codes(false), codes(true)

	assert.Equal(t, first, again, "the same seed draws the same faults")
	assert.Equal(t, first, concurrent, "the same draws, in whatever order they arrive")
	assert.InDelta(t, 60, first[503], 20)
	assert.InDelta(t, 40, first[429], 20)
	assert.InDelta(t, 100, first[200], 25)
}

func TestChaosRefusesAConfigThatIsNotDeliberate(t *testing.T) {
	cases := []struct {
		name   string
		config geminitest.ChaosConfig
		field  string
	}{
		{"zero value", geminitest.ChaosConfig{}, "ChaosConfig.Enable"},
		{"no confirmation", geminitest.ChaosConfig{Overloaded: 0.1}, "ChaosConfig.Enable"},
		{"wrong confirmation", geminitest.ChaosConfig{Overloaded: 0.1, Enable: "yes"}, "ChaosConfig.Enable"},
		{"negative rate", geminitest.ChaosConfig{RateLimited: -0.1, Enable: rehearsal}, "ChaosConfig.RateLimited"},
		{"rate above 1", geminitest.ChaosConfig{DailyQuota: 1.5, Enable: rehearsal}, "ChaosConfig.DailyQuota"},
		{"NaN rate", geminitest.ChaosConfig{CutStream: math.NaN(), Enable: rehearsal}, "ChaosConfig.CutStream"},
		{"rates above 1 in all", geminitest.ChaosConfig{Overloaded: 0.6, Stall: 0.6, Enable: rehearsal}, "ChaosConfig rates sum to 1.2"},
		{"negative stall", geminitest.ChaosConfig{Stall: 0.1, StallFor: -time.Second, Enable: rehearsal}, "ChaosConfig.StallFor"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := geminitest.Chaos(nil, tc.config)

			require.Error(t, err)
			assert.Nil(t, rt)
			assert.Contains(t, err.Error(), tc.field)
			assert.True(t, strings.HasPrefix(err.Error(), "geminitest: "), err.Error())
		})
	}
}

// A staging client whose calls go through Chaos: on average a tenth of the
// requests get the real 503 and a twentieth the per-minute 429, the same ones
// on every run with the same seed. Here the fake stands in for the real API;
// in staging, pass http.DefaultTransport (or your own) as base and build the
// client from your staging key, the same way.
func ExampleChaos() {
	fake := geminitest.New(geminitest.Model{Name: "gemini-2.5-flash", Text: "Hi there."})
	chaos, err := geminitest.Chaos(fake.Transport(), geminitest.ChaosConfig{
		Overloaded:  0.1,
		RateLimited: 0.05,
		Seed:        1,
		Enable:      "I am rehearsing an outage", // typed out: chaos never turns on by accident
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := fake.ClientConfig() // in staging: &genai.ClientConfig{APIKey: stagingKey, Backend: genai.BackendGeminiAPI}
	cfg.HTTPClient = &http.Client{Transport: chaos}
	// With geminiguard: geminiguard.New(ctx, geminiguard.WithHTTPClient(&http.Client{Transport: chaos}), ...)
	ctx := context.Background()
	client, err := genai.NewClient(ctx, cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	codes := map[int]int{}
	for range 100 {
		_, err := client.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("Say hi"), nil)
		var apiErr genai.APIError
		switch {
		case errors.As(err, &apiErr):
			codes[apiErr.Code]++
		case err == nil:
			codes[200]++
		}
	}
	fmt.Println("status codes:", codes)
	fmt.Println("requests the API saw:", fake.Total("gemini-2.5-flash"))
	// Output:
	// status codes: map[200:75 429:7 503:18]
	// requests the API saw: 75
}

func TestChaosFaultsVertexAIPathsToo(t *testing.T) {
	rt, err := geminitest.Chaos(geminitest.New().Transport(), geminitest.ChaosConfig{Overloaded: 1, Enable: rehearsal})
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost,
		geminitest.BaseURL+"/v1beta1/projects/p/locations/us-central1/publishers/google/models/"+flash+":streamGenerateContent?alt=sse",
		strings.NewReader(`{}`))
	require.NoError(t, err)

	resp, err := rt.RoundTrip(req)

	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.JSONEq(t, `{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}`, string(b))
}
