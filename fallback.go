package geminiguard

import (
	"context"
	"hash/fnv"
	"net/http"
	"slices"
	"strings"

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

// CategoryFallback returns a Fallback that answers with a plain text from a
// list per category, the same text for the same item every time: key
// returns the call's category and the id of its item (say, a wallpaper's
// category and its id, which the app may read from the request or put in
// ctx), and the answer is lists[category][h % len], where h is the 64-bit
// FNV-1a hash of category, a zero byte and id. The pick depends on nothing
// else: not the process, the time or the release, so a cached page or a
// second replica shows the same text; it changes only when the list does
// (adding a text moves most items to another). Over many ids each text of
// a list is picked about equally often. A category without a list, or with
// an empty one, uses lists[""] when that has texts, else gives no answer
// (the call returns its error). A nil key means category "" and the text
// of the request's contents as the id. lists is copied: later changes to it
// are not seen. The Fallback is safe for concurrent use if key is.
func CategoryFallback(lists map[string][]string, key func(ctx context.Context, req FallbackRequest) (category, id string)) Fallback {
	own := make(map[string][]string, len(lists))
	for k, v := range lists {
		if len(v) > 0 {
			own[k] = slices.Clone(v)
		}
	}
	if key == nil {
		key = contentsKey
	}
	return func(ctx context.Context, req FallbackRequest) (*genai.GenerateContentResponse, error) {
		category, id := key(ctx, req)
		list, ok := own[category]
		if !ok {
			if list, ok = own[""]; !ok {
				return nil, nil
			}
		}
		h := fnv.New64a()
		h.Write([]byte(category))
		h.Write([]byte{0})
		h.Write([]byte(id))
		return TextFallback(list[h.Sum64()%uint64(len(list))])(ctx, req)
	}
}

// contentsKey is CategoryFallback's key when none is given: category "",
// the text of the contents as the id.
func contentsKey(_ context.Context, req FallbackRequest) (string, string) {
	var b strings.Builder
	for _, c := range req.Contents {
		if c == nil {
			continue
		}
		for _, p := range c.Parts {
			if p != nil {
				b.WriteString(p.Text)
			}
		}
		b.WriteByte('\n')
	}
	return "", b.String()
}
