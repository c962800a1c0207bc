package geminiguard_test

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// A 503 from the primary sends the call to the secondary at once; a per-day
// 429 leaves the primary alone until its quota resets at midnight
// America/Los_Angeles.
func ExampleClient_GenerateContent() {
	fake := geminitest.New(
		geminitest.Model{Name: "gemini-3.5-flash", Script: []geminitest.Step{{Fault: geminitest.Overloaded}, {}, {Fault: geminitest.DailyQuota}}},
		geminitest.Model{Name: "gemini-2.5-flash-lite"},
	)
	ctx := context.Background()
	c, err := geminiguard.New(ctx,
		geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL), geminiguard.WithHTTPClient(fake.HTTPClient()),
		geminiguard.WithCascade("gemini-3.5-flash", "gemini-2.5-flash-lite"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 4 {
		var rec geminiguard.CallRecord
		_, err := c.GenerateContent(geminiguard.RecordCall(ctx, &rec), "", genai.Text("Say hi"), nil)
		first := rec.Attempts[0]
		fmt.Printf("%s answered; %s first: %s\n", rec.Model, first.Model, geminiguard.Classify(first.Err).Class)
		if err != nil {
			fmt.Println(err)
		}
	}
	fmt.Println("requests to the primary:", fake.Total("gemini-3.5-flash"))
	// Output:
	// gemini-2.5-flash-lite answered; gemini-3.5-flash first: overloaded
	// gemini-3.5-flash answered; gemini-3.5-flash first: none
	// gemini-2.5-flash-lite answered; gemini-3.5-flash first: daily_quota
	// gemini-2.5-flash-lite answered; gemini-3.5-flash first: circuit_open
	// requests to the primary: 3
}

// Classify tells a per-day quota (waiting a minute will not help) from a
// per-minute one, even when both carry a RetryInfo delay.
func ExampleClassify() {
	daily := genai.APIError{Code: 429, Status: "RESOURCE_EXHAUSTED", Message: "You exceeded your current quota.",
		Details: []map[string]any{
			{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": []any{map[string]any{
				"quotaId": "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "quotaValue": "250"}}},
			{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "43s"},
		}}
	v := geminiguard.Classify(fmt.Errorf("calling the API: %w", daily))
	fmt.Println(v.Class, v.Retryable, v.Scope, v.RetryAfter)
	fmt.Println(geminiguard.Classify(context.Canceled).Class, geminiguard.Classify(errors.New("connection reset by peer")).Retryable)
	// Output:
	// daily_quota false model 43s
	// canceled true
}

// A caller that retries a call with the same idempotency key gets the first
// call's answer again, and Gemini is not asked (nor paid) twice.
func ExampleIdempotent() {
	fake := geminitest.New(geminitest.Model{Name: "gemini-2.5-flash", Text: "Your order ships Monday."})
	ctx := context.Background()
	c, err := geminiguard.New(ctx,
		geminiguard.WithAPIKey(geminitest.Key), geminiguard.WithBaseURL(geminitest.BaseURL), geminiguard.WithHTTPClient(fake.HTTPClient()),
		geminiguard.WithCascade("gemini-2.5-flash"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		var rec geminiguard.CallRecord
		call := geminiguard.RecordCall(geminiguard.Idempotent(ctx, "order-42/summary"), &rec)
		resp, err := c.GenerateContent(call, "", genai.Text("When does order 42 ship?"), nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%q replayed: %v\n", resp.Text(), rec.Replayed)
	}
	fmt.Println("requests:", fake.Hits("gemini-2.5-flash", geminitest.VerbGenerate))
	// Output:
	// "Your order ships Monday." replayed: false
	// "Your order ships Monday." replayed: true
	// requests: 1
}
