// Package openaicompat is a geminiguard.Backend for servers that speak
// OpenAI's chat completions API (POST /v1/chat/completions): Ollama,
// llama.cpp's server, vLLM, LM Studio. It puts a local model (Gemma, Llama)
// in a geminiguard cascade as the tier that answers when every Gemini model
// is down:
//
//	local := openaicompat.New("http://localhost:11434") // Ollama
//	c, err := geminiguard.New(ctx,
//		geminiguard.WithCascade("gemini-3.1-pro", "gemini-3.7-flash", "local/gemma3"),
//		geminiguard.WithBackend("local/gemma3", "gemma3:4b", local),
//		geminiguard.WithModelTimeout("local/gemma3", 2*time.Minute))
//
// Requests map genai's contents to chat messages (role "model" is
// "assistant"; the system instruction is a "system" message), Temperature,
// TopP, MaxOutputTokens, StopSequences, Seed, PresencePenalty and
// FrequencyPenalty to their chat fields, and ResponseMIMEType
// "application/json" to a JSON response_format. Answers map back: the
// message to one candidate's text part, finish_reason to FinishReason
// ("stop" STOP, "length" MAX_TOKENS, "content_filter" SAFETY, others
// OTHER), usage to UsageMetadata, the server's model to ModelVersion.
// Streams are read as server-sent events, usage included when the server
// sends it (stream_options.include_usage).
//
// Errors read as Gemini's do to geminiguard.Classify: an HTTP error is a
// genai.APIError value with the status code, the gRPC status name of that
// code and the server's message (429 a rate limit, honouring Retry-After;
// 5xx an overload or server error of this model; 400 the caller's request;
// 404 a model the server does not have); a transport failure (connection
// refused) is returned as the http.Client's error, a network failure; a
// stream that ends without a finish_reason ends with io.ErrUnexpectedEOF, a
// cut stream. What a chat server cannot take (a part that is not text,
// tools, a cached content, a response schema) fails before sending with a
// 400 genai.APIError saying it "is not supported by this model", which
// Classify scopes to this model alone, so the cascade goes on.
package openaicompat

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genai"

	"github.com/geminiguard/geminiguard"
)

// Client sends generation requests to one OpenAI-compatible server. It is
// safe for concurrent use. Create it with New; the zero value is not
// usable.
type Client struct {
	url    string // the chat completions endpoint
	http   *http.Client
	apiKey string
}

var _ geminiguard.Backend = (*Client)(nil)

// Option configures a Client.
type Option interface{ apply(*Client) }

type optionFunc func(*Client)

func (f optionFunc) apply(c *Client) { f(c) }

// WithHTTPClient sends the requests through hc. Default:
// http.DefaultClient.
func WithHTTPClient(hc *http.Client) Option {
	return optionFunc(func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	})
}

// WithAPIKey sends key as a bearer token (vLLM's and llama.cpp's --api-key).
// Default: no Authorization header.
func WithAPIKey(key string) Option {
	return optionFunc(func(c *Client) { c.apiKey = key })
}

// New returns a Client of the server at baseURL, e.g.
// "http://localhost:11434" (Ollama), "http://localhost:8080" (llama.cpp),
// "http://localhost:8000" (vLLM); a baseURL that ends in "/v1" is taken as
// the API's root. Nil options are ignored.
func New(baseURL string, opts ...Option) *Client {
	root := strings.TrimRight(baseURL, "/")
	if !strings.HasSuffix(root, "/v1") {
		root += "/v1"
	}
	c := &Client{url: root + "/chat/completions", http: http.DefaultClient}
	for _, o := range opts {
		if o != nil {
			o.apply(c)
		}
	}
	return c
}

// GenerateContent sends one chat completion request for model and returns
// its answer. Errors: see the package documentation.
func (c *Client) GenerateContent(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) (*genai.GenerateContentResponse, error) {
	resp, err := c.post(ctx, model, contents, config, false)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body completion
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("openaicompat: reading the answer: %w", err)
	}
	if body.Error != nil {
		return nil, body.Error.apiError(http.StatusInternalServerError)
	}
	out := body.response()
	for i, ch := range body.Choices {
		out.Candidates = append(out.Candidates, candidate(int32(i), ch.Message.Content, ch.FinishReason))
	}
	return out, nil
}

