package geminiguard

import (
	"encoding"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"google.golang.org/genai"
)

// requestError is a request refused before anything was sent: one the SDK
// could not encode as JSON (it would post an empty body to a malformed
// path), one with a nil element (the SDK would panic on most), or one
// without contents. Classify reads it
// as bad_request, scope request; it matches no sentinel. It stays
// unexported: Classify tells it apart, and its message says what to fix.
type requestError struct {
	where string // the argument and the path within it: "GenerateContentConfig.Temperature"
	what  string // what is wrong with it: "is NaN"
	fix   string // what to do instead
}

func (e *requestError) Error() string {
	return "geminiguard: " + e.where + " " + e.what + ": " + e.fix
}

// under prefixes e's path with the path of the value that holds it, keeping
// its first maxPath bytes (a cycle would name a thousand levels).
func (e *requestError) under(prefix string) *requestError {
	e.where = prefix + e.where
	if len(e.where) > maxPath {
		cut := strings.LastIndexAny(e.where[:maxPath], ".[")
		if cut <= 0 {
			cut = maxPath
		}
		e.where = e.where[:cut] + "..."
	}
	return e
}

// maxPath bounds the length of the path a requestError names.
const maxPath = 200

// maxDepth bounds how deep values are walked; deeper is taken for a cycle,
// which JSON cannot encode either.
const maxDepth = 1000

const (
	fixNilContent = "remove it, or give it parts"
	fixNilElement = "remove it"
	fixNoContents = `pass at least one content, e.g. genai.Text("...")`
	fixNumber     = "use a finite number (JSON has no NaN or infinities)"
)

// checkGenerate checks the arguments of GenerateContent and
// GenerateContentStream before anything is sent: what the SDK cannot send
// (contentsFlaw) and what the API certainly refuses with a 400
// (turnsFlaw). It returns nil or a *requestError. It does not allocate
// when the request is fine.
func checkGenerate(contents []*genai.Content, config *genai.GenerateContentConfig) error {
	if e := contentsFlaw(contents); e != nil {
		return e
	}
	if e := turnsFlaw(contents); e != nil {
		return e
	}
	if config == nil {
		return nil
	}
	if e := generateConfigFlaw(config); e != nil {
		return e.under("GenerateContentConfig")
	}
	return nil
}

// checkContents checks contents as checkGenerate does, for a call with no
// config to check (CountTokens).
func checkContents(contents []*genai.Content) error {
	if e := contentsFlaw(contents); e != nil {
		return e
	}
	return nil
}

// checkEmbed checks the arguments of EmbedContent as checkGenerate does.
func checkEmbed(contents []*genai.Content, config *genai.EmbedContentConfig) error {
	if e := contentsFlaw(contents); e != nil {
		return e
	}
	if config != nil && config.HTTPOptions != nil {
		if e := mapFlaw(config.HTTPOptions.ExtraBody, 0); e != nil {
			return e.under("EmbedContentConfig.HTTPOptions.ExtraBody")
		}
	}
	return nil
}

func contentsFlaw(contents []*genai.Content) *requestError {
	if len(contents) == 0 {
		return &requestError{where: "contents", what: "is empty", fix: fixNoContents}
	}
	for i, c := range contents {
		if c == nil {
			return &requestError{where: "contents[" + strconv.Itoa(i) + "]", what: "is nil", fix: fixNilContent}
		}
		if e := contentFlaw(c); e != nil {
			return e.under("contents[" + strconv.Itoa(i) + "]")
		}
	}
	return nil
}

func contentFlaw(c *genai.Content) *requestError {
	for i, p := range c.Parts {
		if p == nil {
			return &requestError{where: ".Parts[" + strconv.Itoa(i) + "]", what: "is nil", fix: fixNilElement}
		}
		if e := partFlaw(p); e != nil {
			return e.under(".Parts[" + strconv.Itoa(i) + "]")
		}
	}
	return nil
}

