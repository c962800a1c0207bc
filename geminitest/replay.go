package geminitest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"
)

// replayStall is the latency a recorded request that got no response (an
// attempt timeout, status 0) is played back with: longer than any attempt
// timeout, so that the configuration replayed decides when to give up.
const replayStall = 10 * time.Minute

// recorded is one line of a recording (geminiguard.WithRecorder).
type recorded struct {
	AtMS      int64  `json:"at_ms"`
	Model     string `json:"model"`
	Endpoint  string `json:"endpoint"`
	Status    int    `json:"status"`
	Class     string `json:"class"`
	LatencyMS int64  `json:"latency_ms"`
}

// replayFaults maps a recorded class to the fault that the classifier reads
// as it; a class not listed (one the API does not send, e.g. a local
// refusal) is played as an answer.
var replayFaults = map[string]Fault{
	"unknown":          Internal,
	"rate_limit":       RateLimitMinute,
	"daily_quota":      DailyQuota,
	"no_quota":         LimitZero,
	"spend_cap":        SpendCap,
	"overloaded":       Overloaded,
	"server_error":     Internal,
	"network":          DropBeforeHeaders,
	"stream_cut":       StreamCutBetween,
	"bad_request":      InvalidArgument,
	"auth":             APIKeyInvalid,
	"service_disabled": ServiceDisabled,
	"location":         FailedPrecondition,
	"not_found":        NotFound,
	"blocked":          PromptBlocked,
	"empty":            NoCandidates,
}

// Replay reads a recording made by geminiguard.WithRecorder and returns one
// Model per model recorded (generate requests; other endpoints' lines are
// skipped), whose Decide plays the recording back in time: a request at
// time t after the first request any of the models got is answered as the
// last request recorded for the model at or before t was (its first
// recorded request before that): with a fault of the same class (a 503
// overloaded body for "overloaded", a per-minute 429 for "rate_limit", ...)
// after the same latency, or with an answer. A request recorded with no
// response (status 0, a timeout) is played as an answer after 10 minutes,
// so that the configuration replayed decides when to give up. Under
// testing/synctest the time is the bubble's fake clock, so an hour's
// incident plays in moments. Add other fields (Text, Quota) to the Models
// before passing them to New. It fails on a line that is not a recording's
// JSON.
func Replay(r io.Reader) ([]Model, error) {
	byModel := map[string][]recorded{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec recorded
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Model == "" {
			return nil, fmt.Errorf("geminitest: Replay: line %d is not a recording's line (geminiguard.WithRecorder): %q", n, sc.Text())
		}
		if rec.Endpoint == "generate" {
			byModel[rec.Model] = append(byModel[rec.Model], rec)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("geminitest: Replay: %w", err)
	}
	clock := new(replayClock)
	models := make([]Model, 0, len(byModel))
	for name, recs := range byModel {
		sort.SliceStable(recs, func(i, j int) bool { return recs[i].AtMS < recs[j].AtMS })
		models = append(models, Model{Name: name, Decide: func(Request, int) Step { return replayStep(recs, clock.since()) }})
	}
	sort.Slice(models, func(i, j int) bool { return models[i].Name < models[j].Name })
	return models, nil
}

// replayClock is a replay's time: zero at the first request of any model.
type replayClock struct {
	once  sync.Once
	start time.Time
}

func (c *replayClock) since() time.Duration {
	c.once.Do(func() { c.start = time.Now() })
	return time.Since(c.start)
}

// replayStep is the step of a request at t into the replay of recs (by
// time).
func replayStep(recs []recorded, t time.Duration) Step {
	i := sort.Search(len(recs), func(i int) bool { return time.Duration(recs[i].AtMS)*time.Millisecond > t }) - 1
	rec := recs[max(i, 0)]
	latency := time.Duration(rec.LatencyMS) * time.Millisecond
	if rec.Status == 0 && rec.Class == "timeout" {
		return Step{Latency: replayStall}
	}
	if rec.Class == "timeout" {
		return Step{Fault: GatewayTimeout, Latency: latency}
	}
	return Step{Fault: replayFaults[rec.Class], Latency: latency}
}
