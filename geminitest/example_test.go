package geminitest_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
	"github.com/geminiguard/geminiguard/geminitest"
)

// A scripted 503, then success, through the raw SDK: the SDK returns the 503
// as the genai.APIError the real API gives, and the next call is answered.
func Example() {
	fake := geminitest.New(geminitest.Model{
		Name:   "gemini-2.5-flash",
		Text:   "Hi there.",
		Script: []geminitest.Step{{Fault: geminitest.Overloaded}}, // then success
	})
	ctx := context.Background()
	client, err := genai.NewClient(ctx, fake.ClientConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 2 {
		resp, err := client.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("Say hi"), nil)
		var apiErr genai.APIError
		if errors.As(err, &apiErr) {
			fmt.Println(apiErr.Code, apiErr.Status, apiErr.Message)
			continue
		}
		fmt.Println(resp.Text())
	}
	fmt.Println("requests:", fake.Hits("gemini-2.5-flash", geminitest.VerbGenerate))
	// Output:
	// 503 UNAVAILABLE The model is overloaded. Please try again later.
	// Hi there.
	// requests: 2
}

// An emulated quota of 2 requests per minute: the third request in the
// minute gets the real per-minute 429, with the quota it broke and how long
// to wait.
func ExampleQuota() {
	fake := geminitest.New(geminitest.Model{
		Name:  "gemini-2.5-flash",
		Quota: geminitest.Quota{RPM: 2},
	})
	ctx := context.Background()
	client, err := genai.NewClient(ctx, fake.ClientConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		_, err := client.Models.GenerateContent(ctx, "gemini-2.5-flash", genai.Text("Say hi"), nil)
		var apiErr genai.APIError
		if !errors.As(err, &apiErr) {
			fmt.Println("answered")
			continue
		}
		fmt.Println(apiErr.Code, apiErr.Status)
		for _, d := range apiErr.Details {
			switch d["@type"] {
			case "type.googleapis.com/google.rpc.QuotaFailure":
				v := d["violations"].([]any)[0].(map[string]any)
				fmt.Println("quota:", v["quotaId"], "limit", v["quotaValue"])
			case "type.googleapis.com/google.rpc.RetryInfo":
				fmt.Println("retry in:", d["retryDelay"])
			}
		}
	}
	// Output:
	// answered
	// answered
	// 429 RESOURCE_EXHAUSTED
	// quota: GenerateRequestsPerMinutePerProjectPerModel-FreeTier limit 2
	// retry in: 59s
}

// A geminiguard Client against the fake: the primary's 503 sends the call on
// to the secondary, and the caller gets an answer.
func Example_geminiguard() {
	fake := geminitest.New(
		geminitest.Model{Name: "gemini-2.5-flash", Script: []geminitest.Step{{Fault: geminitest.Overloaded}}},
		geminitest.Model{Name: "gemini-2.5-flash-lite", Text: "Hi from the secondary."},
	)
	ctx := context.Background()
	sdk, err := genai.NewClient(ctx, fake.ClientConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	client, err := geminiguard.New(ctx, geminiguard.WithGenAIClient(sdk),
		geminiguard.WithCascade("gemini-2.5-flash", "gemini-2.5-flash-lite"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()

	resp, err := client.GenerateContent(ctx, "", genai.Text("Say hi"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Text())
	fmt.Println("requests:", fake.Total("gemini-2.5-flash"), fake.Total("gemini-2.5-flash-lite"))
	// Output:
	// Hi from the secondary.
	// requests: 1 1
}

// Over loopback sockets with net/http/httptest: a stream cut after its first
// event, as the SDK reports it.
func ExampleClientConfigFor() {
	fake := geminitest.New(geminitest.Model{
		Name:   "gemini-2.5-flash",
		Text:   "One, two, three, four.",
		Script: []geminitest.Step{{Fault: geminitest.StreamCutBetween}},
	})
	srv := httptest.NewServer(fake)
	defer srv.Close()
	ctx := context.Background()
	client, err := genai.NewClient(ctx, geminitest.ClientConfigFor(srv))
	if err != nil {
		fmt.Println(err)
		return
	}
	for chunk, err := range client.Models.GenerateContentStream(ctx, "gemini-2.5-flash", genai.Text("Count"), nil) {
		if err != nil {
			fmt.Println("cut:", errors.Is(err, io.ErrUnexpectedEOF))
			break
		}
		fmt.Printf("%q\n", chunk.Text())
	}
	// Output:
	// "One, "
	// cut: true
}
