package geminiguard_test

import (
	"context"
	"fmt"
	"strings"
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

func TestDailyQuotaExhaustedPrimaryIsLeftAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: 2 * time.Second, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.DailyQuota}, P: 1}}},
			geminitest.Model{Name: flash, Latency: 800 * time.Millisecond},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash))

		for i := range 25 {
			start := time.Now()
			resp, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, flash, rec.Model)
			assert.Equal(t, srv.FullText(flash), resp.Text())
			if i > 0 {
				assert.Equal(t, 800*time.Millisecond, time.Since(start), "call %d costs the secondary's own latency", i)
			}
		}
		assert.Equal(t, 1, srv.Total(pro), "the exhausted primary hears one request, not 25")
		assert.Equal(t, 25, srv.Total(flash))
		st := c.Stats()
		assert.Equal(t, geminiguard.ClassDailyQuota, st.Models[0].CoolDownReason)
		assert.False(t, st.Models[0].CoolDownUntil.IsZero())
	})
}

func TestBreakerOpensProbesAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: time.Second, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}},
			geminitest.Model{Name: flash, Latency: 800 * time.Millisecond},
		)
		changes := &stateChanges{}
		hooks := changes.hooks()
		logs := &logBuffer{}
		c := newClient(t, srv, logs, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(hooks),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 3, OpenFor: 30 * time.Second, MinOpenFor: 30 * time.Second, HalfOpenProbes: 1}))

		for range 3 { // each call: one failed request to pro, then flash answers
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, flash, rec.Model)
		}
		require.Equal(t, 3, srv.Total(pro))
		assert.Equal(t, geminiguard.StateOpen, c.Stats().Models[0].State)

		for range 10 { // open: pro hears nothing, flash answers with no added delay
			start := time.Now()
			_, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.Equal(t, flash, rec.Model)
			assert.Equal(t, 800*time.Millisecond, time.Since(start))
		}
		assert.Equal(t, 3, srv.Total(pro))

		time.Sleep(30 * time.Second)
		srv.SetModel(geminitest.Model{Name: pro, Latency: time.Second}) // pro recovers
		var wg sync.WaitGroup
		for range 5 { // half-open: one probe among five concurrent calls
			wg.Go(func() {
				_, _, err := ask(t.Context(), c, "")
				assert.NoError(t, err)
			})
		}
		wg.Wait()
		assert.Equal(t, 4, srv.Total(pro), "exactly one probe request")
		assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State, "the probe's success closed the breaker")
		assert.Equal(t, []string{pro + ":open", pro + ":half-open", pro + ":closed"}, changes.get())
		assert.Contains(t, logs.String(), `"level":"INFO","msg":"geminiguard: breaker state changed","model":"`+pro+`","endpoint":"generate","from":"closed","to":"open"`)
		assert.Contains(t, logs.String(), `"level":"DEBUG","msg":"geminiguard: attempt"`)
		assert.NotContains(t, logs.String(), "Say hi", "never a prompt in the log")
		requireNoKey(t, logs.String())
	})
}

func TestLimitsKeepUnderTheServerQuota(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: time.Second, Quota: geminitest.Quota{RPM: 60}},
			geminitest.Model{Name: flash, Latency: 800 * time.Millisecond},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithLimits(pro, geminiguard.Limits{RPM: 60}))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()

		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() {
				_, _, err := ask(ctx, c, "")
				assert.NoError(t, err)
			})
		}
		wg.Wait()

		reqs := srv.Requests(pro)
		for i := range reqs {
			n := 0
			for j := i; j < len(reqs) && reqs[j].At.Sub(reqs[i].At) < time.Minute; j++ {
				n++
			}
			require.LessOrEqual(t, n, 48, "requests to %s in the minute from %v", pro, reqs[i].At)
		}
		assert.Zero(t, c.Stats().Models[0].Failures[geminiguard.ClassRateLimit], "the fake never answered 429")
		assert.Positive(t, len(reqs))
	})
}

