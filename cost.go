package geminiguard

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"google.golang.org/genai"
)

// What a call costs: every response that reports usageMetadata is priced
// from the model's dated price table at the instant it arrived, in integer
// micro-dollars, and added to the call (CallRecord) and to its model
// (Stats). Integers add up exactly: a million calls cost exactly the sum of
// their CallRecords.

// Micros is an amount of US dollars in millionths: 1_500_000 is $1.50. It is
// an integer so that costs add up exactly, never drifting as float sums do.
// Price rates are Micros per 1M tokens, which is also pico-dollars per token.
// The zero value is $0.
type Micros int64

// Dollar is one US dollar in Micros, for readable price tables. It is an
// untyped constant, so that 0.30 * Dollar is exactly 300_000 at compile
// time; a rate that is not a whole number of Micros does not compile.
const Dollar = 1_000_000

// String formats m as dollars with six decimals: "$1.500000", "-$0.000001".
func (m Micros) String() string {
	sign, u := "", uint64(m)
	if m < 0 {
		sign, u = "-", -u
	}
	return fmt.Sprintf("%s$%d.%06d", sign, u/1e6, u%1e6)
}

// Tokens counts tokens as usageMetadata reports them. The zero value is no
// tokens.
type Tokens struct {
	Input    int64 // prompt tokens (promptTokenCount, the cached ones included) and tool-use prompt tokens (toolUsePromptTokenCount)
	Output   int64 // answer tokens (candidatesTokenCount), thinking excluded
	Thinking int64 // thinking tokens (thoughtsTokenCount), billed at the output rate
	Cached   int64 // the part of Input served from the context cache (cachedContentTokenCount), billed at the cached-input rate
}

// Price is what a model costs from EffectiveFrom until the next Price of its
// table takes effect. Rates are per 1M tokens. A response whose prompt
// (promptTokenCount, cached tokens included) is longer than LongPrompt tokens
// is billed entirely at the Long rates: Gemini's "prompts > 200k tokens"
// tier. Thinking tokens are billed as output. A request with
// GenerateContentConfig.ServiceTier flex costs half, priority 1.8 times
// (LiteLLM's *_flex and *_priority rates of Gemini models);
// the Client never uses the Batch API, which also costs half. The zero value
// is a free model, since always.
type Price struct {
	EffectiveFrom time.Time // the instant the price takes effect; zero: since always
	Input         Micros    // per 1M input tokens not served from the cache
	Output        Micros    // per 1M output and thinking tokens
	CachedInput   Micros    // per 1M cached input tokens; 0: the Input rate (no cache price known, so no discount assumed)
	// LongPrompt, when > 0, is the prompt length in tokens above which the
	// Long rates apply; LongInput and LongOutput are then required.
	LongPrompt                             int
	LongInput, LongOutput, LongCachedInput Micros // LongCachedInput 0: the LongInput rate
	Source                                 string // where the figures come from and when they were read; for people, not read by the Client
}

// Prices returns the built-in price table of the Gemini Developer API (the
// only backend the Client calls), USD per 1M tokens on the paid tier, each
// model's prices in order of EffectiveFrom, each Source naming where its
// figures come from and the date they were read. The table is the embedded
// data/prices.json, checked as a whole on its as_of date; CheckCascade warns
// when that is more than 90 days ago. Google changes prices, and announces
// some changes ahead (gemini-3.7-flash and gemini-3.8-flash double on
// 2027-01-01, from midnight America/Los_Angeles); WithPrices replaces a
// model's prices, WithPricesFile loads a newer table. A model not in the
// table has no known cost. Audio input of gemini-2.5-flash ($1.00) is priced
// as text ($0.30). The caller may modify the returned map.
func Prices() map[string][]Price {
	t := make(map[string][]Price, len(builtinPrices))
	for m, p := range builtinPrices {
		t[m] = slices.Clone(p)
	}
	return t
}

// maxRate bounds a rate: a larger one is surely a slip of units (rates are
// Micros per 1M tokens: $0.30 is 300_000), and the bound keeps every cost
// computation inside int64.
const maxRate Micros = 100_000 * Dollar

