package geminiguard

import (
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/geminiguard/geminiguard/internal/latency"
	"google.golang.org/genai"
)

// endpoint separates breakers of one model: generation and embedding fail
// independently.
type endpoint uint8

const (
	endpointGenerate endpoint = iota
	endpointEmbed
	endpointCount // countTokens: free of quota, so not limited
	endpointBatch // the Batch API's create, get, cancel, delete: a quota of its own (batch.go)
	numEndpoints
)

// metered reports whether requests to e count against the model's quota,
// and so go through its limiter and the spend budget: countTokens and the
// Batch API do not.
func (e endpoint) metered() bool {
	return e != endpointCount && e != endpointBatch
}

// cools reports whether requests to e are refused while the model cools
// down, and their quota failures cool it down: not the Batch API's, whose
// quota is not the model's.
func (e endpoint) cools() bool {
	return e != endpointBatch
}

func (e endpoint) String() string {
	switch e {
	case endpointEmbed:
		return "embed"
	case endpointCount:
		return "count"
	case endpointBatch:
		return "batch"
	}
	return "generate"
}

// modelState is everything the chain keeps per model. Its fields are set
// once by newModelState; the layers inside are safe for concurrent use.
type modelState struct {
	name     string
	breakers [numEndpoints]*breaker
	routes   [numEndpoints]*availability // recent requests and answers, for routing
	cool     coolDown
	lim      *limiter
	lease    modelLease // its share of the fleet's limits (WithSharedState)
	counters modelCounters
	lat      *latency.Learner                   // answer times by latencyClass (streams' first chunks apart), for learned attempt deadlines
	spent    modelSpend                         // tokens and cost of its responses
	prices   []Price                            // its dated prices, by EffectiveFrom; shared, never modified
	adjust   func(*genai.GenerateContentConfig) // WithModelConfig's, nil when none
	self     []*modelState                      // this model alone: the order of a call without cascade
	openErr  *ModelError                        // what a call records when a breaker is open: shared, never modified
	coolErr  atomic.Pointer[ModelError]         // what a call records while cooling down, for the current cool-down
	via      *modelBackend                      // WithModelBackend's; nil: the Client's own SDK client
	wire     string                             // the model name its requests carry: via's, else name
	timeout  time.Duration                      // its attempt timeout (WithModelTimeout, else WithTimeouts')
}

func (c *Client) newModelState(name string) *modelState {
	m := &modelState{name: name, lim: newLimiter(c.cfg.limits[name], c.cfg.headroom), lat: latency.New(latencyClasses), prices: c.prices[name], adjust: c.cfg.adjust[name]}
	m.spent.budget = c.spending
	for e := range m.breakers {
		m.breakers[e] = newBreaker(c.cfg.breaker)
		m.routes[e] = newAvailability()
		m.routes[e].closedSince = m.breakers[e].closedSince
	}
	m.openErr = &ModelError{Model: name, Verdict: Verdict{Class: ClassCircuitOpen, Scope: ScopeModel}, Err: ErrCircuitOpen}
	m.self = []*modelState{m}
	m.via, m.wire, m.timeout = c.cfg.backends[name], name, c.cfg.attemptTimeoutOf(name)
	if m.via != nil {
		m.wire = m.via.model
	}
	return m
}

// maxOtherModels bounds the models outside the cascade whose state the
// Client keeps (a gateway that forwards user-chosen names must not grow
// without bound): past it, the least recently called one is forgotten,
// breaker, cool-down and counters with it, and starts afresh if called again.
const maxOtherModels = 256

// model returns the state of a model: a cascade model's, or, for a model
// outside the cascade, the state kept for it, made on first use.
func (c *Client) model(name string) *modelState {
	for _, m := range c.states {
		if m.name == name {
			return m
		}
	}
	if m, ok := c.others.Get(name); ok {
		return m
	}
	m := c.newModelState(name)
	if prev, ok, _ := c.others.PeekOrAdd(name, m); ok {
		return prev // made by a concurrent call meanwhile
	}
	return m
}

// otherModels returns the names of the models outside the cascade whose
// state is kept, sorted.
func (c *Client) otherModels() []string {
	names := c.others.Keys()
	slices.Sort(names)
	return names
}

// adjustFlaw returns, as m's failure of scope model, what is wrong with the
// config m's WithModelConfig adjustment makes of the call's, checked as the
// caller's config is (checkGenerate); nil when m has no adjustment, the
// call sends no GenerateContentConfig (embeddings, counts), or the
// adjusted config is fine. A call whose adjusted config is malformed sends
// nothing to m and goes on to the next model.
func (call *call[R]) adjustFlaw(m *modelState) error {
	if m.adjust == nil || call.config == nil {
		return nil
	}
	e := generateConfigFlaw(configFor(m, call.user, call.config, call.c.sdkRetries))
	if e == nil {
		return nil
	}
	e.under(fmt.Sprintf("WithModelConfig(%q)'s GenerateContentConfig", m.name))
	return &ModelError{Model: m.name, Verdict: Verdict{Class: ClassBadRequest, Scope: ScopeModel}, Err: e}
}
