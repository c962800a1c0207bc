// Package geminitest is an in-process fake of the Gemini API that the real
// genai SDK (google.golang.org/genai) talks to over HTTP. It speaks the wire
// protocol of research/gemini-wire.md: generateContent,
// streamGenerateContent?alt=sse, models list (paged) and get, countTokens and
// batchEmbedContents under /v1beta/models, with the real error bodies.
//
// Each model follows a script: per request, a Step says what happens —
// success, one of the error shapes the real API sends (quota 429s with
// QuotaFailure and RetryInfo, spend cap, 5xx, auth and region 4xx, retired
// model, non-JSON and JSON-array bodies, a connection dropped before the
// headers), a quiet 200 (blocked prompt, SAFETY finish, no parts, no
// candidates), or a broken stream (cut between or inside events, an error
// inside the 200, no finishReason, stalls). Steps come from Model.Script,
// then from seeded random Model.Faults, or from a Model.Decide func.
// Model.Quota emulates per-minute and per-day quotas. The server counts hits
// per model and verb and logs every generate and stream request, so a test
// can assert how many upstream requests a call made.
//
// Behind httptest, over real loopback (HTTP/1.1, or HTTP/2 with
// EnableHTTP2 and StartTLS):
//
//	fake := geminitest.New(geminitest.Model{Name: "gemini-2.5-flash"})
//	srv := httptest.NewServer(fake)
//	defer srv.Close()
//	client, err := genai.NewClient(ctx, &genai.ClientConfig{
//		APIKey:      geminitest.Key,
//		Backend:     genai.BackendGeminiAPI,
//		HTTPClient:  srv.Client(),
//		HTTPOptions: genai.HTTPOptions{BaseURL: srv.URL},
//	})
//
// In memory, without sockets, which also works inside a testing/synctest
// bubble (a socket inside a bubble stalls fake time). The server reads
// time.Now() and waits on timers, so in a bubble latencies, stalls and quota
// windows all run in fake time:
//
//	synctest.Test(t, func(t *testing.T) {
//		fake := geminitest.New(geminitest.Model{Name: "gemini-2.5-flash", Latency: 800 * time.Millisecond})
//		client, err := genai.NewClient(t.Context(), fake.ClientConfig())
//		...
//	})
//
// The fake never sends a continuationToken unless a Step asks for it, so one
// SDK call is one HTTP request unless the SDK's own retry is turned on.
package geminitest
