package geminiguard_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/internal/fakegemini"
)

// A 503 from the primary is retried after a jittered backoff; a per-day 429
// sends the next calls to the secondary until the quota resets.
func ExampleClient_GenerateContent() {
	fake := fakegemini.New(
		fakegemini.Model{Name: "gemini-3.5-flash", Script: []fakegemini.Step{{Fault: fakegemini.Overloaded}, {}, {Fault: fakegemini.DailyQuota}}},
		fakegemini.Model{Name: "gemini-2.5-flash-lite"},
	)
	ctx := context.Background()
	c, err := geminiguard.New(ctx,
		geminiguard.WithAPIKey(fakegemini.Key), geminiguard.WithBaseURL(fakegemini.BaseURL), geminiguard.WithHTTPClient(fake.HTTPClient()),
		geminiguard.WithCascade("gemini-3.5-flash", "gemini-2.5-flash-lite"),
		geminiguard.WithRetry(geminiguard.RetryPolicy{BaseDelay: time.Millisecond}))
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		var rec geminiguard.CallRecord
		_, err := c.GenerateContent(geminiguard.WithCallRecord(ctx, &rec), "", genai.Text("Say hi"), nil)
		fmt.Printf("answered by %s after %d attempt(s), err=%v\n", rec.Model, len(rec.Attempts), err)
	}
	// Output:
	// answered by gemini-3.5-flash after 2 attempt(s), err=<nil>
	// answered by gemini-2.5-flash-lite after 2 attempt(s), err=<nil>
	// answered by gemini-2.5-flash-lite after 2 attempt(s), err=<nil>
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
	fmt.Println(v.Class, v.Retryable, v.CoolDown, v.RetryAfter, v.QuotaLimit)
	fmt.Println(geminiguard.Classify(context.Canceled).Class, geminiguard.Classify(errors.New("connection reset by peer")).Retryable)
	// Output:
	// daily_quota false until_midnight 43s 250
	// canceled true
}
