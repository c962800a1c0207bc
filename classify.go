package geminiguard

import "time"

// Class names what a failure was. The zero value ClassNone means "no error".
type Class int

const (
	ClassNone            Class = iota // no error
	ClassUnknown                      // an error nothing else explains; retried once like a 5xx
	ClassCanceled                     // the caller cancelled, or the caller's own deadline passed
	ClassRateLimit                    // per-minute quota (RPM / TPM) 429: wait RetryAfter, then retry
	ClassDailyQuota                   // per-day quota 429: the model is done until midnight America/Los_Angeles
	ClassNoQuota                      // 429 with limit 0: the model is not available on this tier
	ClassSpendCap                     // spend / prepayment cap reached: the whole project is down
	ClassOverloaded                   // 503 UNAVAILABLE "model is overloaded"
	ClassServerError                  // 500 INTERNAL and other 5xx
	ClassTimeout                      // 504, 503 deadline expired, attempt timeout, net timeout
	ClassNetwork                      // connection refused / reset, EOF before the response
	ClassStreamCut                    // a stream cut after it started (transport, in-stream error, no finishReason)
	ClassBadRequest                   // 400 INVALID_ARGUMENT and other caller mistakes
	ClassAuth                         // invalid, leaked or unregistered API key (400 / 403)
	ClassServiceDisabled              // 403 SERVICE_DISABLED: the API is not enabled for the project
	ClassLocation                     // 400 FAILED_PRECONDITION: not available in the caller's region
	ClassNotFound                     // 404: the model is retired or never existed
	ClassBlocked                      // quiet 200: prompt or answer blocked (safety, recitation, ...)
	ClassEmpty                        // quiet 200: no candidates / no parts / OTHER / MALFORMED_FUNCTION_CALL
	ClassCircuitOpen                  // refused locally: the breaker is open or the model is cooling down
	ClassLocalRateLimit               // refused locally: the token bucket cannot grant in time
)

// Scope says how far a failure reaches.
type Scope int

const (
	// ScopeRequest: the request itself is the problem (bad argument, safety
	// block); no other model will help, the call returns at once.
	ScopeRequest Scope = iota
	// ScopeModel: this model is unwell or out of quota; the next model may answer.
	ScopeModel
	// ScopeProject: every model under this key is down (spend cap, invalid or
	// leaked key, API disabled); the cascade is skipped.
	ScopeProject
)

// CoolDown says how long a model (or the project) should be left alone after a
// failure, instead of counting it as a breaker failure.
type CoolDown int

const (
	CoolDownNone         CoolDown = iota // no cool-down
	CoolDownRetryAfter                   // for Verdict.RetryAfter (per-minute 429)
	CoolDownUntilMidnight                // until the next midnight America/Los_Angeles (daily quota)
	CoolDownUntilRecheck                 // until CheckCascade sees the model again (404, limit 0)
	CoolDownProject                      // the whole client, until CheckCascade succeeds or OpenFor passes
)

// Verdict is Classify's reading of an error. The zero value is the verdict of
// a nil error.
type Verdict struct {
	Class      Class         // what happened
	Retryable  bool          // worth another attempt on the same model after a delay
	Scope      Scope         // how far the failure reaches
	RetryAfter time.Duration // the server-stated delay (RetryInfo or "Please retry in 36.4s"), 0 when none
	CoolDown   CoolDown      // how long to leave the model alone instead of counting a failure
	Counts     bool          // counts as a breaker failure (the model is unwell)
	QuotaLimit int           // the limit the server stated (QuotaFailure quotaValue), 0 when none
	QuotaID    string        // the quotaId that decided a quota verdict, "" when none
}

// Classify reads err and says what it was, whether retrying the same model can
// help, and how far the failure reaches. It is pure, safe for concurrent use,
// and never panics; Classify(nil) is the zero Verdict. On an error returned by a
// Client method it gives the verdict of the failure that decided the outcome.
func Classify(err error) Verdict {
	panic("TODO: classify helper")
}
