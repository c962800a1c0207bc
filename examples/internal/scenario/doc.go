// Package scenario is the performance yardstick of geminiguard: named outage
// scripts (DESIGN.md §7) played against the in-process fake Gemini
// (geminitest) for several arms — ways of calling Gemini — on the
// same script in one run, and the figures that compare them.
//
// # Arms
//
//   - raw: the genai SDK, no retry, primary model only.
//   - sdk-retry: the genai SDK with HTTPOptions.RetryOptions =
//     &genai.HTTPRetryOptions{} (5 attempts, 1s initial delay doubling,
//     1s jitter, 60s cap), primary model only.
//   - failsafe: the stack a Go developer assembles from failsafe-go (see
//     examples/internal/failsafestack for every setting and why); in the
//     latency scenarios (slowBrownout, longThinking) with a HedgePolicy:
//     one hedge to the same model after a fixed 1.2s, Flash's p95 on
//     ordinary requests, as a developer sets it once (see FailsafeArm).
//   - geminiguard: the library's Client at its defaults, with the
//     scenario's cascade, the quotas as WithLimits, the startup check on and
//     a seeded jitter source (WithJitterSource).
//   - oracle: the SDK calling, for each call, a model the script says will
//     answer now without stalling (and whose quota has room): the floor no
//     client can beat.
//
// # Runs
//
// Run plays a Scenario for each of its arms at once, each arm against its
// own fake that follows the same Script, and records every call and every
// upstream request. Run must be called inside a testing/synctest bubble:
// latencies, backoffs, breaker periods and quota windows then pass in fake
// time, so a five-minute outage takes a fraction of a second and every
// figure is exact. Tests call it inside synctest.Test; examples/outage runs
// its one test function through testing.Main to get the *testing.T that
// synctest.Test needs.
//
// Randomness is seeded: arrivals, latency spreads and fault draws are pure
// functions of the scenario's seed, the model, the call and the fake time,
// so every arm meets exactly the same faults and latencies, and so is
// geminiguard's jitter: its figures are the same on every run. What is not
// seeded is the jitter inside the SDK's retry and failsafe-go (they draw
// from math/rand's global source): their figures may move by a few per
// mille between runs.
//
// # Figures
//
// Summarize reduces an arm's run to the report's columns; see Summary for
// the exact definitions (latency is time to a good answer; a failed call
// never got one). The primary share is the calls that got a good answer
// from the cascade's first model over all calls, failed ones included: a
// user who put a model first gets its answers that often. The oracle's is
// the most a client gets that sends each call one request at the call's
// start (see OracleArm); on storm503 that is the calls whose request to
// the primary, sent then, succeeds.
package scenario
