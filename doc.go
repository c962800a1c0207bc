// Package geminiguard calls the Gemini API in place of the official Go SDK
// (google.golang.org/genai), through one chain of defences, so that a 429, a
// 503, an exhausted daily quota, a retired model, an empty 200 or a stream
// that dies halfway reaches the caller as a good answer from another model, a
// clear typed error, or a deliberate fallback — never as silence.
//
// # The chain
//
// Every upstream attempt of a call passes, in this order:
//
//	answer = bulkhead( cascade( for each model: retry( breaker( limiter( request ))) ) else Fallback )
//
// where
//
//   - bulkhead: per feature, when configured (WithBulkhead, chosen per call
//     with WithBulkheadName): at most MaxConcurrent calls at once, MaxQueue
//     more waiting at most QueueTimeout, the rest refused at once with
//     ErrBulkheadFull, so a flooding feature cannot starve another. The
//     bulkhead wraps the whole call, once, not each attempt.
//   - limiter: per model, RPM as a sliding window (the quota's own
//     semantics), TPM as a token bucket and RPD as a counter that resets at
//     midnight America/Los_Angeles, each at a headroom of the configured
//     limits (WithLimits, WithHeadroom). A model out of quota for now is
//     skipped when another can answer at once; a wait that would overrun the
//     call's deadline is never waited. A server 429 blocks the dimension for
//     its RetryInfo delay and teaches the limiter the stated limit.
//   - breaker: per model and endpoint, for a dead model: closed → open
//     after consecutive failures that say the model is unwell (5xx,
//     timeouts, network, cut streams) once it has also answered nothing for
//     DeadAfter (10s) → half-open after OpenFor → closed after probe
//     successes (WithBreaker). A call left with nothing but open models probes one
//     early, once per AllOpenProbeEvery across the Client, so the end of an
//     outage is found in seconds. Quota answers do not count: they cool the
//     model down — until RetryInfo's delay (at most 5 minutes) for a
//     per-minute 429, until midnight America/Los_Angeles for a daily one,
//     until CheckCascade sees it again for a 404 or a zero limit.
//     Project-wide failures (spend cap, invalid or leaked key, API disabled)
//     cool the whole Client down.
//   - retry: Classify decides for each failure whether the same model may
//     help after a delay (the server's RetryInfo when stated, else jittered
//     backoff), within MaxAttempts, the call's deadline and a client-wide
//     retry budget (WithRetry). While another model can answer, a retryable
//     failure moves on to it at once; after a jittered pause the next round
//     comes back to the models that failed that way, primary first.
//   - cascade: the models of WithCascade in order, skipping open, cooling
//     and out-of-token models; then WithFallback; else a *CascadeError.
//   - routing: a degraded model (failing in bursts, yet answering) is not
//     taken out of rotation; it keeps the traffic it can serve. Per model,
//     the Client counts over the last 30s the requests it meant to send and
//     the answers, and a call that has another model to go to skips this
//     one, without a request, with probability max(0, (requests −
//     4·answers) / (requests + 1)) (client-side adaptive throttling, Google
//     SRE book): a model that answers a quarter of its requests or more
//     keeps all of its traffic, each failure moving that call on to the
//     next model at once; one that answers less gets less; one that answers
//     nothing gets a request now and then until its breaker opens.
//   - latency: per model and size of request (the output and thinking
//     budget it asks for), the Client learns the median time the model
//     takes to answer a GenerateContent call, and abandons an attempt not
//     answered by three times that (at least 1s) for the next model, as a
//     stalled request would otherwise be waited out to the attempt timeout.
//     A model slow on every request (long thinking) has a slow median and
//     is not cut. Abandoned attempts are capped like retries (10% of first
//     attempts, plus one a second), are not counted by the breaker, and a
//     model abandoned more often than half that budget gets less traffic
//     (1 − 0.05·requests/abandoned of its calls go elsewhere). A stream's
//     wait for its first chunk is learned and cut the same way; after the
//     first chunk, only the idle deadline bounds it.
//
// New runs CheckCascade unless WithStartupCheck(false): it fails on a cascade
// model the API does not list (or a key the API refuses) and warns about
// announced shutdowns. A listing that fails for a passing reason (a 503, a
// timeout) does not fail New: the check is retried in the background until
// it completes, for about 5 minutes at most; Client.Close stops it.
//
// # Errors
//
// Classify(err) reads any error (the SDK's genai.APIError, transport errors,
// and this package's) into a Verdict: its Class, whether a retry can help,
// its Scope (request, model or project) and the server-stated delay. Errors
// returned by the Client match the sentinels ErrRateLimited,
// ErrQuotaExhausted, ErrCircuitOpen, ErrAllModelsFailed, ErrBlocked,
// ErrEmptyResponse, ErrStreamInterrupted, ErrBulkheadFull and
// ErrBudgetExhausted with errors.Is, and carry details
// in *CascadeError, *ModelError, *ResponseError, *StreamError and
// *CoolingError. Quiet failures of the API — a blocked prompt, a SAFETY or
// RECITATION finish, a 200 without candidates or parts — are errors here, by
// the same rules for a unary answer and a stream's. WithCallRecord reports
// every attempt of a call: model, error and wait. A call the Fallback
// answered returns err == nil: IsFallback(resp) tells its answer from a
// model's.
//
// An answer the server pauses with finishReason CONTINUATION is completed
// within its call: the same deadline, the model that answered alone (its
// token is no use to another), never the Fallback. A part that cannot be had
// ends the call with a *StreamError holding the text so far.
//
// A panic — the SDK's, a hook's, a Fallback's, a stream consumer's loop
// body's — reaches the caller as it would without this package, and leaves
// the Client consistent: every breaker permit and unsent limiter grant of
// the call is settled on the way out, and the call counts as failed in Stats.
// A Client keeps per-model state for its cascade and for at most 256 other
// models, the most recently called.
//
// # Tokens and cost
//
// Every response's usageMetadata — input, output, thinking and cached
// tokens — counts in its CallRecord and its model's Stats, limits or not,
// with its cost in integer micro-dollars (Micros): the model's price in
// effect when the response arrived, from a dated table per model (Prices,
// WithPrices) with the long-prompt tier, thinking billed as output and
// cached tokens at the cached rate. A model without a price has an unknown
// cost (CostKnown false), never a silent zero.
//
// # Streaming
//
// GenerateContentStream keeps the SDK's iter.Seq2 shape. The whole chain
// applies until the first chunk; first-chunk and idle deadlines turn stalls
// into failures; a stream cut after its first chunk ends with a *StreamError
// holding the text so far, or is resumed (WithStreamResume).
//
// Client.Chats creates chat sessions in genai's Chat shape (SendMessage,
// SendMessageStream, History) whose every message goes through the chain.
//
// # Vertex AI
//
// A Client calls Vertex AI when its SDK client does (WithGenAIClient with
// Backend genai.BackendVertexAI). A cascade may span the Gemini API and
// Vertex AI: WithModelBackend(entry, model, sdk) makes the cascade entry
// named entry (e.g. "vertex/gemini-2.5-flash") send its requests as model
// through sdk, with its own breakers, cool-downs, limits and Stats, checked
// against sdk's model list, and its shutdown date looked up as
// "vertex/"+model on Vertex AI. A project-wide failure of sdk (a refused
// credential) cools only the entries that use it.
// Client.ComputeTokens, which only Vertex AI serves, goes through the chain
// as Client.CountTokens does; on the Gemini API it is refused unsent.
//
// # Fleet mode
//
// Quotas belong to the Google project, not the process. WithSharedState makes
// a Client one replica of a fleet sharing a SharedState (package redisstore
// keeps it on Redis; NewMemoryState in memory): limits are counted across
// the fleet, a cool-down, an open breaker or a learned limit seen by one
// replica holds for all, failures are counted across the fleet, and the
// fleet sends an open model one probe. A store that is down or slow never
// fails a call: the Client carries on alone on its share of the limits and
// says so (Stats.Fleet, a log line, the geminiguard.fleet.* metrics).
//
// # Testing
//
// The package is tested with the real SDK against an in-process fake of the
// Gemini API that speaks its wire protocol, its error bodies and its quotas,
// under testing/synctest, so outage scenarios run in fake time. The fake is
// package geminitest, for your tests too: hand a Client the SDK client it
// configures (WithGenAIClient) and script the outage your code must survive.
package geminiguard
