package geminiguard

import (
	"net/http"

	"google.golang.org/genai"
)

// fallbackHeader is the header that marks, in SDKHTTPResponse, a response
// the Fallback gave. The Gemini API never sends it.
const fallbackHeader = "X-Geminiguard-Fallback"

// IsFallback reports whether resp is the Fallback's answer (WithFallback)
// rather than a model's: a batch job checks it before storing the answer as
// a real one. It is false for nil and for every answer a model gave.
//
// The Client marks the copy of the Fallback's response it returns, never
// the value the Fallback returned (which may be shared): its SDKHTTPResponse
// carries the Fallback's headers, if any, plus "X-Geminiguard-Fallback: 1",
// and an empty ModelVersion becomes FallbackModelVersion. The mark holds
// whatever ModelVersion the Fallback sets (a cache that stores models'
// answers keeps their ModelVersion) and survives a JSON round trip of the
// response. Its limit: it is a header, so a response built or edited by
// hand with that header also reads as a Fallback's, and one whose
// SDKHTTPResponse was cleared does not.
func IsFallback(resp *genai.GenerateContentResponse) bool {
	return resp != nil && resp.SDKHTTPResponse != nil && resp.SDKHTTPResponse.Headers.Get(fallbackHeader) != ""
}

// markFallback returns a copy of the Fallback's response that IsFallback
// recognises. resp itself, possibly shared, is never written: the copy
// gets its own SDKHTTPResponse and headers.
func markFallback(resp *genai.GenerateContentResponse) *genai.GenerateContentResponse {
	marked := *resp
	if marked.ModelVersion == "" {
		marked.ModelVersion = FallbackModelVersion
	}
	var h http.Header
	if r := resp.SDKHTTPResponse; r != nil {
		sdk := *r
		marked.SDKHTTPResponse = &sdk
		h = r.Headers.Clone()
	} else {
		marked.SDKHTTPResponse = &genai.HTTPResponse{}
	}
	if h == nil {
		h = make(http.Header, 1)
	}
	h.Set(fallbackHeader, "1")
	marked.SDKHTTPResponse.Headers = h
	return &marked
}