func TestSpendCapStopsEverything(t *testing.T) {
	for _, withFallback := range []bool{false, true} {
		t.Run(map[bool]string{false: "no fallback", true: "fallback"}[withFallback], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(
					geminitest.Model{Name: pro, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.SpendCap}, P: 1}}},
					geminitest.Model{Name: flash},
				)
				opts := []geminiguard.Option{geminiguard.WithCascade(pro, flash)}
				if withFallback {
					opts = append(opts, geminiguard.WithFallback(geminiguard.TextFallback("We are busy, try later.")))
				}
				c := newClient(t, srv, nil, opts...)

				for range 5 {
					resp, rec, err := ask(t.Context(), c, "")
					if withFallback {
						require.NoError(t, err)
						assert.True(t, rec.Fallback)
						assert.Equal(t, "We are busy, try later.", resp.Text())
						assert.Equal(t, geminiguard.FallbackModelVersion, resp.ModelVersion)
					} else {
						assert.ErrorIs(t, err, geminiguard.ErrQuotaExhausted)
						assert.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
					}
				}
				assert.Equal(t, 1, srv.Total(pro), "one request in total")
				assert.Zero(t, srv.Total(flash), "no other model is called under a spent project")
				if withFallback {
					st := c.Stats()
					assert.Equal(t, 1.0, st.FallbackRate)
					assert.Equal(t, int64(5), st.Fallbacks)
				}
			})
		})
	}
}

func TestRetiredPrimary(t *testing.T) {
	t.Run("startup check names it", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: "gemini-1.5-pro", Unlisted: true}, geminitest.Model{Name: flash})
			_, err := geminiguard.New(t.Context(), geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
				geminiguard.WithHTTPClient(srv.HTTPClient()), geminiguard.WithCascade("gemini-1.5-pro", flash))
			require.ErrorIs(t, err, geminiguard.ErrModelNotFound)
			assert.Contains(t, err.Error(), "gemini-1.5-pro")
			assert.NotContains(t, err.Error(), flash+",")
			assert.Zero(t, srv.Total("gemini-1.5-pro"))
		})
	})
	t.Run("check off: one 404, then never again", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			srv := geminitest.New(geminitest.Model{Name: "gemini-1.5-pro", Unlisted: true}, geminitest.Model{Name: flash})
			c := newClient(t, srv, nil, geminiguard.WithCascade("gemini-1.5-pro", flash), geminiguard.WithStartupCheck(false))
			for range 10 {
				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err)
				assert.Equal(t, flash, rec.Model)
			}
			assert.Equal(t, 1, srv.Total("gemini-1.5-pro"))
			assert.Equal(t, geminiguard.ClassNotFound, c.Stats().Models[0].CoolDownReason)
		})
	})
}

func TestFallbackAndStats(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}
		srv := geminitest.New(geminitest.Model{Name: pro, Faults: down}, geminitest.Model{Name: flash, Faults: down})
		var fallbacks int
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 2}),
			geminiguard.WithHooks(geminiguard.Hooks{OnFallback: func(context.Context, geminiguard.FallbackEvent) { fallbacks++ }}),
			geminiguard.WithFallback(func(_ context.Context, req geminiguard.FallbackRequest) (*genai.GenerateContentResponse, error) {
				return geminiguard.TextFallback("cached answer")(t.Context(), req)
			}))

		for range 4 {
			resp, rec, err := ask(t.Context(), c, "")
			require.NoError(t, err)
			assert.True(t, rec.Fallback)
			assert.Equal(t, "cached answer", resp.Text())
		}
		st := c.Stats()
		assert.Equal(t, 4, fallbacks)
		assert.Equal(t, 1.0, st.FallbackRate)
		assert.Equal(t, geminiguard.StateOpen, st.Models[0].State)
		assert.Equal(t, geminiguard.StateOpen, st.Models[1].State)
		assert.Equal(t, 2, srv.Total(pro), "two failures opened the breaker; then no more requests")
		assert.Equal(t, int64(2), st.Models[0].Failures[geminiguard.ClassOverloaded])
	})
}

func TestEmbeddingsHaveTheirOwnBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const embedder = "gemini-embedding-001"
		srv := geminitest.New(geminitest.Model{Name: embedder,
			Script: []geminitest.Step{{Fault: geminitest.Overloaded}, {}, {Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: flash})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash, embedder),
			geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 2}),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 2, DeadAfter: -1}))
		cfg := &genai.EmbedContentConfig{OutputDimensionality: genai.Ptr[int32](3)}

		resp, err := c.EmbedContent(t.Context(), embedder, genai.Text("a"), cfg)
		require.NoError(t, err, "503 then a retry that answers")
		require.Len(t, resp.Embeddings, 1)
		assert.Equal(t, 2, srv.Hits(embedder, geminitest.VerbEmbed))

		_, err = c.EmbedContent(t.Context(), embedder, genai.Text("b"), cfg)
		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed, "two 503s: no other model is tried for embeddings")
		assert.Equal(t, 4, srv.Hits(embedder, geminitest.VerbEmbed))
		assert.Zero(t, srv.Total(flash), "vectors of another model would not fit")

		st := c.Stats().Models[1]
		assert.Equal(t, geminiguard.StateOpen, st.EmbedState)
		assert.Equal(t, geminiguard.StateClosed, st.State, "the model's generation breaker is untouched")
		_, err = c.EmbedContent(t.Context(), embedder, genai.Text("c"), cfg)
		assert.ErrorIs(t, err, geminiguard.ErrCircuitOpen)
		assert.Equal(t, 4, srv.Hits(embedder, geminitest.VerbEmbed), "refused locally while open")
	})
}

func TestUnconfiguredClientLearnsTheQuotaFromA429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(geminitest.Model{Name: flash, Latency: 100 * time.Millisecond, Quota: geminitest.Quota{RPM: 10}})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash)) // no WithLimits

		for i := range 30 {
			_, _, err := ask(t.Context(), c, "")
			require.NoError(t, err, "call %d", i)
		}

		st := c.Stats().Models[0]
		assert.Equal(t, int64(1), st.Failures[geminiguard.ClassRateLimit], "one 429 teaches the limit (quotaValue 10); the client paces by it after")
		assert.Equal(t, 31, srv.Total(flash))
	})
}

func TestRoundsComeBackToThePrimary(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: time.Second, Script: []geminitest.Step{{Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}}},
			geminitest.Model{Name: flash, Latency: time.Second, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Internal}, P: 1}}},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash),
			geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: time.Second, MaxDelay: 4 * time.Second}))

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, pro, rec.Model, "after a pause the call returns to the primary, which answers")
		var order []string
		for _, a := range rec.Attempts {
			order = append(order, a.Model)
		}
		assert.Equal(t, []string{pro, flash, pro, flash, pro}, order, "each round walks the cascade: no model is retried while another could answer")
		assert.Zero(t, rec.Attempts[1].Delay, "moving on costs no wait")
		waits := rec.Attempts[2].Delay + rec.Attempts[4].Delay
		assert.Positive(t, rec.Attempts[2].Delay)
		assert.LessOrEqual(t, rec.Attempts[2].Delay, time.Second, "full jitter: first round pause in [0, 1s)")
		assert.LessOrEqual(t, rec.Attempts[4].Delay, 2*time.Second, "second in [0, 2s)")
		assert.Equal(t, time.Second+waits, time.Since(start), "errors answer at once; the answer takes 1s")
		assert.Equal(t, 3, srv.Total(pro))
		assert.Equal(t, 2, srv.Total(flash))
	})
}

// TestRoundGoesLastToTheModelThatHungBeforeItLearned: pro hangs on every
// request from the Client's start, and flash answers 503 to the call's
// first request and then answers. Pro's attempt times out after a minute
// (it never answered: nothing else bounds it), flash fails at once, and
// the next round goes first to flash, which answers: the call takes the
// minute and the pause. Before, the round walked the cascade again and
// waited pro's minute a second time (the hang family's 1500106: calls of
// two minutes).
func TestRoundGoesLastToTheModelThatHungBeforeItLearned(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := geminitest.New(
			geminitest.Model{Name: pro, Latency: 10 * time.Minute},
			geminitest.Model{Name: flash, Latency: time.Second, Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
		)
		c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()))

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.NoError(t, err)
		assert.Equal(t, flash, rec.Model)
		var order []string
		for _, a := range rec.Attempts {
			order = append(order, a.Model)
		}
		assert.Equal(t, []string{pro, flash, flash}, order, "the model that hung is asked again only after the one that failed fast")
		assert.Less(t, time.Since(start), 65*time.Second, "pro's minute waited once")
		assert.Equal(t, 1, srv.Total(pro))
	})
}