// GenerateContentStream sends one streamed chat completion request for
// model and yields its chunks, the last with its FinishReason and usage.
// Errors: see the package documentation; the first error ends the stream.
func (c *Client) GenerateContentStream(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig) iter.Seq2[*genai.GenerateContentResponse, error] {
	return func(yield func(*genai.GenerateContentResponse, error) bool) {
		resp, err := c.post(ctx, model, contents, config, true)
		if err != nil {
			yield(nil, err)
			return
		}
		defer resp.Body.Close()
		// The finish chunk is held until the stream ends: servers send the
		// usage after it, in a chunk without choices.
		var last *genai.GenerateContentResponse
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data:")
			if !ok {
				continue // comments, event names, blank separators
			}
			data = strings.TrimSpace(data)
			if data == "[DONE]" {
				break
			}
			var chunk completion
			if err := json.Unmarshal([]byte(data), &chunk); err != nil {
				yield(nil, fmt.Errorf("openaicompat: reading a stream event: %w", err))
				return
			}
			if chunk.Error != nil {
				yield(nil, chunk.Error.apiError(http.StatusInternalServerError))
				return
			}
			if chunk.Usage != nil && last != nil {
				last.UsageMetadata = chunk.Usage.metadata()
			}
			if len(chunk.Choices) == 0 || last != nil {
				continue
			}
			ch := chunk.Choices[0]
			out := chunk.response()
			if ch.Delta.Content == "" && ch.FinishReason == "" {
				continue // a role-only or empty delta: nothing to say
			}
			out.Candidates = []*genai.Candidate{candidate(0, ch.Delta.Content, ch.FinishReason)}
			if ch.FinishReason != "" {
				last = out
				continue
			}
			if !yield(out, nil) {
				return
			}
		}
		switch {
		case sc.Err() != nil:
			yield(nil, sc.Err())
		case last == nil:
			yield(nil, fmt.Errorf("openaicompat: the stream ended without a finish_reason: %w", io.ErrUnexpectedEOF))
		default:
			yield(last, nil)
		}
	}
}

// post sends the request and returns the server's 200 response; any other
// status is read into a genai.APIError.
func (c *Client) post(ctx context.Context, model string, contents []*genai.Content, config *genai.GenerateContentConfig, stream bool) (*http.Response, error) {
	req, err := request(model, contents, config, stream)
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, unsupported(fmt.Sprintf("the request (%v)", err))
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("openaicompat: %w", err)
	}
	hr.Header.Set("Content-Type", "application/json")
	if stream {
		hr.Header.Set("Accept", "text/event-stream")
	}
	if c.apiKey != "" {
		hr.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, httpError(resp)
}

// httpError reads a failed response into the genai.APIError Gemini would
// send for its status.
func httpError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var body struct {
		Error json.RawMessage `json:"error"`
	}
	e := &apiError{}
	if json.Unmarshal(raw, &body) == nil && len(body.Error) > 0 {
		if json.Unmarshal(body.Error, e) != nil {
			_ = json.Unmarshal(body.Error, &e.Message) // Ollama: {"error": "text"}
		}
	}
	if e.Message == "" {
		e.Message = strings.TrimSpace(string(raw))
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.StatusCode)
	}
	ae := e.apiError(resp.StatusCode)
	if d, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		ae.Details = append(ae.Details, map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"})
	}
	return ae
}

// retryAfter reads a Retry-After header of delay-seconds.
func retryAfter(h string) (time.Duration, bool) {
	n, err := strconv.Atoi(strings.TrimSpace(h))
	if err != nil || n < 0 {
		return 0, false
	}
	return time.Duration(n) * time.Second, true
}

// apiError is an OpenAI-style error object.
type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"` // a number (llama.cpp), a string (OpenAI), or null
}

// apiError returns e as a genai.APIError of status code, or of e's own
// numeric code when it has one (an error inside a 200 stream).
func (e *apiError) apiError(code int) genai.APIError {
	if n, ok := e.Code.(float64); ok && n >= 400 && n < 600 {
		code = int(n)
	}
	return genai.APIError{Code: code, Status: grpcStatus(code), Message: e.Message}
}

// grpcStatus is the status name Gemini sends with an HTTP code.
func grpcStatus(code int) string {
	switch code {
	case 400:
		return "INVALID_ARGUMENT"
	case 401:
		return "UNAUTHENTICATED"
	case 403:
		return "PERMISSION_DENIED"
	case 404:
		return "NOT_FOUND"
	case 409:
		return "ABORTED"
	case 429:
		return "RESOURCE_EXHAUSTED"
	case 499:
		return "CANCELLED"
	case 501:
		return "UNIMPLEMENTED"
	case 503:
		return "UNAVAILABLE"
	case 504:
		return "DEADLINE_EXCEEDED"
	}
	if code >= 500 {
		return "INTERNAL"
	}
	return "UNKNOWN"
}

