package redisstore

import "github.com/redis/go-redis/v9"

// luaFacts is shared by both scripts: when a fact ends and what replaces
// what, as fleet.FactKind states. Facts are JSON objects
// {k, m, e, at, u, r, d, l} with at and u in unix milliseconds.
const luaFacts = `
local CLOSED_MS = 60000      -- a FactClosed or FactListed is kept for a minute
local LIMIT_MS = 86400000    -- a FactLimit or FactMissing is kept for a day

-- fact_end returns the unix ms at which fact f stops being in force.
local function fact_end(f)
  if f.k == 3 or f.k == 6 then return f.at + CLOSED_MS end
  if f.k == 4 or f.k == 5 then return f.at + LIMIT_MS end
  return f.u
end

-- replaces reports whether f, published, replaces old.
local function replaces(f, old)
  if f.k == 1 then return f.u > old.u end
  if f.k == 2 or f.k == 3 or f.k == 5 or f.k == 6 then return f.at >= old.at end -- at the same At, the later publish
  if f.k == 4 then return f.l < old.l end
  return false
end

-- expire_at_least makes key live at least until ms (unix ms).
local function expire_at_least(key, ms)
  local cur = redis.call('PEXPIRETIME', key)
  if cur < ms then redis.call('PEXPIREAT', key, ms) end
end
`

