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
  if f.k == 1 or f.k == 7 then return f.u > old.u end
  if f.k == 2 or f.k == 3 or f.k == 5 or f.k == 6 then return f.at >= old.at end -- at the same At, the later publish
  if f.k == 4 then return f.l < old.l end
  return false
end

-- expire_at_least makes key live at least until ms (unix ms): one call
-- when key lives less long, or as long (GT), two when it has no expiry.
local function expire_at_least(key, ms)
  if redis.call('PEXPIREAT', key, ms, 'GT') == 0 and redis.call('PEXPIRETIME', key) == -1 then
    redis.call('PEXPIREAT', key, ms)
  end
end
`

// leaseLua is Store.Lease: one atomic step on Redis's clock.
//
// KEYS: 1 version, 2 facts, 3 replicas, 4 and 5 the project's spend in
// SpendDay and SpendMonth; then, for the model and (when 15 keys are
// given) LeaseRequest.Next's model, 5 keys each: the model's window, its
// RPD counter of DayEnd, its probe slot of Endpoint, its health
// (consecutive failures, latest answer), and the replicas' records of its
// answer times (replica → "until-ms record").
//
// ARGV[1] is the request packed (leaseArgs): big-endian signed 64-bit
// integers, then the replica's id (the rest, possibly empty). The integers:
// the replica's TTL ms, the version the replica saw, spent (Micros),
// SpendDay and SpendMonth unix ms (0: none), the spend to reserve
// (Micros), the day's and the month's budgets (0: none); then, for each
// model, 17 of them: requests, tokens per request, debt, RPM, TPM,
// RPD, DayEnd unix ms (0: none), probe ms, failures, answered unix ms (0:
// none), requests sent alone, unused requests and their tokens, draws,
// failed since unix ms, draws until unix ms and awaiting unix ms (0:
// none).
//
// ARGV[2] is LeaseRequest.Latencies ('1' or '0'), whether Latency is given
// ('1' or '0'), then Latency as "class,bucket,n;" for each count.
//
// Returns one string (parseLease): granted, retry after µs, dimension,
// replicas, version, has facts (0/1), failures, draws, answered unix ms,
// the others' latest awaiting unix ms (0: none), day spent, month spent,
// the budget that refused the reservation; with Next, its granted, retry
// after µs, dimension, failures, draws, answered and awaiting; the other replicas' records of the model's answer times, "-"
// when not asked, else "=" and "class,bucket,n;" for each; each
// followed by a space ("-" for an empty string), then each fact's JSON
// after a newline.
const leaseLua = luaFacts + `
local t = redis.call('TIME')
local sec = tonumber(t[1])
local now = sec * 1000000 + tonumber(t[2]) -- µs
local now_ms = math.floor(now / 1000)

local models = (#KEYS - 5) / 5
local fields = 8 + 17 * models
local a = {struct.unpack('>' .. string.rep('i8', fields), ARGV[1])}
local replica = string.sub(ARGV[1], 8 * fields + 1)

-- Replicas: a sorted set of replica → live until (unix ms).
-- Those no longer live leave when a replica joins, which bounds the set by
-- the fleet's size.
if replica ~= '' then
  local live_until = now_ms + a[1]
  if redis.call('ZADD', KEYS[3], live_until, replica) == 1 then
    redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now_ms)
  end
  expire_at_least(KEYS[3], live_until)
end
local replicas = redis.call('ZCOUNT', KEYS[3], '(' .. string.format('%d', now_ms), '+inf')

local version = redis.call('GET', KEYS[1]) or '0'