func partFlaw(p *genai.Part) *requestError {
	if fc := p.FunctionCall; fc != nil {
		if e := mapFlaw(fc.Args, 0); e != nil {
			return e.under(".FunctionCall.Args")
		}
		for i, a := range fc.PartialArgs {
			if a == nil {
				continue
			}
			if e := float64Flaw(a.NumberValue); e != nil {
				return e.under(".FunctionCall.PartialArgs[" + strconv.Itoa(i) + "].NumberValue")
			}
		}
	}
	if fr := p.FunctionResponse; fr != nil {
		if e := mapFlaw(fr.Response, 0); e != nil {
			return e.under(".FunctionResponse.Response")
		}
	}
	if tc := p.ToolCall; tc != nil {
		if e := mapFlaw(tc.Args, 0); e != nil {
			return e.under(".ToolCall.Args")
		}
	}
	if tr := p.ToolResponse; tr != nil {
		if e := mapFlaw(tr.Response, 0); e != nil {
			return e.under(".ToolResponse.Response")
		}
	}
	if len(p.PartMetadata) > 0 {
		if e := mapFlaw(p.PartMetadata, 0); e != nil {
			return e.under(".PartMetadata")
		}
	}
	if vm := p.VideoMetadata; vm != nil {
		if e := float64Flaw(vm.FPS); e != nil {
			return e.under(".VideoMetadata.FPS")
		}
	}
	return nil
}

// turnsFlaw reports, in contents that contentsFlaw passed, what the API
// refuses with a 400 INVALID_ARGUMENT whatever the model: a content
// without parts ("contents.parts must not be empty"), a role other than
// "user" and "model" (or none: the API takes it for "user") ("Please use a
// valid role: user, model."), a part with no field set, such as an empty
// text ("required oneof field 'data' must have one initialized field"),
// and a content of function responses that does not come right after a
// model content with as many function calls ("Please ensure that function
// response turn comes immediately after a function call turn.", "... the
// number of function response parts is equal to the number of function
// call parts ..."). A part with any field set passes, a thought part with
// only its signature among them; so does a content that mixes function
// responses with other parts.
func turnsFlaw(contents []*genai.Content) *requestError {
	at := func(i int) string { return "contents[" + strconv.Itoa(i) + "]" } // only for an error
	for i, c := range contents {
		if len(c.Parts) == 0 {
			return &requestError{where: at(i) + ".Parts", what: "is empty", fix: "give it a part, or remove the content (the API refuses a content without parts)"}
		}
		if !validRole(c.Role) {
			return roleFlaw(c.Role).under(at(i) + ".Role")
		}
		responses := 0
		for j, p := range c.Parts {
			if emptyPart(p) {
				return &requestError{where: at(i) + ".Parts[" + strconv.Itoa(j) + "]", what: "is empty (no text, no data)",
					fix: "give it text or other data, or remove it (the API refuses a part without data)"}
			}
			if p.FunctionResponse != nil {
				responses++
			}
		}
		if responses > 0 {
			if e := responsesFlaw(contents, i, responses); e != nil {
				return e.under(at(i))
			}
		}
	}
	return nil
}

// emptyPart reports whether p has no field set. A text part costs a
// comparison (inlined); any other, noData.
func emptyPart(p *genai.Part) bool {
	return p.Text == "" && noData(p)
}

// noData reports whether p, a part without text, has no other field set:
// the common parts are checked directly, any other by reflection, so that a
// field a later SDK adds counts as data.
func noData(p *genai.Part) bool {
	if p.InlineData != nil || p.FunctionCall != nil || p.FunctionResponse != nil || p.FileData != nil {
		return false
	}
	return reflect.ValueOf(p).Elem().IsZero()
}

// validRole reports whether the API takes role as a content's role: "user",
// "model", or none (taken for "user").
func validRole(role string) bool {
	return role == "" || role == genai.RoleUser || role == genai.RoleModel
}

// roleFlaw reports a content role the API refuses (validRole false), with
// the role to use; nil for a valid one.
func roleFlaw(role string) *requestError {
	var fix string
	switch role {
	case "", genai.RoleUser, genai.RoleModel:
		return nil
	case "assistant", "bot", "ai":
		fix = `use "model" (genai.RoleModel) for the model's turns: the API takes "user" and "model" only`
	case "system", "developer":
		fix = `put the instruction in GenerateContentConfig.SystemInstruction, or use "user": the API takes "user" and "model" only`
	case "tool", "function":
		fix = `use "user" (genai.RoleUser): function responses go in a user content`
	default:
		fix = `use "user" or "model": the API takes no other role`
	}
	return &requestError{what: "is " + strconv.Quote(role), fix: fix}
}

