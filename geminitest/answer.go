package geminitest

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/genai"
)

// generateRequest is the part of a generate or stream request body the fake
// reads.
type generateRequest struct {
	Contents          []*genai.Content `json:"contents"`
	ContinuationToken []byte           `json:"continuationToken"`
}

// generate answers a generate or stream request for a listed model: quota
// first, then the step the script, the fault draws or Decide choose.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, rt route, req Request, token []byte) {
	promptTokens := estimateTokens(req.Contents)
	s.mu.Lock()
	st := s.models[rt.model]
	m := st.m
	if m.RequireSignatures {
		if e, refused := checkSignatures(m.Name, req.Contents, rt.vertex); refused {
			s.mu.Unlock()
			writeError(w, e)
			return
		}
	}
	vs, wait := st.quota.admit(m.Quota, req.At, promptTokens)
	if len(vs) > 0 {
		s.mu.Unlock()
		if rt.vertex {
			writeVertexError(w, vertexQuotaExceeded(vertexRequestsMetric, m.Name))
		} else {
			writeError(w, quotaExceeded(m.Name, m.Quota.PaidTier, vs, wait))
		}
		return
	}
	step, idx, decide := st.next()
	s.mu.Unlock()
	if decide != nil {
		step = decide(req, idx)
	}

	a := answer{
		model:        m,
		step:         step,
		promptTokens: promptTokens,
		responseID:   "fake-" + strconv.FormatUint(s.responses.Add(1), 36),
	}
	a.signature = stamp(m.Name, a.responseID)
	a.plan(req.Contents, token)
	ctx := r.Context()
	switch {
	case step.Fault == DropBeforeHeaders:
		if sleep(ctx, step.Latency) == nil {
			panic(http.ErrAbortHandler)
		}
	case isErrorFault(step.Fault):
		if sleep(ctx, step.Latency) == nil && !(rt.vertex && s.writeVertexFault(w, rt, step.Fault, m.Name)) {
			writeFault(w, step, m)
		}
	case rt.verb == VerbStream:
		a.stream(ctx, w)
	default:
		a.unary(ctx, w)
	}
}

// embed answers a batchEmbedContents request: the model's next step decides
// it like a generate request, but only its error faults and latency apply
// (an embedding has no quiet or stream faults).
func (s *Server) embed(w http.ResponseWriter, r *http.Request, rt route, req Request, body []byte) {
	s.mu.Lock()
	st := s.models[rt.model]
	m := st.m
	step, idx, decide := st.next()
	s.mu.Unlock()
	if decide != nil {
		step = decide(req, idx)
	}
	if sleep(r.Context(), step.Latency) != nil {
		return
	}
	switch {
	case step.Fault == DropBeforeHeaders:
		panic(http.ErrAbortHandler)
	case isErrorFault(step.Fault):
		if !(rt.vertex && s.writeVertexFault(w, rt, step.Fault, m.Name)) {
			writeFault(w, step, m)
		}
	case rt.vertex:
		vertexEmbed(w, rt, body, m.Embed)
	default:
		embed(w, body, m.Embed)
	}
}

// answer is one 200 answer being written.
type answer struct {
	model        Model
	step         Step
	promptTokens int
	responseID   string
	signature    []byte // the model's thought signature on this answer's parts

	text  string // the text this request answers with
	token []byte // continuation token for the rest, nil when none
}

// plan decides the text of the answer (none for a step with Parts): the full text, less what the request
// already has (a continuation token, or a partial model turn at the end of
// its contents), cut in half when the step asks for continuation.
func (a *answer) plan(contents []*genai.Content, token []byte) {
	if len(a.step.Parts) > 0 {
		return // the parts are the whole answer
	}
	full := a.model.Text
	if a.step.Text != "" {
		full = a.step.Text
	}
	start := resumeOffset(full, contents)
	if off, ok := parseToken(token, len(full)); ok {
		start = off
	}
	end := len(full)
	if a.step.Continuation {
		rest := full[start:]
		half := len(string([]rune(rest)[:(utf8.RuneCountInString(rest)+1)/2]))
		if start+half < end {
			end = start + half
			a.token = makeToken(end)
		}
	}
	a.text = full[start:end]
}