// leaseLua is Store.Lease: one atomic step on Redis's clock.
//
// KEYS: 1 version, 2 facts, 3 replicas, 4 and 5 the project's spend in
// SpendDay and SpendMonth; then, for the model and (when 13 keys are
// given) LeaseRequest.Next's model, 4 keys each: the model's window, its
// RPD counter of DayEnd, its probe slot of Endpoint, and its health
// (consecutive failures, latest answer).
//
// ARGV[1] is the request packed (leaseArgs): integers, each followed by a
// space, then the replica's id (the rest, possibly empty). The integers:
// the replica's TTL ms, the version the replica saw, spent (Micros),
// SpendDay and SpendMonth unix ms (0: none), the spend to reserve
// (Micros), the day's and the month's budgets (0: none); then, for each
// model, modelArgs of them: requests, tokens per request, debt, RPM, TPM,
// RPD, DayEnd unix ms (0: none), probe ms, failures, answered unix ms (0:
// none), requests sent alone, unused requests and their tokens.
//
// Returns one string (parseLease): granted, retry after µs, dimension,
// replicas, version, has facts (0/1), failures, answered unix ms, day
// spent, month spent, the budget that refused the reservation; with Next,
// its granted, retry after µs, dimension, failures and answered; each
// followed by a space ("-" for an empty string), then each fact's JSON
// after a newline.
const leaseLua = luaFacts + `
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000000 + tonumber(t[2]) -- µs
local now_ms = math.floor(now / 1000)

local models = (#KEYS - 5) / 4
local packed, a, pos = ARGV[1], {}, 1
for i = 1, 8 + 13 * models do
  local e = string.find(packed, ' ', pos, true)
  a[i] = string.sub(packed, pos, e - 1)
  pos = e + 1
end
local replica = string.sub(packed, pos)

-- Replicas: a sorted set of replica → live until (unix ms).
if replica ~= '' then
  local live_until = now_ms + tonumber(a[1])
  redis.call('ZADD', KEYS[3], live_until, replica)
  expire_at_least(KEYS[3], live_until)
end
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
local replicas = redis.call('ZCARD', KEYS[3])

local version = redis.call('GET', KEYS[1]) or '0'

-- The project's spend in the day and the month the replica names: the
-- report (negative: reservations given back; never below zero), then the
-- reservation when both windows are below their budgets.
local spent = tonumber(a[3])
local day_ms, month_ms = tonumber(a[4]), tonumber(a[5])
local function spend(key, end_ms, amount)
  if end_ms == 0 then return 0 end
  local v = tonumber(redis.call('GET', key) or '0')
  if amount ~= 0 then
    v = math.max(v + amount, 0)
    redis.call('SET', key, v, 'PXAT', end_ms + 3600000)
  end
  return v
end
local day_spent = spend(KEYS[4], day_ms, spent)
local month_spent = spend(KEYS[5], month_ms, spent)
local reserve, day_budget, month_budget = tonumber(a[6]), tonumber(a[7]), tonumber(a[8])
local refused = '-'
if reserve > 0 then
  if month_budget > 0 and month_spent >= month_budget then
    refused = 'month'
  elseif day_budget > 0 and day_spent >= day_budget then
    refused = 'day'
  else
    day_spent = spend(KEYS[4], day_ms, reserve)
    month_spent = spend(KEYS[5], month_ms, reserve)
  end
end

-- lease is one model's step: the model's keys from KEYS[k + 1], its
-- arguments from a[o + 1]. It counts the report (outcomes, debt, requests
-- sent alone, unused ones) and, when ask, grants up to the requests asked.
-- Returns granted, retry after µs, dimension ('-': none), the fleet's
-- consecutive failures and the latest answer (unix ms).
local function lease(k, o, ask)
  local win, rpd_key, probe_key, health = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local requests = ask and tonumber(a[o + 1]) or 0
  local tokens, debt = tonumber(a[o + 2]), tonumber(a[o + 3])
  local rpm, tpm, rpd = tonumber(a[o + 4]), tonumber(a[o + 5]), tonumber(a[o + 6])
  local day_end, probe_ms = tonumber(a[o + 7]), tonumber(a[o + 8])

  -- Health: consecutive failures across the fleet, reset by an answer
  -- later than the latest reported.
  local failed, answered_at = tonumber(a[o + 9]), tonumber(a[o + 10])
  local h = redis.call('HMGET', health, 'f', 'a')
  local fails, answered = tonumber(h[1] or '0'), tonumber(h[2] or '0')
  if answered_at > answered then answered, fails = answered_at, 0 end
  fails = fails + failed
  if failed > 0 or answered_at > 0 then
    redis.call('HSET', health, 'f', fails, 'a', answered)
    redis.call('PEXPIRE', health, 3600000)
  end

  -- The window: a hash of r:<second> → requests and t:<second> → tokens,
  -- pruned of seconds that left the last 60.
  local w = redis.call('HGETALL', win)
  local reqs, toks = 0, 0
  local rsec, tsec = {}, {}
  local stale = {}
  for i = 1, #w, 2 do
    local s = tonumber(string.sub(w[i], 3))
    local v = tonumber(w[i + 1])
    if s <= sec - 60 then
      stale[#stale + 1] = w[i]
    elseif string.sub(w[i], 1, 1) == 'r' then
      reqs = reqs + v
      rsec[s] = v
    else
      toks = toks + v
      tsec[s] = v
    end
  end
  if #stale > 0 then redis.call('HDEL', win, unpack(stale)) end
  local window_until = (sec + 61) * 1000

  if debt > 0 then
    redis.call('HINCRBY', win, 't:' .. t[1], debt)
    redis.call('PEXPIREAT', win, window_until)
    toks = toks + debt
    tsec[sec] = (tsec[sec] or 0) + debt
  end

  -- Requests sent alone count at once; unused leased ones are taken off
  -- the latest seconds of the window, and off the day.
  local alone, unused, unused_toks = tonumber(a[o + 11]), tonumber(a[o + 12]), tonumber(a[o + 13])
  if alone > 0 then
    redis.call('HINCRBY', win, 'r:' .. t[1], alone)
    redis.call('PEXPIREAT', win, window_until)
    reqs = reqs + alone
    rsec[sec] = (rsec[sec] or 0) + alone
    if day_end ~= 0 then
      redis.call('INCRBY', rpd_key, alone)
      redis.call('PEXPIREAT', rpd_key, day_end + 3600000)
    end
  end
  local function give_back(counts, kind, need)
    local total = 0
    for s = sec, sec - 59, -1 do
      if need <= 0 then break end
      local v = counts[s]
      if v and v > 0 then
        local take = math.min(v, need)
        counts[s] = v - take
        need = need - take
        total = total + take
        redis.call('HINCRBY', win, kind .. s, -take)
      end
    end
    return total
  end
  if unused > 0 then
    reqs = reqs - give_back(rsec, 'r:', unused)
    if day_end ~= 0 then
      local d = tonumber(redis.call('GET', rpd_key) or '0')
      if d > 0 then redis.call('DECRBY', rpd_key, math.min(d, unused)) end
    end
  end
  if unused_toks > 0 then toks = toks - give_back(tsec, 't:', unused_toks) end
  if requests <= 0 then return 0, 0, '-', fails, answered end

  if probe_ms > 0 then
    local holder = redis.call('GET', probe_key)
    if holder and holder ~= replica then
      return 0, math.max(redis.call('PTTL', probe_key), 1) * 1000, 'probe', fails, answered
    end
  end

  local day = 0
  if day_end ~= 0 then day = tonumber(redis.call('GET', rpd_key) or '0') end

  local n = requests
  if rpm > 0 then n = math.min(n, rpm - reqs) end
  if tpm > 0 and tokens > 0 then n = math.min(n, math.floor((tpm - toks) / tokens)) end
  if rpd > 0 then n = math.min(n, rpd - day) end

  if n <= 0 then
    -- freed returns how long (µs) until the seconds leaving the window
    -- free at least need units of counts; 0 when they never do.
    local function freed(counts, need)
      if need <= 0 then return 0 end
      for s = sec - 59, sec do
        if counts[s] then
          need = need - counts[s]
          if need <= 0 then return (s + 60) * 1000000 - now end
        end
      end
      return 0
    end
    local wait, dim = 0, ''
    if rpd > 0 and day >= rpd then wait, dim = day_end * 1000 - now, 'rpd' end
    if rpm > 0 then
      local d = freed(rsec, reqs + 1 - rpm)
      if d > wait then wait, dim = d, 'rpm' end
    end
    if tpm > 0 then
      local d = freed(tsec, toks + tokens - tpm)
      if d > wait then wait, dim = d, 'tpm' end
    end
    if dim == '' then wait, dim = 60000000, 'tpm' end -- one request larger than TPM
    return 0, wait, dim, fails, answered
  end

  redis.call('HINCRBY', win, 'r:' .. t[1], n)
  if tokens > 0 then redis.call('HINCRBY', win, 't:' .. t[1], n * tokens) end
  redis.call('PEXPIREAT', win, window_until)
  if day_end ~= 0 then
    redis.call('INCRBY', rpd_key, n)
    redis.call('PEXPIREAT', rpd_key, day_end + 3600000)
  end
  if probe_ms > 0 then redis.call('SET', probe_key, replica, 'PX', probe_ms) end
  return n, 0, '-', fails, answered
end

local asked = tonumber(a[9]) > 0
local n, wait, dim, fails, answered = lease(5, 8, true)
local out = {n, wait, dim, replicas, version, 0, fails, answered, day_spent, month_spent, refused}
if models == 2 then
  -- The next model: its report counted, its requests asked only when the
  -- first model granted none.
  local nn, nwait, ndim, nfails, nanswered = lease(9, 21, asked and n == 0)
  out[12], out[13], out[14], out[15], out[16] = nn, nwait, ndim, nfails, nanswered
end
for i = 1, #out do
  local v = out[i]
  if type(v) == 'number' then out[i] = string.format('%d', v) end
end

-- Facts, when the replica's version is not the project's.
local facts = ''
if version ~= a[2] then
  out[6] = '1'
  local all = redis.call('HGETALL', KEYS[2])
  local live, dead = {}, {}
  for i = 1, #all, 2 do
    if now < fact_end(cjson.decode(all[i + 1])) * 1000 then
      live[#live + 1] = all[i + 1]
    else
      dead[#dead + 1] = all[i]
    end
  end
  if #dead > 0 then redis.call('HDEL', KEYS[2], unpack(dead)) end
  if #live > 0 then facts = '\n' .. table.concat(live, '\n') end
end
return table.concat(out, ' ') .. ' ' .. facts
`

