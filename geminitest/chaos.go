package geminitest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// chaosConfirmation is the sentence ChaosConfig.Enable must hold.
const chaosConfirmation = "I am rehearsing an outage"

// ChaosConfig says which faults Chaos injects and how often. Each rate is
// the probability in [0, 1] that a request gets that fault; the faults are
// exclusive, so the rates sum to at most 1, and a request that draws none
// goes to the real API untouched.
type ChaosConfig struct {
	// Overloaded is the rate of 503 UNAVAILABLE "The model is overloaded.
	// Please try again later." answers (the body of the Overloaded fault).
	Overloaded float64
	// RateLimited is the rate of per-minute quota 429s: RESOURCE_EXHAUSTED
	// with a QuotaFailure naming the paid tier's per-minute request quota of
	// the requested model, a Help link and a RetryInfo of 7s (the body of
	// the RateLimitMinute fault).
	RateLimited float64
	// DailyQuota is the rate of per-day quota 429s: a QuotaFailure naming
	// the per-day request quota and a RetryInfo of 43s (the body of the
	// DailyQuota fault).
	DailyQuota float64
	// CutStream is the rate of cut streams: the request goes to the real
	// API, and a 200 stream's body ends after its first event with
	// io.ErrUnexpectedEOF, as when the connection drops (StreamCutBetween
	// with CutAfter 1). It applies to streamGenerateContent only: a
	// generateContent request that draws it goes through untouched.
	CutStream float64
	// Stall is the rate of stalls: the request waits StallFor, then goes to
	// the real API; if the request's context is done first, RoundTrip
	// returns the context's error, as the network does.
	Stall float64
	// StallFor is how long a stall lasts; 0 means one hour.
	StallFor time.Duration
	// Seed seeds the draws: with the same seed, the nth request draws the
	// same fault.
	Seed uint64
	// Enable must be the sentence "I am rehearsing an outage", typed out:
	// Chaos refuses any other value, the empty zero value included.
	Enable string
}

// Chaos returns an http.RoundTripper that sends requests through base (nil
// means http.DefaultTransport) and injects faults into some of them at the
// rates of c, so a team can rehearse an outage of the real API in staging:
// give the SDK an http.Client with it (genai.ClientConfig.HTTPClient, or
// geminiguard.WithHTTPClient). Faults touch only generateContent and
// streamGenerateContent requests (POST, on the Gemini API's and Vertex AI's
// paths alike); models.list, countTokens and every other request go to base
// untouched. The 503 and 429 answers are built here, in the real format the
// fake sends, without reaching the real API: the SDK returns them as a
// genai.APIError, and geminiguard classifies them as the real ones.
//
// Each request draws at most one fault from a generator seeded with
// c.Seed. The RoundTripper is safe for concurrent use; under concurrency,
// which request gets which draw depends on arrival order. It logs nothing,
// and its errors never hold the request's URL or headers, so the API key
// stays out of them. It does not retry, and it follows the RoundTripper
// contract: it closes the request body, also on the faults that never reach
// base.
//
// Chaos is off unless asked for twice over: nothing in geminitest or
// geminiguard calls it, no environment variable turns it on (a variable set
// in a shared shell or a copied .env file would reach production with no
// code change), and c.Enable must hold the sentence above, which a zero
// value, a config file with the field missing or a flipped boolean cannot
// produce. Chaos returns an error, naming the field, when c.Enable is not
// that sentence, when a rate is outside [0, 1] or the rates sum above 1, or
// when StallFor is negative. With every rate 0 it passes every request to
// base untouched.
func Chaos(base http.RoundTripper, c ChaosConfig) (http.RoundTripper, error) {
	if c.Enable != chaosConfirmation {
		return nil, fmt.Errorf("geminitest: ChaosConfig.Enable must be %q: chaos injects faults into calls to the real API", chaosConfirmation)
	}
	rates := []struct {
		name string
		p    float64
	}{{"Overloaded", c.Overloaded}, {"RateLimited", c.RateLimited}, {"DailyQuota", c.DailyQuota}, {"CutStream", c.CutStream}, {"Stall", c.Stall}}
	sum := 0.0
	for _, r := range rates {
		if !(r.p >= 0 && r.p <= 1) {
			return nil, fmt.Errorf("geminitest: ChaosConfig.%s is %v: want a rate in [0, 1]", r.name, r.p)
		}
		sum += r.p
	}
	// Tolerate float rounding: 0.1+0.2+0.7 is 1.0000000000000002.
	if sum > 1+1e-9 {
		return nil, fmt.Errorf("geminitest: ChaosConfig rates sum to %v: a request gets at most one fault, want a sum of at most 1", sum)
	}
	if c.StallFor < 0 {
		return nil, fmt.Errorf("geminitest: ChaosConfig.StallFor is %v: want 0 (one hour) or more", c.StallFor)
	}
	if c.StallFor == 0 {
		c.StallFor = defaultStall
	}
	if base == nil {
		base = http.DefaultTransport
	}
	return &chaos{base: base, c: c, rng: rand.New(rand.NewPCG(c.Seed, 0))}, nil
}

