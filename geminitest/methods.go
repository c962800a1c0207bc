package geminitest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"google.golang.org/genai"
)

// Page sizes of models.list, as documented for the real API.
const (
	defaultPageSize = 50
	maxPageSize     = 1000
)

// list answers models.list: the next ScriptList step when there is one,
// else the listed models in the order they were added, paged by pageSize and
// pageToken. The response always has the "models" key.
func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	var step Step
	if len(s.listScript) > 0 {
		step, s.listScript = s.listScript[0], s.listScript[1:]
	}
	s.mu.Unlock()
	if sleep(r.Context(), step.Latency) != nil {
		return // the client is gone
	}
	switch {
	case step.Fault == DropBeforeHeaders:
		panic(http.ErrAbortHandler)
	case isErrorFault(step.Fault):
		writeFault(w, step, Model{})
		return
	}

	q := r.URL.Query()
	size := defaultPageSize
	if v := q.Get("pageSize"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, invalidArgument("Invalid value at 'page_size' (TYPE_INT32), \""+v+"\""))
			return
		}
		if n > 0 {
			size = min(n, maxPageSize)
		}
	}
	start := 0
	if v := q.Get("pageToken"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, invalidArgument("Invalid page token."))
			return
		}
		start = n
	}

	s.mu.Lock()
	var all []any
	for _, name := range s.order {
		if m := s.models[name].m; !m.Unlisted {
			all = append(all, s.wire(m))
		}
	}
	s.mu.Unlock()

	key := "models"
	if s.vertex != nil {
		key = "publisherModels" // Vertex AI's publishers.models.list
	}
	page := map[string]any{key: []any{}}
	if start < len(all) {
		end := min(start+size, len(all))
		page[key] = all[start:end]
		if end < len(all) {
			page["nextPageToken"] = strconv.Itoa(end)
		}
	}
	writeJSON(w, http.StatusOK, page)
}

// get answers models.get for a listed model.
func (s *Server) get(w http.ResponseWriter, model string) {
	s.mu.Lock()
	m := s.models[model].m
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, s.wire(m))
}

// wire returns m as s's models.get and models.list return it.
func (s *Server) wire(m Model) any {
	if s.vertex != nil {
		return m.vertexWire()
	}
	return m.wire()
}

// countTokens answers {"totalTokens": N}, N being the fake's estimate.
func countTokens(w http.ResponseWriter, body []byte) {
	var req struct {
		Contents []*genai.Content `json:"contents"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, invalidArgument(invalidArgumentMessage))
		return
	}
	n := estimateTokens(req.Contents)
	writeJSON(w, http.StatusOK, map[string]any{
		"totalTokens":         n,
		"promptTokensDetails": []modalityCount{{Modality: "TEXT", TokenCount: n}},
	})
}

// defaultDimensions is the embedding size when the request sets no
// outputDimensionality (text-embedding-004's).
const defaultDimensions = 768

// embed answers batchEmbedContents: one embedding per request, in order,
// whose values are a deterministic function of the request's text
// (embeddingOf, or the model's own when f is not nil).
func embed(w http.ResponseWriter, body []byte, f func(string, int) []float32) {
	var req struct {
		Requests []struct {
			Content              *genai.Content `json:"content"`
			OutputDimensionality int            `json:"outputDimensionality"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, invalidArgument(invalidArgumentMessage))
		return
	}
	type embedding struct {
		Values []float32 `json:"values"`
	}
	out := struct {
		Embeddings []embedding `json:"embeddings"`
	}{Embeddings: make([]embedding, 0, len(req.Requests))}
	for _, r := range req.Requests {
		out.Embeddings = append(out.Embeddings, embedding{Values: embeddingOf(text(r.Content), r.OutputDimensionality, f)})
	}
	writeJSON(w, http.StatusOK, out)
}

// estimateTokens is the fake's token count: ceil(characters / 4) over every
// text part of contents.
func estimateTokens(contents []*genai.Content) int {
	chars := 0
	for _, c := range contents {
		chars += utf8.RuneCountInString(text(c))
	}
	return tokensOf(chars)
}

func tokensOf(chars int) int { return (chars + 3) / 4 }

// text concatenates the text parts of c.
func text(c *genai.Content) string {
	if c == nil {
		return ""
	}
	var s string
	for _, p := range c.Parts {
		if p != nil {
			s += p.Text
		}
	}
	return s
}
