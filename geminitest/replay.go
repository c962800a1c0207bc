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

// replayMatch is how far from a recorded request's start a replayed
// request may start to be played as that request: the recording's times
// are to the microsecond, so the same configuration replayed meets its own
// requests again well within it.
const replayMatch = time.Millisecond

// recorded is one line of a recording (geminiguard.WithRecorder).
type recorded struct {
	AtMS      float64 `json:"at_ms"`
	Model     string  `json:"model"`
	Endpoint  string  `json:"endpoint"`
	Status    int     `json:"status"`
	Class     string  `json:"class"`
	LatencyMS float64 `json:"latency_ms"`
	Chunks    int     `json:"chunks"`
}

func (r recorded) at() time.Duration { return msDuration(r.AtMS) }

// msDuration returns ms milliseconds as a Duration.
func msDuration(ms float64) time.Duration {
	return time.Duration(ms * float64(time.Millisecond)).Round(time.Microsecond)
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
// skipped), whose Decide plays the recording back in time. A request at
// time t after the first request any of the models got is played as the
// first request recorded for the model within a millisecond of t that was
// not played yet, so that the configuration recorded, replayed with the
// same calls, meets every one of its requests again; a request with none
// (another configuration sends at other times) is played as the last
// request recorded for the model at or before t (its first recorded
// request before that). A request is played with a fault of its class (a
// 503 overloaded body for "overloaded", a per-minute 429 for "rate_limit",
// ...) after the same latency, or with an answer. A stream recorded with
// its chunks is played with as many: a cut stream (class "stream_cut")
// sends the chunks it delivered, then is cut (StreamCutBetween), or, when
// it delivered as many as the model's whole answers, ends without
// finishReason (StreamNoFinish); an error inside a stream's 200 is sent
// after its chunks (StreamErrorInside). The Model's Chunks is the most
// chunks a whole answer of the model delivered in the recording (0 when it
// has no stream). A request recorded with no response (status 0, a
// timeout) is played as an answer after 10 minutes, so that the
// configuration replayed decides when to give up. Under testing/synctest
// the time is the bubble's fake clock, so an hour's incident plays in
// moments. Add other fields (Text, Quota, ChunkInterval) to the Models
// before passing them to New. It fails on a line that is not a
// recording's JSON.
func Replay(r io.Reader) ([]Model, error) {
	byModel := map[string]*replayModel{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec recorded
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil || rec.Model == "" {
			return nil, fmt.Errorf("geminitest: Replay: line %d is not a recording's line (geminiguard.WithRecorder): %q", n, sc.Text())
		}
		if rec.Endpoint != "generate" {
			continue
		}
		m := byModel[rec.Model]
		if m == nil {
			m = new(replayModel)
			byModel[rec.Model] = m
		}
		m.recs = append(m.recs, rec)
		if rec.Class == "none" {
			m.chunks = max(m.chunks, rec.Chunks)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("geminitest: Replay: %w", err)
	}
	clock := new(replayClock)
	models := make([]Model, 0, len(byModel))
	for name, m := range byModel {
		sort.SliceStable(m.recs, func(i, j int) bool { return m.recs[i].AtMS < m.recs[j].AtMS })
		m.played = make([]bool, len(m.recs))
		models = append(models, Model{Name: name, Chunks: m.chunks, Decide: func(Request, int) Step { return m.step(clock.since()) }})
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

// replayModel is one model's recorded requests. Safe for concurrent use.
type replayModel struct {
	recs   []recorded // by time; set before the replay
	chunks int        // the most chunks a whole answer delivered

	mu     sync.Mutex // guards played
	played []bool     // by recs' index, the requests already played
}

// step is the step of a request at t into the replay (see Replay).
func (m *replayModel) step(t time.Duration) Step {
	m.mu.Lock()
	i := sort.Search(len(m.recs), func(i int) bool { return m.recs[i].at() >= t-replayMatch })
	for ; i < len(m.recs) && m.recs[i].at() <= t+replayMatch && m.played[i]; i++ {
	}
	if i < len(m.recs) && m.recs[i].at() <= t+replayMatch {
		m.played[i] = true
	} else {
		i = max(sort.Search(len(m.recs), func(i int) bool { return m.recs[i].at() > t })-1, 0)
	}
	rec := m.recs[i]
	m.mu.Unlock()
	latency := msDuration(rec.LatencyMS)
	switch {
	case rec.Status == 0 && rec.Class == "timeout":
		return Step{Latency: replayStall}
	case rec.Class == "timeout":
		return Step{Fault: GatewayTimeout, Latency: latency}
	case rec.Chunks > 0 && rec.Class == "stream_cut" && m.chunks > 0 && rec.Chunks >= m.chunks:
		return Step{Fault: StreamNoFinish, Latency: latency}
	case rec.Chunks > 0 && rec.Class == "stream_cut":
		return Step{Fault: StreamCutBetween, CutAfter: rec.Chunks, Latency: latency}
	case rec.Chunks > 0 && rec.Class != "none":
		return Step{Fault: StreamErrorInside, CutAfter: rec.Chunks, Latency: latency}
	}
	return Step{Fault: replayFaults[rec.Class], Latency: latency}
}