// Every model open: a refused call becomes an early probe once per
// AllOpenProbeEvery, and the outage's end is found within about that long
// instead of within OpenFor.
func TestEveryModelOpenProbesEarly(t *testing.T) {
	for _, tt := range []struct {
		name          string
		every         time.Duration
		outageProbes  []string      // models probed during the 10s of outage, in order
		firstAnswerIn time.Duration // from the recovery to the first answer
	}{
		{"default", 0, []string{pro, flash, pro, flash}, time.Second}, // the next probe is due as the outage ends: pro answers in 1s
		{"off", -1, nil, 21 * time.Second},                            // pro opened at 0.9s: half-open at 30.9s, probed by the call at 31.2s
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				down := []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded, Latency: 300 * time.Millisecond}, P: 1}}
				srv := geminitest.New(
					geminitest.Model{Name: pro, Latency: time.Second, Faults: down},
					geminitest.Model{Name: flash, Latency: 500 * time.Millisecond, Faults: down})
				changes := &stateChanges{}
				hooks := changes.hooks()
				logs := &logBuffer{}
				c := newClient(t, srv, logs, geminiguard.WithCascade(pro, flash), geminiguard.WithHooks(hooks),
					geminiguard.WithRetry(geminiguard.RetryPolicy{MaxAttempts: 1}),
					geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 2, AllOpenProbeEvery: tt.every, MinOpenFor: 30 * time.Second}))
				for range 2 {
					_, _, err := ask(t.Context(), c, "")
					require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
				}
				require.Equal(t, []string{pro + ":open", flash + ":open"}, changes.get())
				sent := func() int { return srv.Total(pro) + srv.Total(flash) }
				require.Equal(t, 4, sent())

				// 10s of outage, a call every 0.5s: refused at once, but for
				// the early probes, one every 2s once a model has been open 2s.
				var probed []string
				for range 20 {
					before, start := sent(), time.Now()
					_, rec, err := ask(t.Context(), c, "")
					require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
					if sent() == before {
						assert.Zero(t, time.Since(start), "refused at once")
						assert.ErrorIs(t, err, geminiguard.ErrCircuitOpen)
					} else {
						assert.Equal(t, 300*time.Millisecond, time.Since(start), "a probe: one request")
						probed = append(probed, rec.Attempts[len(rec.Attempts)-1].Model)
					}
					time.Sleep(500*time.Millisecond - time.Since(start))
				}
				assert.Equal(t, tt.outageProbes, probed, "the model open the longest goes first")
				probeLog := `"level":"INFO","msg":"geminiguard: no model left but open ones: probing one early","model":"` + pro + `","endpoint":"generate"`
				assert.Equal(t, tt.every == 0, strings.Contains(logs.String(), probeLog), "an early probe is logged")

				// Both recover; calls go on every 0.5s.
				srv.SetModel(geminitest.Model{Name: pro, Latency: time.Second})
				srv.SetModel(geminitest.Model{Name: flash, Latency: 500 * time.Millisecond})
				recovered := time.Now()
				for {
					start := time.Now()
					_, rec, err := ask(t.Context(), c, "")
					if err == nil {
						assert.Equal(t, tt.firstAnswerIn, time.Since(recovered))
						if tt.every == 0 {
							assert.Equal(t, pro, rec.Model, "pro was open the longest")
						}
						break
					}
					time.Sleep(500*time.Millisecond - time.Since(start))
				}
				if tt.every == 0 {
					_, rec, err := ask(t.Context(), c, "")
					require.NoError(t, err)
					assert.Equal(t, pro, rec.Model)
					got := changes.get()
					assert.Equal(t, []string{pro + ":closed", flash + ":half-open"}, got[len(got)-2:],
						"the probe's success closed pro and sent flash half-open: they went down together")
				}
			})
		})
	}
}

// A failure that opens the breaker ends the model's retries at once: the
// retry would only be refused after its backoff.
func TestFailureThatOpensTheBreakerIsNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		down := []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded, Latency: 300 * time.Millisecond}, P: 1}}
		srv := geminitest.New(geminitest.Model{Name: flash, Faults: down})
		c := newClient(t, srv, nil, geminiguard.WithCascade(flash),
			geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 2}))

		start := time.Now()
		_, rec, err := ask(t.Context(), c, "")

		require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
		assert.Equal(t, 2, srv.Total(flash), "the second failure opened the breaker: no third attempt")
		require.Len(t, rec.Attempts, 2, "no refusal recorded after the breaker opened")
		assert.Equal(t, 600*time.Millisecond+rec.Attempts[1].Delay, time.Since(start), "two 0.3s attempts and the backoff between them: none after")
	})
}

