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

// A tool loop's fake: Decide calls the tool until its response is in the
// request, then answers. The model checks thought signatures as Gemini 3
// does, so the loop sends back the model turn as it came.
func ExampleModel_decide() {
	fake := geminitest.New(geminitest.Model{
		Name:              "gemini-3-flash-preview",
		RequireSignatures: true,
		Decide: func(r geminitest.Request, _ int) geminitest.Step {
			if last := r.Contents[len(r.Contents)-1]; last.Parts[0].FunctionResponse != nil {
				return geminitest.Step{Text: "It is sunny in " + last.Parts[0].FunctionResponse.Response["city"].(string) + "."}
			}
			return geminitest.Step{Parts: []*genai.Part{genai.NewPartFromFunctionCall("get_weather", map[string]any{"city": "Paris"})}}
		},
	})
	ctx := context.Background()
	client, err := genai.NewClient(ctx, fake.ClientConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	history := genai.Text("Weather in Paris?")
	for {
		resp, err := client.Models.GenerateContent(ctx, "gemini-3-flash-preview", history, nil)
		if err != nil {
			fmt.Println(err)
			return
		}
		calls := resp.FunctionCalls()
		if len(calls) == 0 {
			fmt.Println(resp.Text())
			return
		}
		fmt.Println("call:", calls[0].Name, calls[0].Args["city"])
		history = append(history, resp.Candidates[0].Content,
			genai.NewContentFromFunctionResponse(calls[0].Name, map[string]any{"city": calls[0].Args["city"]}, genai.RoleUser))
	}
	// Output:
	// call: get_weather Paris
	// It is sunny in Paris.
}
