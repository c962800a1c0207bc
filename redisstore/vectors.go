package redisstore

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
)

var _ fleet.VectorStore = (*Store)(nil)

// addVectorScript is Store.AddVector: one XADD on Redis's clock, the
// stream trimmed to its newest ARGV[6] entries and kept at least the
// entry's TTL.
//
// KEYS[1] the scope's stream. ARGV: key, template, vector, answer, TTL
// (ms), the entries kept.
var addVectorScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[5])
redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[6], '*',
  'k', ARGV[1], 't', ARGV[2], 'v', ARGV[3], 'a', ARGV[4], 'x', string.format('%d', now + ttl))
if redis.call('PTTL', KEYS[1]) < ttl then
  redis.call('PEXPIRE', KEYS[1], ttl)
end
return 1
`)

// vectorsScript is Store.Vectors: one XRANGE after the mark, the expired
// entries left out on Redis's clock. It returns the mark of the last
// entry read (ARGV[1] when none), then {key, template, vector, answer,
// expiry} per live entry.
//
// KEYS[1] the scope's stream. ARGV: the mark ("" for the start), the most
// entries read.
var vectorsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local start = '-'
if ARGV[1] ~= '' then start = '(' .. ARGV[1] end
local out = {ARGV[1]}
for _, row in ipairs(redis.call('XRANGE', KEYS[1], start, '+', 'COUNT', ARGV[2])) do
  out[1] = row[1]
  local f = {}
  for i = 1, #row[2], 2 do f[row[2][i]] = row[2][i + 1] end
  local x = tonumber(f.x)
  if x and x > now then
    out[#out + 1] = {f.k or '', f.t or '', f.v or '', f.a or '', f.x}
  end
end
return out
`)

// vectorKey returns the stream of project's scope: prefix:{project}:vec:scope.
func (s *Store) vectorKey(project, scope string) string {
	return s.base(project) + "vec:" + scope
}

// AddVector implements fleet.VectorStore in one round trip: XADD to the
// stream prefix:{project}:vec:scope (MAXLEN fleet.MaxVectors), whose
// entries hold e's key, template digest, vector (little-endian float32s)
// and answer, and its expiry on Redis's clock; the stream expires with its
// latest entry. It returns ctx's error when ctx ended, an error for an
// empty project, and Redis's or the connection's error wrapped otherwise.
func (s *Store) AddVector(ctx context.Context, project, scope string, e fleet.VectorEntry, ttl time.Duration) error {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return err
	}
	if project == "" {
		return errNoProject
	}
	_, err := await(ctx, s.watchesCtx, func() (struct{}, error) {
		return struct{}{}, addVectorScript.Run(ctx, s.rdb, []string{s.vectorKey(project, scope)},
			e.Key, e.Template, encodeVector(e.Vector), e.Answer, max(ceilMillis(ttl), 1), fleet.MaxVectors).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: add vector: %w", err)
	}
	return nil
}

// Vectors implements fleet.VectorStore in one round trip (XRANGE, at most
// fleet.VectorsPerRead entries); its marks are the stream's entry ids. It
// returns ctx's error when ctx ended, an error for an empty project, and
// Redis's or the connection's error wrapped otherwise (a mark not of a
// stream is Redis's error).
func (s *Store) Vectors(ctx context.Context, project, scope, after string) ([]fleet.VectorEntry, string, error) {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return nil, "", err
	}
	if project == "" {
		return nil, "", errNoProject
	}
	res, err := await(ctx, s.watchesCtx, func() ([]any, error) {
		return vectorsScript.Run(ctx, s.rdb, []string{s.vectorKey(project, scope)}, after, fleet.VectorsPerRead).Slice()
	})
	if err != nil {
		return nil, "", fmt.Errorf("redisstore: vectors: %w", err)
	}
	return parseVectors(res)
}

// parseVectors reads vectorsScript's answer.
func parseVectors(res []any) ([]fleet.VectorEntry, string, error) {
	bad := func(what string) ([]fleet.VectorEntry, string, error) {
		return nil, "", fmt.Errorf("redisstore: vectors: unexpected answer from the script (%s)", what)
	}
	if len(res) == 0 {
		return bad("length")
	}
	mark, ok := res[0].(string)
	if !ok {
		return bad("mark")
	}
	var out []fleet.VectorEntry
	for _, raw := range res[1:] {
		row, ok := raw.([]any)
		if !ok || len(row) != 5 {
			return bad("entry")
		}
		var f [5]string
		for i := range f {
			if f[i], ok = row[i].(string); !ok {
				return bad("field")
			}
		}
		vec, ok := decodeVector(f[2])
		x, err := strconv.ParseInt(f[4], 10, 64)
		if !ok || err != nil {
			return bad("vector or expiry")
		}
		out = append(out, fleet.VectorEntry{Key: f[0], Template: f[1], Vector: vec, Answer: []byte(f[3]), Expires: time.UnixMilli(x)})
	}
	return out, mark, nil
}

// encodeVector returns v as little-endian float32s; empty for none.
func encodeVector(v []float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// decodeVector reads encodeVector's bytes: nil for none, false when they
// are not float32s.
func decodeVector(s string) ([]float32, bool) {
	if len(s)%4 != 0 {
		return nil, false
	}
	if s == "" {
		return nil, true
	}
	b := []byte(s)
	v := make([]float32, len(b)/4)
	for i := range v {
		v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return v, true
}