// responsesFlaw reports a content contents[i] holding responses function
// responses that does not answer the function calls of the model content
// right before it, one response per call.
func responsesFlaw(contents []*genai.Content, i, responses int) *requestError {
	const fix = "put the model content with the function calls right before it, and answer each call with one function response"
	if i == 0 {
		return &requestError{what: "holds function responses with no model content with function calls before it", fix: fix}
	}
	prev := contents[i-1]
	calls := 0
	if prev.Role == genai.RoleModel {
		for _, p := range prev.Parts {
			if p.FunctionCall != nil {
				calls++
			}
		}
	}
	before := "contents[" + strconv.Itoa(i-1) + "]"
	switch {
	case prev.Role != genai.RoleModel:
		return &requestError{what: "holds function responses, but " + before + " before it is not a model content (Role " + strconv.Quote(prev.Role) + ")", fix: fix}
	case calls == 0:
		return &requestError{what: "holds function responses, but " + before + " holds no function call", fix: fix}
	case calls != responses:
		return &requestError{what: "holds " + plural(responses, "function response") + ", but " + before + " holds " + plural(calls, "function call"), fix: fix}
	}
	return nil
}

// plural writes n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

func generateConfigFlaw(c *genai.GenerateContentConfig) *requestError {
	for _, f := range [...]struct {
		name string
		v    *float32
	}{
		{".Temperature", c.Temperature},
		{".TopP", c.TopP},
		{".TopK", c.TopK},
		{".PresencePenalty", c.PresencePenalty},
		{".FrequencyPenalty", c.FrequencyPenalty},
	} {
		if e := float32Flaw(f.v); e != nil {
			return e.under(f.name)
		}
	}
	if si := c.SystemInstruction; si != nil {
		if e := contentFlaw(si); e != nil {
			return e.under(".SystemInstruction")
		}
	}
	if e := schemaFlaw(c.ResponseSchema, 0); e != nil {
		return e.under(".ResponseSchema")
	}
	if e := anyFlaw(c.ResponseJsonSchema, 0); e != nil {
		return e.under(".ResponseJsonSchema")
	}
	for i, ss := range c.SafetySettings {
		if ss == nil {
			return &requestError{where: ".SafetySettings[" + strconv.Itoa(i) + "]", what: "is nil", fix: fixNilElement}
		}
	}
	for i, t := range c.Tools {
		if t == nil {
			return &requestError{where: ".Tools[" + strconv.Itoa(i) + "]", what: "is nil", fix: fixNilElement}
		}
		if e := toolFlaw(t); e != nil {
			return e.under(".Tools[" + strconv.Itoa(i) + "]")
		}
	}
	if tc := c.ToolConfig; tc != nil && tc.RetrievalConfig != nil && tc.RetrievalConfig.LatLng != nil {
		ll := tc.RetrievalConfig.LatLng
		if e := float64Flaw(ll.Latitude); e != nil {
			return e.under(".ToolConfig.RetrievalConfig.LatLng.Latitude")
		}
		if e := float64Flaw(ll.Longitude); e != nil {
			return e.under(".ToolConfig.RetrievalConfig.LatLng.Longitude")
		}
	}
	if h := c.HTTPOptions; h != nil {
		if e := mapFlaw(h.ExtraBody, 0); e != nil {
			return e.under(".HTTPOptions.ExtraBody")
		}
	}
	return nil
}

func toolFlaw(t *genai.Tool) *requestError {
	for i, fd := range t.FunctionDeclarations {
		if fd == nil {
			continue
		}
		at := ".FunctionDeclarations[" + strconv.Itoa(i) + "]"
		if e := schemaFlaw(fd.Parameters, 0); e != nil {
			return e.under(at + ".Parameters")
		}
		if e := anyFlaw(fd.ParametersJsonSchema, 0); e != nil {
			return e.under(at + ".ParametersJsonSchema")
		}
		if e := schemaFlaw(fd.Response, 0); e != nil {
			return e.under(at + ".Response")
		}
		if e := anyFlaw(fd.ResponseJsonSchema, 0); e != nil {
			return e.under(at + ".ResponseJsonSchema")
		}
	}
	if g := t.GoogleSearchRetrieval; g != nil && g.DynamicRetrievalConfig != nil {
		if e := float32Flaw(g.DynamicRetrievalConfig.DynamicThreshold); e != nil {
			return e.under(".GoogleSearchRetrieval.DynamicRetrievalConfig.DynamicThreshold")
		}
	}
	// The rarer tools, walked by reflection.
	for _, f := range [...]struct {
		name string
		v    any
	}{
		{".Retrieval", t.Retrieval},
		{".ParallelAISearch", t.ParallelAISearch},
		{".ExaAISearch", t.ExaAISearch},
	} {
		if e := anyFlaw(f.v, 0); e != nil {
			return e.under(f.name)
		}
	}
	return nil
}

