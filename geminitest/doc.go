// Package geminitest is a fake Gemini API for testing code that calls Gemini
// through the genai SDK (google.golang.org/genai), directly or through
// geminiguard, as net/http/httptest is for HTTP. The real SDK talks to it
// over HTTP and gets what it gets from the real API: the same routes, the
// same JSON, the same error bodies, so your code sees a 503 or a quota 429
// exactly as it will in production.
//
// A Server serves models under /v1beta/models: generateContent,
// streamGenerateContent?alt=sse, countTokens, batchEmbedContents, models.get
// and paged models.list. Each model follows a script: per request, a Step
// says what happens — success, one of the error shapes the real API sends
// (quota 429s with QuotaFailure and RetryInfo, spend cap, 5xx, auth and
// region 4xx, retired model, non-JSON and JSON-array bodies, a connection
// dropped before the headers), a quiet 200 (blocked prompt, SAFETY finish,
// no parts, no candidates), or a broken stream (cut between or inside
// events, an error inside the 200, no finishReason, stalls). Steps come from
// Model.Script, then from seeded random Model.Faults, or from a Model.Decide
// func. Model.Quota emulates per-minute and per-day quotas. Server.Hits and
// Server.Total count requests and Server.Requests logs them, so a test can
// assert how many upstream requests a call made.
//
// A Step's Parts set the whole answer (function calls, inline data,
// executable code); each model stamps its own thought signatures, and one
// with RequireSignatures refuses a foreign or missing signature as Gemini 3
// does. Contents the real API refuses (no parts, a role other than user or
// model, an empty part, function responses that do not answer the call turn
// before them) get its 400 bodies.
//
// # In memory, in fake time
//
// Server.ClientConfig reaches the server through an in-memory transport,
// without sockets, so it works inside a testing/synctest bubble. The server
// reads time.Now() and waits on timers, so in a bubble its latencies,
// stalls and quota windows run in fake time, as do your code's backoff and
// timeouts: a test of a minute-long outage takes milliseconds.
//
//	synctest.Test(t, func(t *testing.T) {
//		fake := geminitest.New(geminitest.Model{
//			Name:   "gemini-2.5-flash",
//			Script: []geminitest.Step{{Fault: geminitest.Overloaded}}, // then success
//		})
//		client, err := genai.NewClient(t.Context(), fake.ClientConfig())
//		...
//	})
//
// # Over sockets
//
// A Server is an http.Handler: serve it with httptest.NewServer (HTTP/1.1)
// or httptest.NewUnstartedServer with EnableHTTP2 and StartTLS (HTTP/2), and
// reach it with ClientConfigFor. Do not do this inside a synctest bubble:
// while a goroutine waits on a socket fake time stands still, and the
// server's goroutines, started outside the bubble, wait in real time. Use the
// in-memory transport there.
//
//	srv := httptest.NewServer(fake)
//	defer srv.Close()
//	client, err := genai.NewClient(ctx, geminitest.ClientConfigFor(srv))
//
// # With geminiguard
//
// Hand a geminiguard Client the SDK client:
//
//	sdk, err := genai.NewClient(ctx, fake.ClientConfig())
//	...
//	client, err := geminiguard.New(ctx, geminiguard.WithGenAIClient(sdk),
//		geminiguard.WithCascade("gemini-2.5-flash"))
//
// geminitest does not import geminiguard, and offers no helper that returns a
// geminiguard Client or its options: geminiguard's in-package tests use this
// fake, and they could not if it imported the root package (an import
// cycle). WithGenAIClient is the one line such a helper would save.
//
// # Vertex AI
//
// NewVertex(project, location, models...) is a Server on Vertex AI's paths
// and error bodies, and serves computeTokens, which only Vertex AI has; its
// ClientConfig has the Vertex AI backend and looks up no Google
// credentials. Test a cascade across the Gemini API and Vertex AI
// with two Servers, one of each:
//
//	gemini := geminitest.New(geminitest.Model{Name: "gemini-2.5-flash"})
//	vertex := geminitest.NewVertex("my-project", "us-central1", geminitest.Model{Name: "gemini-2.5-flash"})
//	gemini.Script("gemini-2.5-flash", geminitest.Step{Fault: geminitest.Overloaded})
//
// # Chaos in staging
//
// Chaos wraps the transport of a client that calls the real API and injects
// the same faults, in the same formats, at configured rates (503 overload,
// per-minute and daily 429, a cut stream, a stall), so a team can rehearse
// an outage in staging. It is off unless called with ChaosConfig.Enable
// holding a confirmation sentence.
//
// # What the SDK does with it
//
// The fake never sends a continuationToken unless a Step asks for it, so one
// SDK call is one HTTP request unless the SDK's own retry is turned on
// (genai.HTTPOptions.RetryOptions). The SDK returns error answers as a
// genai.APIError (Code, Status, Message, Details) and stream cuts as the
// error of the stream's last iteration; each Fault's doc says which.
//
// # Stability
//
// The names of this package are stable. New faults, and new fields of Model,
// Step and Quota, may be added: write struct literals with field names. The
// bodies follow the real API and change when it does.
package geminitest