// chaosFault is what one request draws.
type chaosFault int

const (
	chaosNone chaosFault = iota
	chaosOverloaded
	chaosRateLimited
	chaosDailyQuota
	chaosCutStream
	chaosStall
)

type chaos struct {
	base http.RoundTripper
	c    ChaosConfig

	mu  sync.Mutex // guards rng
	rng *rand.Rand
}

// draw returns the fault of the next request.
func (ch *chaos) draw() chaosFault {
	ch.mu.Lock()
	u := ch.rng.Float64()
	ch.mu.Unlock()
	for i, p := range []float64{ch.c.Overloaded, ch.c.RateLimited, ch.c.DailyQuota, ch.c.CutStream, ch.c.Stall} {
		if u < p {
			return chaosFault(i + 1)
		}
		u -= p
	}
	return chaosNone
}

func (ch *chaos) RoundTrip(req *http.Request) (*http.Response, error) {
	model, verb := chaosTarget(req)
	if verb == "" {
		return ch.base.RoundTrip(req)
	}
	switch ch.draw() {
	case chaosOverloaded:
		return synthesize(req, overloaded())
	case chaosRateLimited:
		return synthesize(req, quotaExceeded(model, true,
			[]violation{{kind: requestsPerMinute, limit: defaultLimits[1][requestsPerMinute]}}, defaultMinuteRetry))
	case chaosDailyQuota:
		return synthesize(req, quotaExceeded(model, true,
			[]violation{{kind: requestsPerDay, limit: defaultLimits[1][requestsPerDay]}}, defaultDailyRetry))
	case chaosCutStream:
		if verb != VerbStream {
			break
		}
		resp, err := ch.base.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			resp.Body = &cutBody{body: resp.Body}
			resp.ContentLength = -1
		}
		return resp, err
	case chaosStall:
		if err := sleep(req.Context(), ch.c.StallFor); err != nil {
			closeBody(req)
			return nil, err
		}
	}
	return ch.base.RoundTrip(req)
}

// chaosTarget returns the model and verb of a generateContent or
// streamGenerateContent request, or "" and "" for any other request. The
// model is the path segment after the last "models/" (Gemini API:
// /v1beta/models/{model}:verb; Vertex AI:
// .../publishers/google/models/{model}:verb).
func chaosTarget(req *http.Request) (string, Verb) {
	if req.Method != http.MethodPost || req.URL == nil {
		return "", ""
	}
	path := req.URL.Path
	i := strings.LastIndex(path, "/")
	model, verb, ok := strings.Cut(path[i+1:], ":")
	if !ok || !strings.HasSuffix(path[:i+1], "models/") {
		return "", ""
	}
	switch v := Verb(verb); v {
	case VerbGenerate, VerbStream:
		return model, v
	}
	return "", ""
}

// synthesize answers req with e's body and status, as the real API does,
// without sending req anywhere.
func synthesize(req *http.Request, e apiError) (*http.Response, error) {
	closeBody(req)
	b := e.body()
	return &http.Response{
		Status:        strconv.Itoa(e.Code) + " " + http.StatusText(e.Code),
		StatusCode:    e.Code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json; charset=UTF-8"}},
		Body:          io.NopCloser(bytes.NewReader(b)),
		ContentLength: int64(len(b)),
		Request:       req,
	}, nil
}

// closeBody closes the body of a request that will not be sent.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close() // nothing to do about it
	}
}

// cutBody passes a stream's body through up to the end of its first event
// (the first empty line), then fails every read with io.ErrUnexpectedEOF and
// closes the real body, ending the upstream request.
type cutBody struct {
	body io.ReadCloser
	tail []byte // the last bytes read, to find "\n\n" or "\n\r\n" across reads
	cut  bool
	once sync.Once
}

func (b *cutBody) Read(p []byte) (int, error) {
	if b.cut {
		return 0, io.ErrUnexpectedEOF
	}
	n, err := b.body.Read(p)
	for i := range n {
		b.tail = append(b.tail, p[i])
		if len(b.tail) > 3 {
			b.tail = b.tail[1:]
		}
		if p[i] == '\n' && (bytes.HasSuffix(b.tail, []byte("\n\n")) || bytes.HasSuffix(b.tail, []byte("\n\r\n"))) {
			b.cut = true
			b.closeBody()
			return i + 1, nil
		}
	}
	if err == io.EOF {
		// The stream ended before its first event did: a cut all the same.
		b.cut = true
		return n, io.ErrUnexpectedEOF
	}
	return n, err
}

func (b *cutBody) Close() error {
	b.closeBody()
	return nil
}

func (b *cutBody) closeBody() { b.once.Do(func() { _ = b.body.Close() }) }
