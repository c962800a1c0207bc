package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
)

var _ fleet.AnswerStore = (*Store)(nil)

// StoreAnswer implements fleet.AnswerStore in one round trip: SET
// prefix:{project}:idem:key with ttl (PX, at least a millisecond). It
// returns ctx's error when ctx ended, an error for an empty project, and
// Redis's or the connection's error wrapped otherwise.
func (s *Store) StoreAnswer(ctx context.Context, project, key string, answer []byte, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if project == "" {
		return errNoProject
	}
	_, err := await(ctx, s.watchesCtx, func() (struct{}, error) {
		return struct{}{}, s.rdb.Do(ctx, "SET", s.base(project)+"idem:"+key, answer, "PX", max(ceilMillis(ttl), 1)).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: store answer: %w", err)
	}
	return nil
}

// LoadAnswer implements fleet.AnswerStore in one round trip (GET).
// It returns nil and no error when there is no answer, ctx's error when
// ctx ended, an error for an empty project, and Redis's or the
// connection's error wrapped otherwise.
func (s *Store) LoadAnswer(ctx context.Context, project, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if project == "" {
		return nil, errNoProject
	}
	b, err := await(ctx, s.watchesCtx, func() ([]byte, error) {
		return s.rdb.Get(ctx, s.base(project)+"idem:"+key).Bytes()
	})
	switch {
	case errors.Is(err, redis.Nil):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("redisstore: load answer: %w", err)
	}
	return b, nil
}
