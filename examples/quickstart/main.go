// Command quickstart sends a few prompts through geminiguard and prints, for
// each call, which model answered, after how many attempts and waits, and why.
//
// With GEMINI_API_KEY set it talks to the real Gemini API. Without it, it
// runs against the embedded fake Gemini with injected faults: a 503
// brownout, a per-minute 429, a blocked prompt, an exhausted daily quota and
// a stream cut halfway.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

const (
	primary   = "gemini-3.5-flash"
	secondary = "gemini-2.5-flash-lite"
)

func main() {
	log.SetOutput(io.Discard) // the SDK log.Printf's every stream cut; we report them ourselves
	ctx := context.Background()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

// call is one demo call: a title and, against the fake, the answers the
// primary and the secondary give (one step per upstream request).
type call struct {
	title              string
	prompt             string
	primary, secondary []geminitest.Step
	stream             bool
	pause              time.Duration // wait after the call (lets a per-minute quota refill)
}

var calls = []call{
	{title: "a 503 on the primary: the secondary answers at once", prompt: "Name a prime number.",
		primary: []geminitest.Step{{Fault: geminitest.Overloaded}}},
	{title: "503s on both models: after a jittered pause the call comes back to the primary", prompt: "Name a planet.",
		primary:   []geminitest.Step{{Fault: geminitest.Overloaded}},
		secondary: []geminitest.Step{{Fault: geminitest.Overloaded}}},
	{title: "per-minute quota: 429 with RetryInfo 2s", prompt: "Name a colour.",
		primary: []geminitest.Step{{Fault: geminitest.RateLimitMinute, RetryDelay: 2 * time.Second}}, pause: 2 * time.Second},
	{title: "blocked prompt (a quiet 200)", prompt: "Something unsafe.",
		primary: []geminitest.Step{{Fault: geminitest.PromptBlocked}}},
	{title: "stream cut after 2 chunks", prompt: "Tell a short story.", stream: true,
		primary: []geminitest.Step{{Fault: geminitest.StreamCutBetween, CutAfter: 2}}},
	{title: "daily quota exhausted", prompt: "Name a river.",
		primary: []geminitest.Step{{Fault: geminitest.DailyQuota}}},
	{title: "the next call, same day", prompt: "Name a mountain."},
}

func run(ctx context.Context) error {
	opts := []geminiguard.Option{geminiguard.WithStreamResume(true)}
	var fake *geminitest.Server
	if key := os.Getenv("GEMINI_API_KEY"); key != "" {
		fmt.Println("GEMINI_API_KEY is set: calling the real Gemini API.")
		opts = append(opts, geminiguard.WithAPIKey(key), geminiguard.WithCascade(live()...))
	} else {
		fmt.Println("No GEMINI_API_KEY: calling the embedded fake Gemini, with injected faults.")
		fake = geminitest.New(
			// A paid-tier primary: its 429s state tier-1 limits, which the
			// Client learns and paces by.
			geminitest.Model{Name: primary, Latency: 300 * time.Millisecond, ChunkInterval: 50 * time.Millisecond, Quota: geminitest.Quota{PaidTier: true}},
			geminitest.Model{Name: secondary, Latency: 200 * time.Millisecond, ChunkInterval: 50 * time.Millisecond},
		)
		opts = append(opts, geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL),
			geminiguard.WithHTTPClient(fake.HTTPClient()), geminiguard.WithCascade(primary, secondary),
			geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: 300 * time.Millisecond}))
	}
	c, err := geminiguard.New(ctx, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	for i, cl := range calls {
		if fake == nil {
			cl.title = "live call" // the injected faults exist only in the fake
		} else {
			fake.Script(primary, cl.primary...)
			fake.Script(secondary, cl.secondary...)
		}
		fmt.Printf("\n%d. %s\n", i+1, cl.title)
		var rec geminiguard.CallRecord
		cctx := geminiguard.RecordCall(ctx, &rec)
		text, err := ask(cctx, c, cl)
		report(text, err, rec)
		if fake != nil && cl.pause > 0 {
			fmt.Printf("   (waiting %v for the per-minute quota to refill)\n", cl.pause)
			time.Sleep(cl.pause)
		}
	}
	st := c.Stats()
	fmt.Printf("\n%d calls, success rate %.0f%%, p50 %v, p95 %v\n", st.Calls, 100*st.SuccessRate, st.LatencyP50.Round(time.Millisecond), st.LatencyP95.Round(time.Millisecond))
	for _, m := range st.Models {
		fmt.Printf("  %-24s breaker %-9s requests %d", m.Model, m.State, m.Requests)
		if !m.CoolDownUntil.IsZero() {
			fmt.Printf("  cooling down (%s) until %s", m.CoolDownReason, m.CoolDownUntil.Local().Format(time.DateTime))
		}
		fmt.Println()
	}
	return nil
}

// live returns the cascade to use against the real API.
func live() []string {
	if m := os.Getenv("GEMINIGUARD_CASCADE"); m != "" {
		return strings.Split(m, ",")
	}
	return []string{"gemini-2.5-flash", "gemini-2.5-flash-lite"}
}

func ask(ctx context.Context, c *geminiguard.Client, cl call) (string, error) {
	if !cl.stream {
		resp, err := c.GenerateContent(ctx, "", genai.Text(cl.prompt), nil)
		if err != nil {
			return "", err
		}
		return resp.Text(), nil
	}
	var b strings.Builder
	for resp, err := range c.GenerateContentStream(ctx, "", genai.Text(cl.prompt), nil) {
		if err != nil {
			return b.String(), err
		}
		b.WriteString(resp.Text())
	}
	return b.String(), nil
}

func report(text string, err error, rec geminiguard.CallRecord) {
	for _, a := range rec.Attempts {
		what := "answered"
		var cooling *geminiguard.CoolingError
		switch {
		case a.Skipped && errors.As(a.Err, &cooling):
			what = fmt.Sprintf("skipped: cooling down after %s", cooling.Reason)
			if left := time.Until(cooling.Until); left < 24*time.Hour {
				what += fmt.Sprintf(" for %v more", left.Round(time.Second))
			} else {
				what += " until midnight America/Los_Angeles"
			}
		case a.Skipped:
			what = "skipped: " + geminiguard.Classify(a.Err).Class.String()
		case a.Err != nil:
			v := geminiguard.Classify(a.Err)
			what = "failed: " + v.Class.String()
			if v.RetryAfter > 0 {
				what += fmt.Sprintf(" (server says retry in %v)", v.RetryAfter)
			}
		}
		wait := ""
		if a.Delay > 0 {
			wait = fmt.Sprintf("after waiting %v, ", a.Delay.Round(time.Millisecond))
		}
		fmt.Printf("   - %s: %s%s\n", a.Model, wait, what)
	}
	if rec.Resumes > 0 {
		fmt.Printf("   (the stream was cut %d time(s) and resumed from the text received: nothing lost, nothing repeated)\n", rec.Resumes)
	}
	switch {
	case err == nil:
		fmt.Printf("   => %s answered in %v: %q\n", rec.Model, rec.Latency.Round(time.Millisecond), shorten(text))
	case errors.Is(err, geminiguard.ErrBlocked):
		fmt.Printf("   => not retried, blocked: %v\n", err)
	default:
		fmt.Printf("   => error (%s): %v\n", geminiguard.Classify(err).Class, err)
	}
}

func shorten(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 70 {
		return s[:67] + "..."
	}
	return s
}