-- The project's spend in the day and the month the replica names: the
-- report (negative: reservations given back; never below zero), then the
-- reservation when both windows are below their budgets.
local spent = a[3]
local day_ms, month_ms = a[4], a[5]
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
local reserve, day_budget, month_budget = a[6], a[7], a[8]
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
-- consecutive failures, how many of them are draws of their own, and the
-- latest answer (unix ms).
local function lease(k, o, ask)
  local win, rpd_key, probe_key, health = KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4]
  local requests = ask and a[o + 1] or 0
  local tokens, debt = a[o + 2], a[o + 3]
  local rpm, tpm, rpd = a[o + 4], a[o + 5], a[o + 6]
  local day_end, probe_ms = a[o + 7], a[o + 8]

  -- Health: consecutive failures across the fleet, and how many of them
  -- are draws of their own (fleet.LeaseRequest.Draws), reset by an answer
  -- later than the latest reported.
  local failed, answered_at = a[o + 9], a[o + 10]
  local draws, failed_since, draws_until = a[o + 14], a[o + 15], a[o + 16]
  local h = redis.call('HMGET', health, 'f', 'a', 'd', 'u')
  local fails, answered = tonumber(h[1] or '0'), tonumber(h[2] or '0')
  local fdraws, funtil = tonumber(h[3] or '0'), tonumber(h[4] or '0')
  if answered_at > answered then answered, fails, fdraws, funtil = answered_at, 0, 0, 0 end
  if failed > 0 then
    fails = fails + failed
    local moves = draws > 0 or fdraws == 0 -- a report of no draw ends none, unless it starts the run
    if draws > 0 and failed_since < funtil then draws = draws - 1 end -- the first met the model in a draw counted already
    fdraws = math.max(fdraws + draws, 1)
    if moves then funtil = math.max(funtil, draws_until) end
  end
  if failed > 0 or answered_at > 0 then
    redis.call('HSET', health, 'f', fails, 'a', answered, 'd', fdraws, 'u', funtil)
    redis.call('PEXPIRE', health, 3600000)
  end
  -- Awaiting: each replica's latest report ('w:' .. replica → until unix
  -- ms), the others' latest that has not passed returned.
  local own, mine, awaiting, gone = 'w:' .. replica, a[o + 17], 0, {}
  local all = redis.call('HGETALL', health)
  for i = 1, #all, 2 do
    if string.sub(all[i], 1, 2) == 'w:' then
      local until_ms = tonumber(all[i + 1])
      if all[i] == own then
        if mine <= now_ms then gone[#gone + 1] = own end
      elseif until_ms <= now_ms then
        gone[#gone + 1] = all[i]
      elseif until_ms > awaiting then
        awaiting = until_ms
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', health, unpack(gone)) end
  if mine > now_ms then
    redis.call('HSET', health, own, mine)
    redis.call('PEXPIRE', health, 3600000)
  end

  local alone, unused, unused_toks = a[o + 11], a[o + 12], a[o + 13]
  if requests <= 0 and debt <= 0 and alone <= 0 and unused <= 0 and unused_toks <= 0 then
    return 0, 0, '-', fails, fdraws, answered, awaiting -- nothing to count or grant: the window is not read
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
  -- This second's requests and tokens are added up here and written once
  -- (flush); the window expires a minute after its latest second.
  local fresh = rsec[sec] == nil and tsec[sec] == nil
  local wr, wt = false, false -- this second's requests, tokens changed
  local function add(r, tk)
    if r > 0 then reqs, rsec[sec], wr = reqs + r, (rsec[sec] or 0) + r, true end
    if tk > 0 then toks, tsec[sec], wt = toks + tk, (tsec[sec] or 0) + tk, true end
  end
  local function flush()
    if wr and wt then
      redis.call('HSET', win, 'r:' .. t[1], rsec[sec], 't:' .. t[1], tsec[sec])
    elseif wr then
      redis.call('HSET', win, 'r:' .. t[1], rsec[sec])
    elseif wt then
      redis.call('HSET', win, 't:' .. t[1], tsec[sec])
    else
      return
    end
    if fresh then redis.call('PEXPIREAT', win, (sec + 61) * 1000) end
  end
  -- counted adds n to the model's RPD count of the day, which lives an
  -- hour past the day's end.
  local function counted(n)
    if redis.call('INCRBY', rpd_key, n) == n then redis.call('PEXPIREAT', rpd_key, day_end + 3600000) end
  end

  if debt > 0 then add(0, debt) end

  -- Requests sent alone count at once; unused leased ones are taken off
  -- the latest seconds of the window, and off the day.
  if alone > 0 then
    add(alone, 0)
    if day_end ~= 0 then counted(alone) end
  end
  -- give_back takes need off the latest seconds of counts, this second's
  -- left to flush: it returns how much, and whether this second's changed.
  local function give_back(counts, kind, need)
    local total, now_changed = 0, false
    for s = sec, sec - 59, -1 do
      if need <= 0 then break end
      local v = counts[s]
      if v and v > 0 then
        local take = math.min(v, need)
        counts[s] = v - take
        need = need - take
        total = total + take
        if s == sec then
          now_changed = true
        else
          redis.call('HINCRBY', win, kind .. s, -take)
        end
      end
    end
    return total, now_changed
  end
  if unused > 0 then
    local back, changed = give_back(rsec, 'r:', unused)
    reqs, wr = reqs - back, wr or changed
    if day_end ~= 0 then
      local d = tonumber(redis.call('GET', rpd_key) or '0')
      if d > 0 then redis.call('DECRBY', rpd_key, math.min(d, unused)) end
    end
  end
  if unused_toks > 0 then
    local back, changed = give_back(tsec, 't:', unused_toks)
    toks, wt = toks - back, wt or changed
  end
  -- grant grants up to the requests asked, as the limits allow: the grant,
  -- or the refusal's wait (µs) and dimension.
  local function grant()
    if requests <= 0 then return 0, 0, '-' end

    if probe_ms > 0 then
      local holder = redis.call('GET', probe_key)
      if holder and holder ~= replica then
        return 0, math.max(redis.call('PTTL', probe_key), 1) * 1000, 'probe'
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
      return 0, wait, dim
    end

    add(n, n * tokens)
    if day_end ~= 0 then counted(n) end
    if probe_ms > 0 then redis.call('SET', probe_key, replica, 'PX', probe_ms) end
    return n, 0, '-'
  end
  local n, wait, dim = grant()
  flush()
  return n, wait, dim, fails, fdraws, answered, awaiting
end

-- latency keeps the replica's record of the model's answer times in the
-- hash at key (field: replica, value: "until-ms record") when given, and
-- returns the other live replicas' records summed ("=" then "class,bucket,
-- n;" for each), "-" when not asked. Records past their until leave.
local function latency(key)
  local want, given = string.sub(ARGV[2], 1, 1) == '1', string.sub(ARGV[2], 2, 2) == '1'
  if given then
    local live_until = now_ms + a[1]
    redis.call('HSET', key, replica, live_until .. ' ' .. string.sub(ARGV[2], 3))
    expire_at_least(key, live_until)
  end
  if not want then return '-' end
  local all = redis.call('HGETALL', key)
  local sum, order, dead = {}, {}, {}
  for i = 1, #all, 2 do
    local sp = string.find(all[i + 1], ' ', 1, true)
    if tonumber(string.sub(all[i + 1], 1, sp - 1)) <= now_ms then
      dead[#dead + 1] = all[i]
    elseif all[i] ~= replica then
      for cb, n in string.gmatch(string.sub(all[i + 1], sp + 1), '(%d+,%d+),(%d+);') do
        if sum[cb] == nil then order[#order + 1], sum[cb] = cb, 0 end
        sum[cb] = sum[cb] + tonumber(n)
      end
    end
  end
  if #dead > 0 then redis.call('HDEL', key, unpack(dead)) end
  local out = {'='}
  for _, cb in ipairs(order) do out[#out + 1] = cb .. ',' .. string.format('%d', sum[cb]) .. ';' end
  return table.concat(out)
end

local asked = a[9] > 0
local n, wait, dim, fails, draws, answered, awaiting = lease(5, 8, true)
-- Facts, when the replica's version is not the project's.
local facts, has_facts = '', 0
if tonumber(version) ~= a[2] then
  has_facts = 1
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
local out = string.format('%d %d %s %d %s %d %d %d %d %d %d %d %s ',
  n, wait, dim, replicas, version, has_facts, fails, draws, answered, awaiting, day_spent, month_spent, refused)
if models == 2 then
  -- The next model: its report counted, its requests asked only when the
  -- first model granted none.
  local nn, nwait, ndim, nfails, ndraws, nanswered, nawaiting = lease(10, 25, asked and n == 0)
  out = out .. string.format('%d %d %s %d %d %d %d ', nn, nwait, ndim, nfails, ndraws, nanswered, nawaiting)
end
out = out .. latency(KEYS[10]) .. ' '
return out .. facts
`

// leaseHash is leaseLua's SHA-1, which Lease's EVALSHA names.
var leaseHash = redis.NewScript(leaseLua).Hash()

// publishScript is Store.Publish: one atomic step on Redis's clock.
//
// KEYS: 1 version, 2 facts, 3 the probe slot of the fact's model and
// endpoint. ARGV: 1 the fact's field (what it replaces), 2 its JSON (at 0:
// now), 3 the project's channel, told "from to fact" when the facts
// changed: the versions before (0: a version made afresh, the project
// empty) and after, and the fact's JSON as kept.
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
-- at Redis's now in µs, above any version of the old one; the change is
-- then told as from version 0, an empty project's.
local from = redis.call('GET', KEYS[1])
if from then
  redis.call('INCR', KEYS[1])
else
  from = '0'
  redis.call('SET', KEYS[1], t[1] .. string.format('%06d', tonumber(t[2])))
end
local expires = math.max(redis.call('PEXPIRETIME', KEYS[2]), f_end)
redis.call('PEXPIREAT', KEYS[2], expires)
redis.call('PEXPIREAT', KEYS[1], expires)

if f.k == 2 or f.k == 3 then redis.call('DEL', KEYS[3]) end
redis.call('PUBLISH', ARGV[3], from .. ' ' .. redis.call('GET', KEYS[1]) .. ' ' .. raw)
return 1
`)
