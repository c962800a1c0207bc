package scenario

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard/geminitest"
)

// OracleArm calls, for each call, the first model of the cascade that the
// script says will answer it now without stalling (see Model.Latency) and
// whose quota has room, through the SDK without retry. When no model
// answers now but one will within oracleLookahead (a fault drawn for this
// moment), it waits for that moment; when no model answers without a
// stall within the lookahead, it takes the first answer, stalled or not;
// when every answering model is out of quota, it waits for the first
// room; otherwise it fails at once without a request. Of the clients that
// keep to the cascade's order, none answers more calls, sooner, with fewer
// requests (a client that sends more calls to a faster secondary can be
// quicker). Its primary share is the most a client gets that sends each
// call one request at the call's start: the share of calls whose request
// to the primary, sent then, answers without a stall. It knows
// request-per-minute quotas only.
func OracleArm() Arm {
	return Arm{Name: "oracle", New: func(ctx context.Context, env Env) (Caller, error) {
		c, err := newClient(ctx, env, nil)
		if err != nil {
			return nil, err
		}
		return &oracle{models: c.Models, sc: env.Scenario, start: env.Start, sent: make(map[string][]time.Time)}, nil
	}}
}

// errNoModel is the oracle's answer when the script says no model would
// answer the call now.
var errNoModel = errors.New("scenario: the script says no model answers now")

// oracle is the floor: see OracleArm.
type oracle struct {
	models *genai.Models
	sc     *Scenario
	start  time.Time

	mu   sync.Mutex             // guards sent
	sent map[string][]time.Time // per model with an RPM quota: requests sent in the last minute
}

// quotaWindow is the span of the fake's per-minute quotas.
const quotaWindow = time.Minute

// Oracle timing: how far ahead the oracle looks for a moment when some
// model answers a call, and in what steps. Faults drawn per request (a
// 503 in a brownout, a cut stream) change from one step to the next; an
// outage does not.
const (
	oracleLookahead = 50 * time.Millisecond
	oracleStep      = 10 * time.Millisecond
)

// pick returns the model to send call to, after waiting for the first
// moment (within oracleLookahead) when some model answers it, without a
// stall when one can, and for quota room; ok is false when no model
// answers within the lookahead.
func (o *oracle) pick(ctx context.Context, call int) (model string, ok bool) {
	for {
		now := time.Now()
		wait, slow, found := o.nextAnswer(call, now)
		if !found {
			return "", false
		}
		if wait == 0 {
			var name string
			if name, wait = o.reserve(call, now, slow); name != "" {
				return name, true
			}
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(wait):
		}
	}
}

// answers reports whether the script says m answers call at at (since the
// run's start), and whether only with a stall.
func (o *oracle) answers(m Model, call int, at time.Duration) (ok, stall bool) {
	r := Request{Model: m.Name, Call: call, At: at}
	step := o.sc.Script(r)
	if o.sc.Stall != nil {
		return step.Fault == geminitest.OK, o.sc.Stall(r)
	}
	return step.Fault == geminitest.OK, m.stalls(step.Latency)
}

// nextAnswer returns how long from now until some model answers call
// without a stall, or, when none does within oracleLookahead, until some
// model answers at all (slow is then true); false when none answers within
// the lookahead.
func (o *oracle) nextAnswer(call int, now time.Time) (wait time.Duration, slow, found bool) {
	for _, anyAnswer := range []bool{false, true} {
		for d := time.Duration(0); d <= oracleLookahead; d += oracleStep {
			for _, m := range o.sc.Models {
				if ok, stall := o.answers(m, call, now.Add(d).Sub(o.start)); ok && (anyAnswer || !stall) {
					return d, anyAnswer, true
				}
			}
		}
	}
	return 0, false, false
}

// reserve takes quota room at now on the first model that answers call now
// (without a stall unless slow) and has room, and returns it; "" and the
// wait until the first room when every such model is out of quota.
func (o *oracle) reserve(call int, now time.Time, slow bool) (string, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var wait time.Duration
	for _, m := range o.sc.Models {
		if ok, stall := o.answers(m, call, now.Sub(o.start)); !ok || (stall && !slow) {
			continue
		}
		rpm := m.Quota.RPM
		if rpm == 0 {
			return m.Name, 0
		}
		recent := slices.DeleteFunc(o.sent[m.Name], func(t time.Time) bool { return !now.Before(t.Add(quotaWindow)) })
		if len(recent) < rpm {
			o.sent[m.Name] = append(recent, now)
			return m.Name, 0
		}
		o.sent[m.Name] = recent
		if w := recent[len(recent)-rpm].Add(quotaWindow).Sub(now); wait == 0 || w < wait {
			wait = w
		}
	}
	return "", wait
}

func (o *oracle) Generate(ctx context.Context, call int) Outcome {
	model, ok := o.pick(ctx, call)
	if !ok {
		return Outcome{Err: errNoModel}
	}
	return generate(ctx, o.models.GenerateContent, model, call)
}

func (o *oracle) Stream(ctx context.Context, call int) Outcome {
	model, ok := o.pick(ctx, call)
	if !ok {
		return Outcome{Err: errNoModel}
	}
	var out Outcome
	out.Err = collect(o.models.GenerateContentStream(ctx, model, genai.Text(Prompt(call)), nil), &out)
	return out
}