// validatePrices reports every problem of one model's prices, where names
// them (`WithPrices("m")`, a file's model) and item their rows ("price",
// "row").
func validatePrices(where, item string, prices []Price) error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("geminiguard: %s: %s", where, fmt.Sprintf(format, args...)))
	}
	if where == `WithPrices("")` {
		add("give a model name, e.g. %q", defaultModel)
	}
	if len(prices) == 0 {
		add("give at least one Price (Price{} for a model that costs nothing)")
	}
	for i, p := range prices {
		rates := []struct {
			name string
			v    Micros
		}{{"Input", p.Input}, {"Output", p.Output}, {"CachedInput", p.CachedInput},
			{"LongInput", p.LongInput}, {"LongOutput", p.LongOutput}, {"LongCachedInput", p.LongCachedInput}}
		for _, r := range rates {
			if r.v < 0 || r.v > maxRate {
				add("%s %d: %s %d is outside [0, %d]: rates are Micros per 1M tokens ($0.30 is 300_000, or 0.30 * Dollar)", item, i+1, r.name, int64(r.v), int64(maxRate))
			}
		}
		long := p.LongInput != 0 || p.LongOutput != 0 || p.LongCachedInput != 0
		switch {
		case p.LongPrompt < 0:
			add("%s %d: LongPrompt %d is negative: give the prompt length of the long tier (e.g. 200_000), or 0 for none", item, i+1, p.LongPrompt)
		case p.LongPrompt > 0 && (p.LongInput == 0 || p.LongOutput == 0):
			add("%s %d: LongPrompt %d needs LongInput and LongOutput, the rates above it", item, i+1, p.LongPrompt)
		case p.LongPrompt == 0 && long:
			add("%s %d: Long rates need LongPrompt, the prompt length above which they apply (e.g. 200_000)", item, i+1)
		}
		for _, q := range prices[:i] {
			if q.EffectiveFrom.Equal(p.EffectiveFrom) {
				add("%s %d: another price takes effect at the same instant %s: give each its own EffectiveFrom", item, i+1, p.EffectiveFrom.UTC().Format(time.RFC3339))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// newPriceTable returns the built-in table with the files' prices
// (WithPricesFile) and then WithPrices applied, each model's prices sorted
// by EffectiveFrom: a model's state keeps its own (modelState.prices).
// Read-only once built.
func newPriceTable(files, overrides map[string][]Price) map[string][]Price {
	t := Prices()
	for m, p := range files {
		t[m] = slices.Clone(p)
	}
	for m, p := range overrides {
		t[m] = p
	}
	for _, p := range t {
		slices.SortFunc(p, func(a, b Price) int { return a.EffectiveFrom.Compare(b.EffectiveFrom) })
	}
	return t
}

// priceAt returns the price in effect at the instant at among prices,
// sorted by EffectiveFrom.
func priceAt(prices []Price, at time.Time) (Price, bool) {
	i := priceIndex(prices, at)
	if i == 0 {
		return Price{}, false
	}
	return prices[i-1], true
}

// priceIndex returns the index of the first of prices, sorted by
// EffectiveFrom, that takes effect after at: the one before it is in
// effect at at.
func priceIndex(prices []Price, at time.Time) int {
	i, _ := slices.BinarySearchFunc(prices, at, func(p Price, at time.Time) int {
		if p.EffectiveFrom.After(at) {
			return 1
		}
		return -1
	})
	return i
}

// priceSpan is a model's price over the span of time it is in effect, from
// (zero: since always) until until (zero: until further notice); ok false:
// no price is in effect then. Immutable.
type priceSpan struct {
	price       Price
	ok          bool
	from, until time.Time
}

// covers reports whether the instant at falls in the span.
func (s *priceSpan) covers(at time.Time) bool {
	return (s.from.IsZero() || !at.Before(s.from)) && (s.until.IsZero() || at.Before(s.until))
}

// price returns m's price in effect at the instant at, as priceAt of
// m.prices does (the zero Price and false: none), not to be modified: from
// the span cached in m.spent when at falls in it, else looked up and
// cached (a new span once per change of price).
func (m *modelState) price(at time.Time) (*Price, bool) {
	if s := m.spent.price.Load(); s != nil && s.covers(at) {
		return &s.price, s.ok
	}
	s, i := &priceSpan{}, priceIndex(m.prices, at)
	if i > 0 {
		s.price, s.ok, s.from = m.prices[i-1], true, m.prices[i-1].EffectiveFrom
	}
	if i < len(m.prices) {
		s.until = m.prices[i].EffectiveFrom
	}
	m.spent.price.Store(s)
	return &s.price, s.ok
}

// tokensOf reads the tokens of a usageMetadata, nil included.
func tokensOf(u *genai.GenerateContentResponseUsageMetadata) Tokens {
	if u == nil {
		return Tokens{}
	}
	return Tokens{
		Input:    int64(u.PromptTokenCount) + int64(u.ToolUsePromptTokenCount),
		Output:   int64(u.CandidatesTokenCount),
		Thinking: int64(u.ThoughtsTokenCount),
		Cached:   int64(u.CachedContentTokenCount),
	}
}

// cost returns what tokens cost at price p for a prompt of prompt tokens
// sent with the service tier st, rounded to the nearest micro-dollar (half
// up).
func (p *Price) cost(tk Tokens, prompt int64, st genai.ServiceTier) Micros {
	in, out, cached := p.Input, p.Output, p.CachedInput
	if p.LongPrompt > 0 && prompt > int64(p.LongPrompt) {
		in, out, cached = p.LongInput, p.LongOutput, p.LongCachedInput
	}
	if cached == 0 {
		cached = in
	}
	// A rate in Micros per 1M tokens is pico-dollars per token. Each
	// product is split at 1M tokens so that nothing overflows: whole
	// micro-dollars, and pico-dollars below 1M tokens (each < 1e6 × maxRate).
	fresh, spoken := max(tk.Input-tk.Cached, 0), tk.Output+tk.Thinking
	whole := fresh/1e6*int64(in) + tk.Cached/1e6*int64(cached) + spoken/1e6*int64(out)
	pico := fresh%1e6*int64(in) + tk.Cached%1e6*int64(cached) + spoken%1e6*int64(out)
	num, den := int64(1), int64(1)
	switch st {
	case genai.ServiceTierFlex:
		den = 2
	case genai.ServiceTierPriority:
		num, den = 9, 5
	default: // the standard rate: whole·1e6 + pico over 1e6, rounded
		return Micros(whole + (pico+1e6/2)/1e6)
	}
	// (whole·1e6 + pico)·num / (den·1e6), rounded: whole·num = q·den + r.
	q, r := whole*num/den, whole*num%den
	return Micros(q + (r*1e6+pico*num+den*1e6/2)/(den*1e6))
}

// spend is what a call's priced responses add up to. The zero value is
// nothing spent.
type spend struct {
	tokens   Tokens
	cost     Micros
	unpriced bool // a response had no price: cost is a lower bound
}

func (s *spend) add(o spend) {
	s.tokens.Input += o.tokens.Input
	s.tokens.Output += o.tokens.Output
	s.tokens.Thinking += o.tokens.Thinking
	s.tokens.Cached += o.tokens.Cached
	s.cost += o.cost
	s.unpriced = s.unpriced || o.unpriced
}

// record writes the spend into a call's record.
func (s *spend) record(rec *CallRecord) {
	rec.Tokens, rec.Cost, rec.CostKnown = s.tokens, s.cost, !s.unpriced
}

// modelSpend is one model's tokens and cost, in atomic counters.
type modelSpend struct {
	input, output, thinking, cached, cost, unpriced atomic.Int64
	budget                                          *spendBudget              // the Client's (WithBudget), which every cost is added to too; nil: none
	price                                           atomic.Pointer[priceSpan] // the model's latest price looked up (modelState.price); nil: none yet
	// typical is a moving average of the output tokens (thinking
	// included) of the model's responses, times typicalScale; 0 until the
	// first. It estimates a request's cost (costEstimate).
	typical atomic.Int64
}

// typicalScale is the fixed point of modelSpend.typical, and typicalWeight
// the share of each response in its average.
const (
	typicalScale  = 1 << 10
	typicalWeight = 8 // 1/8: the last few responses count most
)

// learnOutput adds a response's output tokens to the typical output.
func (s *modelSpend) learnOutput(tokens int64) {
	v := max(tokens, 0)*typicalScale + 1 // +1: a learned 0 is not "nothing learned"
	for {
		old := s.typical.Load()
		next := v
		if old > 0 {
			next = old + (v-old)/typicalWeight
		}
		if s.typical.CompareAndSwap(old, next) {
			return
		}
	}
}

// typicalOutput returns the typical output tokens of the model's responses;
// false before the first.
func (s *modelSpend) typicalOutput() (int64, bool) {
	v := s.typical.Load()
	return v / typicalScale, v > 0
}

// bill prices a response of m that reports usage u, arrived at the instant
// at for a request with service tier st, adds it to m's counters and
// returns it. A nil u (no usageMetadata) is nothing spent.
func bill(m *modelState, u *genai.GenerateContentResponseUsageMetadata, at time.Time, st genai.ServiceTier) spend {
	if u == nil {
		return spend{}
	}
	s := spend{tokens: tokensOf(u)}
	if p, ok := m.price(at); ok {
		s.cost = p.cost(s.tokens, int64(u.PromptTokenCount), st)
	} else {
		s.unpriced = true
		m.spent.unpriced.Add(1)
	}
	m.spent.input.Add(s.tokens.Input)
	m.spent.output.Add(s.tokens.Output)
	m.spent.thinking.Add(s.tokens.Thinking)
	m.spent.cached.Add(s.tokens.Cached)
	m.spent.learnOutput(s.tokens.Output + s.tokens.Thinking)
	m.spent.cost.Add(int64(s.cost))
	m.spent.budget.add(at, s.cost)
	return s
}

// account adds a unary response of m, arrived at the instant at, to the
// call and to m's counters: a failed answer that reports usage (a blocked
// prompt, an empty answer) counts too. Streams count when they end
// (streamRun.follow), embeddings not at all.
func (call *call[R]) account(m *modelState, resp R, at time.Time) {
	r, ok := any(resp).(*genai.GenerateContentResponse)
	if !ok || r == nil || call.stream != nil {
		return
	}
	call.spent.add(bill(m, r.UsageMetadata, at, serviceTier(call.user)))
}

// serviceTier returns the service tier a config asks for, "" for none.
func serviceTier(cfg *genai.GenerateContentConfig) genai.ServiceTier {
	if cfg == nil {
		return ""
	}
	return cfg.ServiceTier
}
