package geminiguard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/geminiguard/geminiguard/fleet"
)

// templateDigest returns the hex SHA-256 of a request's template, what a
// SemanticCache keeps and shares of it: the template holds prompt text.
func templateDigest(template string) string {
	h := sha256.Sum256([]byte("geminiguard template\x00" + template))
	return hex.EncodeToString(h[:])
}

// vectorStore returns the fleet's VectorStore, nil when the Client has no
// shared state or its state keeps no vectors.
func (c *Client) vectorStore() fleet.VectorStore {
	if c.fleet == nil {
		return nil
	}
	vs, _ := c.fleet.store.(fleet.VectorStore)
	return vs
}

// share adds e, an entry of scope just stored, to the fleet's VectorStore,
// if any; a failure leaves it with this cache alone.
func (s *SemanticCache) share(ctx context.Context, c *Client, scope string, e fleet.VectorEntry) {
	vs := c.vectorStore()
	if vs == nil {
		return
	}
	c.fleet.call(ctx, c, func(ctx context.Context) error {
		return vs.AddVector(ctx, c.fleet.project, scope, e, s.cfg.TTL)
	})
}

// pull adds to the cache the entries of scope that the fleet's VectorStore
// got after the last pull of c's project and scope (at most
// fleet.VectorsPerRead), each until the store's expiry or the cache's TTL,
// whichever comes first; nothing when there is no store or it failed.
func (s *SemanticCache) pull(ctx context.Context, c *Client, scope string) {
	vs := c.vectorStore()
	if vs == nil {
		return
	}
	mk := c.fleet.project + "\x00" + scope
	s.mu.Lock()
	after, _ := s.marks.Get(mk)
	s.mu.Unlock()
	var got []fleet.VectorEntry
	var mark string
	if !c.fleet.call(ctx, c, func(ctx context.Context) (err error) {
		got, mark, err = vs.Vectors(ctx, c.fleet.project, scope, after)
		return err
	}) {
		return
	}
	now := time.Now()
	for _, v := range got {
		if v.Key == "" || !now.Before(v.Expires) {
			continue
		}
		e := &semEntry{key: v.Key, scope: scope, vec: v.Vector, json: v.Answer}
		if v.Template != "" {
			e.template = scope + "\x00" + v.Template
		}
		expires := now.Add(s.cfg.TTL)
		if v.Expires.Before(expires) {
			expires = v.Expires
		}
		s.add(e, expires)
	}
	s.mu.Lock()
	if cur, _ := s.marks.Get(mk); cur == after { // a pull that ended later may have moved it on
		s.marks.Add(mk, mark)
	}
	s.mu.Unlock()
}