// textLen returns the characters of the text parts of parts.
func textLen(parts []*genai.Part) int {
	n := 0
	for _, p := range parts {
		if p != nil {
			n += utf8.RuneCountInString(p.Text)
		}
	}
	return n
}

// resumeOffset returns len(P) when the last content is a model turn whose
// text P is a prefix of full: the caller resumes a cut answer.
func resumeOffset(full string, contents []*genai.Content) int {
	if len(contents) == 0 {
		return 0
	}
	last := contents[len(contents)-1]
	if last == nil || last.Role != genai.RoleModel {
		return 0
	}
	if p := text(last); strings.HasPrefix(full, p) {
		return len(p)
	}
	return 0
}

const tokenPrefix = "geminitest/"

func makeToken(offset int) []byte { return []byte(tokenPrefix + strconv.Itoa(offset)) }

// parseToken decodes a continuation token made by makeToken.
func parseToken(token []byte, limit int) (int, bool) {
	v, ok := strings.CutPrefix(string(token), tokenPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > limit {
		return 0, false
	}
	return n, true
}

// latency is the wait before a 200 answer.
func (a *answer) latency() time.Duration {
	if a.step.Latency > 0 {
		return a.step.Latency
	}
	return a.model.Latency
}

// unary writes the whole answer as one JSON body.
func (a *answer) unary(ctx context.Context, w http.ResponseWriter) {
	wait := a.latency()
	if a.step.Fault == StreamStallFirst {
		wait += a.step.stall()
	}
	if sleep(ctx, wait) != nil {
		return
	}
	if isQuietFault(a.step.Fault) {
		writeJSON(w, http.StatusOK, a.quiet())
		return
	}
	if len(a.step.Parts) > 0 {
		writeJSON(w, http.StatusOK, a.parts(signParts(a.step.Parts, a.signature), textLen(a.step.Parts), true))
		return
	}
	r := a.chunk(a.text, utf8.RuneCountInString(a.text), true)
	if a.step.Thought != "" {
		c := r.Candidates[0].Content
		c.Parts = append([]*genai.Part{a.thoughtPart()}, c.Parts...)
	}
	writeJSON(w, http.StatusOK, r)
}

// thoughtPart is the step's thought summary, signed.
func (a *answer) thoughtPart() *genai.Part {
	return &genai.Part{Text: a.step.Thought, Thought: true, ThoughtSignature: a.signature}
}

// thought is the event of a stream that carries the step's thought summary
// alone.
func (a *answer) thought() response {
	c := candidate{Content: &content{Parts: []*genai.Part{a.thoughtPart()}, Role: genai.RoleModel}}
	return a.response([]candidate{c}, 0)
}

// chunk is a response carrying piece; soFar is the number of characters of
// this answer sent up to and including piece. When finish is set it carries
// the finish reason: CONTINUATION with the token, or STOP.
func (a *answer) chunk(piece string, soFar int, finish bool) response {
	return a.parts([]*genai.Part{{Text: piece}}, soFar, finish)
}

// parts is a response carrying parts; soFar and finish as for chunk.
func (a *answer) parts(parts []*genai.Part, soFar int, finish bool) response {
	c := candidate{Content: &content{Parts: parts, Role: genai.RoleModel}}
	if finish {
		c.FinishReason = string(genai.FinishReasonStop)
		if a.token != nil {
			c.FinishReason, c.ContinuationToken = string(genai.FinishReasonContinuation), a.token
		}
	}
	return a.response([]candidate{c}, tokensOf(soFar))
}

// response wraps candidates with the usage and ids every response carries.
func (a *answer) response(cands []candidate, candidateTokens int) response {
	prompt := a.promptTokens
	if a.step.PromptTokens > 0 {
		prompt = a.step.PromptTokens
	}
	return response{
		Candidates: cands,
		UsageMetadata: &usage{
			PromptTokenCount:        prompt,
			CandidatesTokenCount:    candidateTokens,
			ThoughtsTokenCount:      a.step.ThoughtsTokens,
			CachedContentTokenCount: a.step.CachedTokens,
			TotalTokenCount:         prompt + candidateTokens + a.step.ThoughtsTokens,
			PromptTokensDetails:     []modalityCount{{Modality: "TEXT", TokenCount: prompt}},
		},
		ModelVersion: a.model.Name,
		ResponseID:   a.responseID,
	}
}

// quiet is the 200 body of a quiet fault.
func (a *answer) quiet() response {
	blocked := []safetyRating{
		{Category: "HARM_CATEGORY_HATE_SPEECH", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_DANGEROUS_CONTENT", Probability: "HIGH", Blocked: true},
		{Category: "HARM_CATEGORY_HARASSMENT", Probability: "NEGLIGIBLE"},
		{Category: "HARM_CATEGORY_SEXUALLY_EXPLICIT", Probability: "NEGLIGIBLE"},
	}
	finish := func(reason genai.FinishReason, c *content) []candidate {
		return []candidate{{Content: c, FinishReason: string(reason)}}
	}
	noParts := &content{Role: genai.RoleModel}
	r := a.response(nil, 0)
	switch a.step.Fault {
	case PromptBlocked:
		r.PromptFeedback = &promptFeedback{BlockReason: string(genai.BlockedReasonSafety), SafetyRatings: blocked}
	case FinishSafety:
		r.Candidates = finish(genai.FinishReasonSafety, nil)
		r.Candidates[0].SafetyRatings = blocked
	case FinishRecitation:
		r.Candidates = finish(genai.FinishReasonRecitation, nil)
	case FinishOther:
		r.Candidates = finish(genai.FinishReasonOther, nil)
	case FinishMalformedFunctionCall:
		r.Candidates = finish(genai.FinishReasonMalformedFunctionCall, nil)
	case MaxTokensEmpty:
		r.Candidates = finish(genai.FinishReasonMaxTokens, noParts)
		r.UsageMetadata.TotalTokenCount += a.model.OutputTokenLimit - r.UsageMetadata.ThoughtsTokenCount
		r.UsageMetadata.ThoughtsTokenCount = a.model.OutputTokenLimit
	case StopNoParts:
		r.Candidates = finish(genai.FinishReasonStop, noParts)
	}
	return r
}

// isQuietFault reports whether f answers with a 200 that has no text.
//
// The Fault groups are contiguous ranges of the constants, here and in
// isErrorFault: add a new fault to its group.
func isQuietFault(f Fault) bool { return f >= PromptBlocked && f <= NoCandidates }

// isErrorFault reports whether f answers with a non-2xx status.
func isErrorFault(f Fault) bool {
	return f >= RateLimitMinute && f <= JSONArrayBody
}

// sleep waits d, or until ctx is done (then it returns ctx's error). It uses
// a timer, so inside a testing/synctest bubble it waits in fake time.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wire shapes of a GenerateContentResponse (research/gemini-wire.md §3.1).
type (
	response struct {
		Candidates     []candidate     `json:"candidates,omitempty"`
		PromptFeedback *promptFeedback `json:"promptFeedback,omitempty"`
		UsageMetadata  *usage          `json:"usageMetadata,omitempty"`
		ModelVersion   string          `json:"modelVersion"`
		ResponseID     string          `json:"responseId"`
	}
	candidate struct {
		Content           *content       `json:"content,omitempty"`
		FinishReason      string         `json:"finishReason,omitempty"`
		Index             int            `json:"index"`
		SafetyRatings     []safetyRating `json:"safetyRatings,omitempty"`
		ContinuationToken []byte         `json:"continuationToken,omitempty"`
	}
	content struct {
		Parts []*genai.Part `json:"parts,omitempty"`
		Role  string        `json:"role"`
	}
	safetyRating struct {
		Category    string `json:"category"`
		Probability string `json:"probability"`
		Blocked     bool   `json:"blocked,omitempty"`
	}
	promptFeedback struct {
		BlockReason   string         `json:"blockReason"`
		SafetyRatings []safetyRating `json:"safetyRatings"`
	}
	usage struct {
		PromptTokenCount        int             `json:"promptTokenCount"`
		CandidatesTokenCount    int             `json:"candidatesTokenCount,omitempty"`
		TotalTokenCount         int             `json:"totalTokenCount"`
		ThoughtsTokenCount      int             `json:"thoughtsTokenCount,omitempty"`
		CachedContentTokenCount int             `json:"cachedContentTokenCount,omitempty"`
		PromptTokensDetails     []modalityCount `json:"promptTokensDetails,omitempty"`
	}
	modalityCount struct {
		Modality   string `json:"modality"`
		TokenCount int    `json:"tokenCount"`
	}
)