// unsupported is the error of a request a chat server cannot take.
func unsupported(what string) error {
	return genai.APIError{Code: 400, Status: "INVALID_ARGUMENT", Message: "openaicompat: " + what + " is not supported by this model (an OpenAI-compatible chat server)"}
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	Model            string          `json:"model"`
	Messages         []message       `json:"messages"`
	Stream           bool            `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options,omitempty"`
	Temperature      *float32        `json:"temperature,omitempty"`
	TopP             *float32        `json:"top_p,omitempty"`
	MaxTokens        int32           `json:"max_tokens,omitempty"`
	Stop             []string        `json:"stop,omitempty"`
	Seed             *int32          `json:"seed,omitempty"`
	PresencePenalty  *float32        `json:"presence_penalty,omitempty"`
	FrequencyPenalty *float32        `json:"frequency_penalty,omitempty"`
	ResponseFormat   *responseFormat `json:"response_format,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type responseFormat struct {
	Type string `json:"type"`
}

type message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// request maps genai's request to a chat request.
func request(model string, contents []*genai.Content, config *genai.GenerateContentConfig, stream bool) (*chatRequest, error) {
	req := &chatRequest{Model: model, Stream: stream}
	if stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	if cfg := config; cfg != nil {
		switch {
		case len(cfg.Tools) > 0 || cfg.ToolConfig != nil:
			return nil, unsupported("tools")
		case cfg.CachedContent != "":
			return nil, unsupported("cached content")
		case cfg.ResponseSchema != nil || cfg.ResponseJsonSchema != nil:
			return nil, unsupported("a response schema")
		}
		if cfg.SystemInstruction != nil {
			text, err := textOf(cfg.SystemInstruction)
			if err != nil {
				return nil, err
			}
			req.Messages = append(req.Messages, message{Role: "system", Content: text})
		}
		req.Temperature, req.TopP, req.MaxTokens, req.Stop, req.Seed = cfg.Temperature, cfg.TopP, cfg.MaxOutputTokens, cfg.StopSequences, cfg.Seed
		req.PresencePenalty, req.FrequencyPenalty = cfg.PresencePenalty, cfg.FrequencyPenalty
		if cfg.ResponseMIMEType == "application/json" {
			req.ResponseFormat = &responseFormat{Type: "json_object"}
		}
	}
	for _, ct := range contents {
		if ct == nil {
			continue
		}
		text, err := textOf(ct)
		if err != nil {
			return nil, err
		}
		role := "user"
		if ct.Role == genai.RoleModel {
			role = "assistant"
		}
		req.Messages = append(req.Messages, message{Role: role, Content: text})
	}
	return req, nil
}

// textOf joins the text parts of ct; thoughts are left out.
func textOf(ct *genai.Content) (string, error) {
	var b strings.Builder
	for _, p := range ct.Parts {
		switch {
		case p == nil || p.Thought:
		case p.InlineData != nil || p.FileData != nil || p.FunctionCall != nil || p.FunctionResponse != nil || p.ExecutableCode != nil || p.CodeExecutionResult != nil:
			return "", unsupported("a part that is not text")
		default:
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// completion is a chat completion, or one chunk of a streamed one.
type completion struct {
	ID      string    `json:"id"`
	Created int64     `json:"created"`
	Model   string    `json:"model"`
	Choices []choice  `json:"choices"`
	Usage   *usage    `json:"usage"`
	Error   *apiError `json:"error"`
}

type choice struct {
	Message      message `json:"message"`
	Delta        message `json:"delta"`
	FinishReason string  `json:"finish_reason"`
}

type usage struct {
	PromptTokens     int32 `json:"prompt_tokens"`
	CompletionTokens int32 `json:"completion_tokens"`
	TotalTokens      int32 `json:"total_tokens"`
}

func (u *usage) metadata() *genai.GenerateContentResponseUsageMetadata {
	return &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: u.PromptTokens, CandidatesTokenCount: u.CompletionTokens, TotalTokenCount: u.TotalTokens}
}

// response returns the response of c, without candidates.
func (c *completion) response() *genai.GenerateContentResponse {
	out := &genai.GenerateContentResponse{ModelVersion: c.Model, ResponseID: c.ID}
	if c.Created > 0 {
		out.CreateTime = time.Unix(c.Created, 0).UTC()
	}
	if c.Usage != nil {
		out.UsageMetadata = c.Usage.metadata()
	}
	return out
}

// candidate returns one candidate of text: no parts when text is empty,
// as Gemini's empty answers have none.
func candidate(index int32, text, finish string) *genai.Candidate {
	ct := &genai.Content{Role: genai.RoleModel}
	if text != "" {
		ct.Parts = []*genai.Part{{Text: text}}
	}
	return &genai.Candidate{Index: index, Content: ct, FinishReason: finishReason(finish)}
}

// finishReason maps a chat finish_reason to Gemini's.
func finishReason(r string) genai.FinishReason {
	switch r {
	case "":
		return ""
	case "stop", "eos":
		return genai.FinishReasonStop
	case "length":
		return genai.FinishReasonMaxTokens
	case "content_filter":
		return genai.FinishReasonSafety
	}
	return genai.FinishReasonOther
}