// leaseHash is leaseLua's SHA-1, which Lease's EVALSHA names.
var leaseHash = redis.NewScript(leaseLua).Hash()

// publishScript is Store.Publish: one atomic step on Redis's clock.
//
// KEYS: 1 version, 2 facts, 3 the probe slot of the fact's model and
// endpoint. ARGV: 1 the fact's field (what it replaces), 2 its JSON (at 0:
// now), 3 the project's channel, told the new version when the facts
// changed.
//
// Returns 1 when the fact changed the project's facts, 0 otherwise.
var publishScript = redis.NewScript(luaFacts + `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2]) -- µs

local raw = ARGV[2]
local f = cjson.decode(raw)
if f.at == 0 then
  f.at = math.floor(now / 1000)
  raw = cjson.encode(f)
end
local f_end = fact_end(f)
if now >= f_end * 1000 then return 0 end

local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  local o = cjson.decode(old)
  if now < fact_end(o) * 1000 and not replaces(f, o) then return 0 end
end
redis.call('HSET', KEYS[2], ARGV[1], raw)

-- A version key made afresh (the old one expired with its facts) starts
-- at Redis's now in µs, above any version of the old one.
if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCR', KEYS[1])
else
  redis.call('SET', KEYS[1], t[1] .. string.format('%06d', tonumber(t[2])))
end
local expires = math.max(redis.call('PEXPIRETIME', KEYS[2]), f_end)
redis.call('PEXPIREAT', KEYS[2], expires)
redis.call('PEXPIREAT', KEYS[1], expires)

if f.k == 2 or f.k == 3 then redis.call('DEL', KEYS[3]) end
redis.call('PUBLISH', ARGV[3], redis.call('GET', KEYS[1]))
return 1
`)
