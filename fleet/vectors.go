package fleet

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"time"
)

// The bounds of a VectorStore.
const (
	// MaxVectors is how many entries a VectorStore keeps per project and
	// scope at most: the newest; an older one is dropped when a newer one
	// comes.
	MaxVectors = 1000
	// VectorsPerRead is how many entries one Vectors call returns at most,
	// so that a round trip stays within the Client's bound of tens of
	// milliseconds (100 entries of 768 dimensions are about 300 KB of
	// vectors, plus the answers).
	VectorsPerRead = 100
)

// VectorStore is a SharedState that also keeps the entries of the
// replicas' semantic caches (geminiguard.NewSemanticCache), so that a
// replica whose every model failed can be served an answer another replica
// stored for a request worded alike. geminiguard.WithSharedState uses it
// when the store has it; without it, each Client's SemanticCache keeps its
// own entries. redisstore's Store and NewMemoryState's store are
// VectorStores. It is an optional interface, as AnswerStore is, so that a
// SharedState need not keep vectors.
//
// Entries are kept by project (a hash, as LeaseRequest.Project) and scope:
// a model family and a hex SHA-256 of the request's config, so that an
// entry answers requests of the family and config that filled it only.
// An entry holds no prompt: its key and template are hashes (see
// VectorEntry). The Client changes neither the slices it gives AddVector
// nor those Vectors returns, so a store may keep and return them. Errors
// never fail a call: the Client then matches among its own entries only
// (see geminiguard.WithSharedState for the deadline and breaker around
// every call to the store).
type VectorStore interface {
	// AddVector keeps e under project and scope for ttl, beside the
	// scope's other entries (even one of the same key: the Client keeps
	// the later), the newest MaxVectors of the scope at most. e.Expires is
	// ignored.
	AddVector(ctx context.Context, project, scope string, e VectorEntry, ttl time.Duration) error
	// Vectors returns, oldest first, at most VectorsPerRead of the
	// entries of project and scope added after the mark after (all of
	// them when after is ""), leaving out the expired ones, each with its
	// Expires; and the mark of the last entry read, after when none was.
	// A mark is the store's own string: the Client only passes back what
	// Vectors returned. Entries dropped by MaxVectors before they were
	// read are never returned.
	Vectors(ctx context.Context, project, scope, after string) ([]VectorEntry, string, error)
}

// VectorEntry is one answer of a semantic cache as a VectorStore keeps it.
type VectorEntry struct {
	// Key is the exact key of the request that got the answer: a model
	// family, ":" and a hex SHA-256 of the request (never its text).
	Key string
	// Template is a hex SHA-256 of the request's template
	// (geminiguard.SemanticCacheConfig.Template); "" for none.
	Template string
	// Vector is the embedding of the request's text, normalised to length
	// 1; nil for none.
	Vector []float32
	// Answer is the response's JSON.
	Answer []byte
	// Expires is when the store drops the entry (its own clock): set by
	// Vectors.
	Expires time.Time
}

var _ VectorStore = (*memoryState)(nil)

// memVectors is a memoryState's VectorStore part; the memoryState's mu
// guards it.
type memVectors struct {
	seq    uint64                 // the mark of the latest entry added, in any scope
	scopes map[string][]memVector // project + "\x00" + scope → its entries, oldest first
	swept  time.Time              // when scopes with no live entry were last dropped
}

// memVector is a kept VectorEntry and its mark.
type memVector struct {
	seq uint64
	e   VectorEntry
}

// AddVector implements VectorStore; it fails only when ctx ended.
func (s *memoryState) AddVector(ctx context.Context, project, scope string, e VectorEntry, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := time.Now()
	e.Expires = now.Add(ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	v := &s.vectors
	if v.scopes == nil {
		v.scopes = make(map[string][]memVector)
	}
	if now.Sub(v.swept) >= answerSweep {
		for k, list := range v.scopes {
			if !slices.ContainsFunc(list, func(m memVector) bool { return now.Before(m.e.Expires) }) {
				delete(v.scopes, k)
			}
		}
		v.swept = now
	}
	v.seq++
	k := project + "\x00" + scope
	list := append(v.scopes[k], memVector{seq: v.seq, e: e})
	if len(list) > MaxVectors {
		list = list[len(list)-MaxVectors:] // the next append that grows it copies the kept ones only
	}
	v.scopes[k] = list
	return nil
}

// Vectors implements VectorStore; its marks are decimal sequence numbers
// (after, when not one, reads from the start). It fails only when ctx
// ended.
func (s *memoryState) Vectors(ctx context.Context, project, scope, after string) ([]VectorEntry, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	from, _ := strconv.ParseUint(after, 10, 64) // "" or not a mark of its own: from the start
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	list := s.vectors.scopes[project+"\x00"+scope]
	i, _ := slices.BinarySearchFunc(list, from+1, func(m memVector, seq uint64) int { return cmp.Compare(m.seq, seq) })
	list = list[i:min(len(list), i+VectorsPerRead)]
	var out []VectorEntry
	for _, m := range list {
		if now.Before(m.e.Expires) {
			out = append(out, m.e)
		}
	}
	if len(list) > 0 {
		after = strconv.FormatUint(list[len(list)-1].seq, 10)
	}
	return out, after, nil
}