func schemaFlaw(s *genai.Schema, depth int) *requestError {
	if s == nil {
		return nil
	}
	if depth > maxDepth {
		return tooDeep()
	}
	if e := float64Flaw(s.Minimum); e != nil {
		return e.under(".Minimum")
	}
	if e := float64Flaw(s.Maximum); e != nil {
		return e.under(".Maximum")
	}
	if e := anyFlaw(s.Default, depth+1); e != nil {
		return e.under(".Default")
	}
	if e := anyFlaw(s.Example, depth+1); e != nil {
		return e.under(".Example")
	}
	if e := schemaFlaw(s.Items, depth+1); e != nil {
		return e.under(".Items")
	}
	for k, p := range s.Properties {
		if e := schemaFlaw(p, depth+1); e != nil {
			return e.under(".Properties[" + strconv.Quote(k) + "]")
		}
	}
	for i, a := range s.AnyOf {
		if e := schemaFlaw(a, depth+1); e != nil {
			return e.under(".AnyOf[" + strconv.Itoa(i) + "]")
		}
	}
	return nil
}

func float32Flaw(f *float32) *requestError {
	if f == nil {
		return nil
	}
	return numberFlaw(float64(*f))
}

func float64Flaw(f *float64) *requestError {
	if f == nil {
		return nil
	}
	return numberFlaw(*f)
}

// numberFlaw reports a number JSON cannot carry.
func numberFlaw(f float64) *requestError {
	switch {
	case math.IsNaN(f):
		return &requestError{what: "is NaN", fix: fixNumber}
	case math.IsInf(f, 1):
		return &requestError{what: "is +Inf", fix: fixNumber}
	case math.IsInf(f, -1):
		return &requestError{what: "is -Inf", fix: fixNumber}
	}
	return nil
}

func tooDeep() *requestError {
	return &requestError{what: "nests more than " + strconv.Itoa(maxDepth) + " levels deep", fix: "remove the cycle: JSON cannot encode one"}
}

func mapFlaw(m map[string]any, depth int) *requestError {
	if depth > maxDepth {
		return tooDeep()
	}
	for k, v := range m {
		if e := anyFlaw(v, depth+1); e != nil {
			return e.under("[" + strconv.Quote(k) + "]")
		}
	}
	return nil
}

// anyFlaw reports what JSON encoding of v would fail on: the JSON shapes
// directly, anything else by reflection.
func anyFlaw(v any, depth int) *requestError {
	switch x := v.(type) {
	case nil, string, bool, int, int64, int32, json.Number, json.RawMessage:
		return nil
	case float64:
		return numberFlaw(x)
	case float32:
		return numberFlaw(float64(x))
	case map[string]any:
		return mapFlaw(x, depth)
	case []any:
		if depth > maxDepth {
			return tooDeep()
		}
		for i, e := range x {
			if f := anyFlaw(e, depth+1); f != nil {
				return f.under("[" + strconv.Itoa(i) + "]")
			}
		}
		return nil
	}
	return valueFlaw(reflect.ValueOf(v), depth)
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// valueFlaw is anyFlaw by reflection, over what encoding/json would visit.
// A type with its own MarshalJSON or MarshalText is trusted.
func valueFlaw(v reflect.Value, depth int) *requestError {
	if !v.IsValid() {
		return nil
	}
	if depth > maxDepth {
		return tooDeep()
	}
	if t := v.Type(); t.Implements(jsonMarshaler) || t.Implements(textMarshaler) ||
		reflect.PointerTo(t).Implements(jsonMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) {
		return nil
	}
	switch v.Kind() {
	case reflect.Float32, reflect.Float64:
		return numberFlaw(v.Float())
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return valueFlaw(v.Elem(), depth+1)
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // base64
		}
		for i := range v.Len() {
			if e := valueFlaw(v.Index(i), depth+1); e != nil {
				return e.under("[" + strconv.Itoa(i) + "]")
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			if e := valueFlaw(it.Value(), depth+1); e != nil {
				return e.under("[" + mapKey(it.Key()) + "]")
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || f.Tag.Get("json") == "-" {
				continue
			}
			if e := valueFlaw(v.Field(i), depth+1); e != nil {
				return e.under("." + f.Name)
			}
		}
	case reflect.Chan, reflect.Func, reflect.Complex64, reflect.Complex128, reflect.UnsafePointer:
		return &requestError{what: "is a " + v.Kind().String(), fix: "JSON cannot encode it: use numbers, strings, booleans, maps and slices"}
	}
	return nil
}

// mapKey writes a map key as a path element.
func mapKey(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return strconv.Quote(k.String())
	}
	return fmt.Sprint(k)
}
