package geminiguard

import (
	"bytes"
	"encoding/base64"
	"hash/maphash"
	"iter"
	"slices"
	"sync"
	"sync/atomic"

	lru "github.com/hashicorp/golang-lru/v2"
	"google.golang.org/genai"
)

// Turns that move between models. Gemini 3 models sign their thought parts
// and the first function call of each step (thoughtSignature), and refuse a
// request whose current turn has a step's first call without a signature,
// or that carries a signature they did not make: "Corrupted thought
// signature." once the cascade sends a history to a model other than the one
// that answered it. Google's documentation
// (https://ai.google.dev/gemini-api/docs/thought-signatures) says what a
// client does then: signatures go back exactly as received to the model
// that made them; for a call that model did not make, a documented stand-in
// signature tells it to skip the check. So each attempt sends its model a
// copy of the contents in which the signatures of other models are dropped,
// and the first function call of each model turn of the current turn that
// has none then carries the stand-in (as Google's own Gemini CLI does when
// it switches models). Which model made a signature is what the Client
// remembers of its answers; one it never received (the caller's own
// history) is taken to be the call's first model's.

// maxSigners bounds the signatures the Client remembers; the least recently
// seen are forgotten first (then taken to be the first model's).
const maxSigners = 1 << 14

// standInSignature is the documented "skip_thought_signature_validator".
// The field is bytes sent as base64, so it holds that string decoded: the
// SDK encodes it with the standard alphabet ('/' for '_'), which the API
// decodes to the same bytes.
var standInSignature, _ = base64.URLEncoding.DecodeString("skip_thought_signature_validator")

// signers remembers which model made each thought signature the Client
// received, by a hash of its bytes. Safe for concurrent use; the zero value
// is ready and holds nothing until a signature arrives.
type signers struct {
	once sync.Once
	book atomic.Pointer[signerBook] // nil until the first signature
}

type signerBook struct {
	seed   maphash.Seed
	byHash *lru.Cache[uint64, string] // model name by signature hash
}

// built returns the book, building it on first use.
func (s *signers) built() *signerBook {
	s.once.Do(func() {
		b := &signerBook{seed: maphash.MakeSeed()}
		b.byHash, _ = lru.New[uint64, string](maxSigners) // fails only for a size below 1
		s.book.Store(b)
	})
	return s.book.Load()
}

// learn remembers model as the maker of the signatures in resp.
func (s *signers) learn(model string, resp *genai.GenerateContentResponse) {
	if resp == nil {
		return
	}
	for _, cand := range resp.Candidates {
		if cand == nil || cand.Content == nil {
			continue
		}
		for _, p := range cand.Content.Parts {
			if p != nil && len(p.ThoughtSignature) > 0 && !bytes.Equal(p.ThoughtSignature, standInSignature) {
				b := s.built()
				b.byHash.Add(maphash.Bytes(b.seed, p.ThoughtSignature), model)
			}
		}
	}
}

// learnStream passes seq through, learning model's signatures from its
// chunks.
func (s *signers) learnStream(model string, seq iter.Seq2[*genai.GenerateContentResponse, error]) iter.Seq2[*genai.GenerateContentResponse, error] {
	return func(yield func(*genai.GenerateContentResponse, error) bool) {
		for resp, err := range seq {
			if err == nil {
				s.learn(model, resp)
			}
			if !yield(resp, err) {
				return
			}
		}
	}
}

// made reports whether sig is model's: remembered as model's, or unknown
// and first is model (the caller's own history goes to its first model as
// it is). The stand-in is anyone's.
func (s *signers) made(sig []byte, model, first string) bool {
	if bytes.Equal(sig, standInSignature) {
		return true
	}
	maker := first
	if b := s.book.Load(); b != nil {
		if m, ok := b.byHash.Get(maphash.Bytes(b.seed, sig)); ok {
			maker = m
		}
	}
	return maker == model
}

// contentsFor returns contents as model is sent them on a call whose first
// model is first (see the top of this file): contents itself when nothing
// changes, else a copy that shares every content and part it does not
// change. contents is never written.
func (s *signers) contentsFor(model, first string, contents []*genai.Content) []*genai.Content {
	current := currentTurn(contents)
	var out []*genai.Content // nil until a content changes
	for i, c := range contents {
		if c == nil || c.Role == genai.RoleUser {
			continue
		}
		if fixed := s.turnFor(model, first, c, i >= current); fixed != c {
			if out == nil {
				out = slices.Clone(contents)
			}
			out[i] = fixed
		}
	}
	if out == nil {
		return contents
	}
	return out
}

// turnFor returns the model turn c as model is sent it: c itself, or a copy
// with other models' signatures dropped and, in the current turn, the
// stand-in on a first function call left without a signature.
func (s *signers) turnFor(model, first string, c *genai.Content, current bool) *genai.Content {
	var parts []*genai.Part // nil until a part changes
	firstCall := current    // the next function call is its step's first, and checked
	for j, p := range c.Parts {
		if p == nil {
			continue
		}
		sig, changed := p.ThoughtSignature, false
		if len(sig) > 0 && !s.made(sig, model, first) {
			sig, changed = nil, true
		}
		if p.FunctionCall != nil {
			if firstCall && len(sig) == 0 {
				sig, changed = standInSignature, true
			}
			firstCall = false
		}
		if !changed {
			continue
		}
		if parts == nil {
			parts = slices.Clone(c.Parts)
		}
		fixed := *p
		fixed.ThoughtSignature = sig
		parts[j] = &fixed
	}
	if parts == nil {
		return c
	}
	turn := *c
	turn.Parts = parts
	return &turn
}

// currentTurn returns the index of the last user content that is not only
// function responses: the turn the API checks function call signatures in
// starts there (0 when there is none).
func currentTurn(contents []*genai.Content) int {
	for i := len(contents) - 1; i >= 0; i-- {
		c := contents[i]
		if c == nil || c.Role != genai.RoleUser {
			continue
		}
		for _, p := range c.Parts {
			if p != nil && p.FunctionResponse == nil {
				return i
			}
		}
	}
	return 0
}

// turnsFor returns the call's contents as m is sent them (contentsFor).
func (call *call[R]) turnsFor(m *modelState) []*genai.Content {
	return call.c.signers.contentsFor(m.name, call.firstModel(), call.contents)
}