// A call that failed on every model it could use probes an open one rather
// than give up.
func TestCallWithNothingLeftProbesTheOpenModel(t *testing.T) {
	for _, every := range []time.Duration{0, -1} {
		t.Run(fmt.Sprint("AllOpenProbeEvery=", every), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				down := []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}
				srv := geminitest.New(geminitest.Model{Name: pro, Faults: down}, geminitest.Model{Name: flash})
				c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash),
					geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 4, AllOpenProbeEvery: every, MinOpenFor: 30 * time.Second}))
				for range 4 { // pro fails, flash answers; pro opens
					_, rec, err := ask(t.Context(), c, "")
					require.NoError(t, err)
					require.Equal(t, flash, rec.Model)
				}
				require.Equal(t, geminiguard.StateOpen, c.Stats().Models[0].State)

				time.Sleep(5 * time.Second)
				srv.SetModel(geminitest.Model{Name: pro})
				srv.SetModel(geminitest.Model{Name: flash, Script: []geminitest.Step{{Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}, {Fault: geminitest.Overloaded}}})
				_, rec, err := ask(t.Context(), c, "")

				assert.Equal(t, 4+4, srv.Total(flash), "flash failed its 4 attempts (and stays closed)")
				if every < 0 {
					require.ErrorIs(t, err, geminiguard.ErrAllModelsFailed)
					assert.Equal(t, 4, srv.Total(pro), "pro stays open until OpenFor")
					return
				}
				require.NoError(t, err)
				assert.Equal(t, pro, rec.Model, "the open model, probed early, answered")
				assert.Equal(t, 5, srv.Total(pro))
				assert.Equal(t, geminiguard.StateClosed, c.Stats().Models[0].State)
			})
		})
	}
}

// TestLaterRoundGoesFirstToTheModelLikeliestToAnswer: pro has failed its
// last three requests (a bad spell), flash answered the three calls they
// moved on to; the fourth call meets pro's 503 and, this once, flash's.
// Its next round is paid from the retry budget, model by model. When the
// budget holds one retry (a cluster of such calls emptied the default one,
// BENCHMARKS.md), the round goes first to flash, which answers most of its
// requests, and flash answers; before, it went to pro, in its bad spell,
// which failed, and the budget refused flash: the call failed. When the
// budget pays for the whole round, it keeps the cascade's order: pro
// first, whose answer is the better one.
func TestLaterRoundGoesFirstToTheModelLikeliestToAnswer(t *testing.T) {
	for _, tt := range []struct {
		name   string
		budget geminiguard.RetryPolicy
		order  []string
	}{
		{"one retry left", geminiguard.RetryPolicy{BudgetRatio: 0.001, BudgetMinPerSecond: 0.1}, []string{pro, flash, flash}},
		{"the default budget", geminiguard.RetryPolicy{}, []string{pro, flash, pro, flash}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := geminitest.New(
					geminitest.Model{Name: pro, Latency: time.Second, Faults: []geminitest.Chance{{Step: geminitest.Step{Fault: geminitest.Overloaded}, P: 1}}},
					geminitest.Model{Name: flash, Latency: time.Second, Script: []geminitest.Step{{}, {}, {}, {Fault: geminitest.Overloaded}}},
				)
				c := newClient(t, srv, nil, geminiguard.WithCascade(pro, flash), geminiguard.WithJitterSource(seeded()),
					geminiguard.WithBreaker(geminiguard.BreakerSettings{FailureThreshold: 10}), geminiguard.WithRetry(tt.budget))
				for range 3 {
					_, rec, err := ask(t.Context(), c, "")
					require.NoError(t, err)
					require.Equal(t, flash, rec.Model)
				}

				_, rec, err := ask(t.Context(), c, "")
				require.NoError(t, err, "the round's retries reach the model that answers")
				assert.Equal(t, flash, rec.Model)
				var order []string
				for _, a := range rec.Attempts {
					order = append(order, a.Model)
				}
				assert.Equal(t, tt.order, order)
			})
		})
	}
}
