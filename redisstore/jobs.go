package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/geminiguard/geminiguard/fleet"
)

var _ fleet.JobStore = (*Store)(nil)

// putJobScript is Store.PutJob: on Redis's clock, the expired jobs
// dropped, the job put with its expiry, the ones that expire first dropped
// beyond ARGV[4], and both keys kept at least the job's TTL.
//
// KEYS[1] the handles' hash, KEYS[2] the expiries' sorted set. ARGV: name,
// handle, TTL (ms), the jobs kept.
var putJobScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local ttl = tonumber(ARGV[3])
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now)
if #gone > 0 then
  redis.call('HDEL', KEYS[1], unpack(gone))
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
if over > 0 then
  redis.call('HDEL', KEYS[1], unpack(redis.call('ZRANGE', KEYS[2], 0, over - 1)))
  redis.call('ZREMRANGEBYRANK', KEYS[2], 0, over - 1)
end
for _, k in ipairs(KEYS) do
  if redis.call('PTTL', k) < ttl then redis.call('PEXPIRE', k, ttl) end
end
return 1
`)

// jobsScript is Store.Jobs: the jobs that expire after Redis's now, the
// one that expires first first, as {name, expiry (unix ms), handle} each.
//
// KEYS[1] the handles' hash, KEYS[2] the expiries' sorted set.
var jobsScript = redis.NewScript(`
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local live = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf', 'WITHSCORES')
local out = {}
if #live == 0 then return out end
local names = {}
for i = 1, #live, 2 do names[#names + 1] = live[i] end
local handles = redis.call('HMGET', KEYS[1], unpack(names))
for i, name in ipairs(names) do
  if handles[i] then
    out[#out + 1] = {name, string.format('%d', tonumber(live[2 * i])), handles[i]}
  end
end
return out
`)

// dropJobScript is Store.DropJob: the job's handle and expiry removed.
//
// KEYS[1] the handles' hash, KEYS[2] the expiries' sorted set. ARGV: name.
var dropJobScript = redis.NewScript(`
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
`)

// jobKeys returns project's keys of open batches: prefix:{project}:jobs
// (hash: name → handle) and prefix:{project}:jobs:x (sorted set: name →
// expiry, unix ms).
func (s *Store) jobKeys(project string) []string {
	return []string{s.base(project) + "jobs", s.base(project) + "jobs:x"}
}

// PutJob implements fleet.JobStore in one round trip (one script): the
// handle in the hash prefix:{project}:jobs and its expiry, on Redis's
// clock, in the sorted set prefix:{project}:jobs:x; both keys expire with
// their latest job. It returns ctx's error when ctx ended, an error for an
// empty project, and Redis's or the connection's error wrapped otherwise.
func (s *Store) PutJob(ctx context.Context, project, name string, handle []byte, ttl time.Duration) error {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return err
	}
	if project == "" {
		return errNoProject
	}
	_, err := await(ctx, s.watchesCtx, func() (struct{}, error) {
		return struct{}{}, putJobScript.Run(ctx, s.rdb, s.jobKeys(project), name, handle, max(ceilMillis(ttl), 1), fleet.MaxJobs).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: put job: %w", err)
	}
	return nil
}

// Jobs implements fleet.JobStore in one round trip (one script: the live
// expiries, then their handles). It returns ctx's error when ctx ended, an
// error for an empty project, and Redis's or the connection's error
// wrapped otherwise.
func (s *Store) Jobs(ctx context.Context, project string) ([]fleet.StoredJob, error) {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return nil, err
	}
	if project == "" {
		return nil, errNoProject
	}
	res, err := await(ctx, s.watchesCtx, func() ([]any, error) {
		return jobsScript.Run(ctx, s.rdb, s.jobKeys(project)).Slice()
	})
	if err != nil {
		return nil, fmt.Errorf("redisstore: jobs: %w", err)
	}
	out := make([]fleet.StoredJob, 0, len(res))
	for _, raw := range res {
		row, ok := raw.([]any)
		if !ok || len(row) != 3 {
			return nil, fmt.Errorf("redisstore: jobs: unexpected answer from the script (row)")
		}
		var f [3]string
		for i := range f {
			if f[i], ok = row[i].(string); !ok {
				return nil, fmt.Errorf("redisstore: jobs: unexpected answer from the script (field)")
			}
		}
		x, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("redisstore: jobs: unexpected answer from the script (expiry)")
		}
		out = append(out, fleet.StoredJob{Name: f[0], Handle: []byte(f[2]), Expires: time.UnixMilli(x)})
	}
	return out, nil
}

// DropJob implements fleet.JobStore in one round trip (one script: HDEL
// and ZREM). It returns ctx's error when ctx ended, an error for an empty
// project, and Redis's or the connection's error wrapped otherwise.
func (s *Store) DropJob(ctx context.Context, project, name string) error {
	if err := cmp.Or(s.err, ctx.Err()); err != nil {
		return err
	}
	if project == "" {
		return errNoProject
	}
	_, err := await(ctx, s.watchesCtx, func() (struct{}, error) {
		return struct{}{}, dropJobScript.Run(ctx, s.rdb, s.jobKeys(project), name).Err()
	})
	if err != nil {
		return fmt.Errorf("redisstore: drop job: %w", err)
	}
	return nil
}
