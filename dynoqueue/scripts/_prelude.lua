-- Shared helpers, prepended to every script by dynoqueue.scripts.source(); not a script itself.
-- Scores are IEEE doubles: never tostring() one (Lua prints 14 digits and would round away the
-- priority fraction); pass numbers straight to redis.call, which keeps 17 digits.

-- Epoch ms: the injected clock's value when the caller passed one, else the server's TIME, so
-- producers and consumers with skewed clocks agree on when a message is due.
local function now_ms(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- ZRANGEBYSCORE bound for "due at now": a score t + p/100 is due once now >= t, i.e. score < now + 1.
local function due_bound(now)
  return '(' .. string.format('%.0f', now + 1)
end

-- Lowest score of a zset, or nil when it is empty.
local function earliest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return nil
end

-- The priority stored in a message's JSON, 0..99; 0 when missing or unreadable.
local function priority_of(json)
  local ok, doc = pcall(cjson.decode, json)
  if ok and type(doc) == 'table' then
    local p = tonumber(doc['priority'])
    if p and p >= 0 and p <= 99 then return math.floor(p) end
  end
  return 0
end

-- Ring a shard's doorbell: waiting pops subscribed to the channel named like the shard's queue
-- key re-check at once instead of sleeping until their next poll.
-- DOORBELL is switched off (text replaced at load) for servers without pub/sub, e.g. Dynomite.
local DOORBELL = true
local function ring(queue_key)
  if DOORBELL then redis.call('PUBLISH', queue_key, '1') end
end

-- Lua pattern match that reports a malformed pattern as a typed error instead of a script crash.
local function matches(value, pattern)
  local ok, found = pcall(string.match, value, pattern)
  if not ok then return redis.error_reply('BADPATTERN ' .. tostring(found)) end
  return found ~= nil
end

-- ---------------------------------------------------------------------------------- lifecycle
-- Scripts that take QueueKeys.lifecycle_keys(): message hash, life, policy, dead, dead info,
-- ended, ended at, expiry, sweep cursor, then n queue zsets and n unack zsets.
local function lifecycle_keys()
  local n = (#KEYS - 9) / 2
  local k = {msg = KEYS[1], life = KEYS[2], policy = KEYS[3], dead = KEYS[4], deadinfo = KEYS[5],
             ended = KEYS[6], endedat = KEYS[7], expiry = KEYS[8], sweep = KEYS[9], n = n}
  function k.queue(s) return KEYS[9 + s] end
  function k.unack(s) return KEYS[9 + n + s] end
  return k
end

-- The queue's stored QueuePolicy (defaults when none is stored): max deliveries, TTL ms,
-- retention ms, dead-letter retention ms. 0 = off.
local function policy_of(k)
  local p = {max = 0, ttl = 0, ret = 0, dret = 604800000}
  local raw = redis.call('GET', k.policy)
  if raw then
    local ok, doc = pcall(cjson.decode, raw)
    if ok and type(doc) == 'table' then
      for f, v in pairs(doc) do if p[f] ~= nil then p[f] = tonumber(v) or p[f] end end
    end
  end
  return p
end

-- A message's lifecycle record: d deliveries, c claim time of the current lease (the receipt
-- is d:c), e enqueued at, m its own max deliveries, t its own TTL, l last error. {} when it has
-- none. Stored as "d:c" when that is all it holds (the common case: cheap to read and write),
-- else as JSON.
local function parse_life(raw)
  if not raw then return {} end
  if string.byte(raw, 1) ~= 123 then  -- not '{': the short form
    local d, c = string.match(raw, '^(%d+):(%d+)$')
    if d then return {d = tonumber(d), c = tonumber(c)} end
    return {}
  end
  local ok, doc = pcall(cjson.decode, raw)
  if ok and type(doc) == 'table' then return doc end
  return {}
end

local function life_of(k, id)
  return parse_life(redis.call('HGET', k.life, id))
end

-- The stored form of a lifecycle record (see parse_life).
local function format_life(rec)
  if rec.d and rec.c and rec.e == nil and rec.m == nil and rec.t == nil and rec.l == nil then
    return string.format('%d:%.0f', rec.d, rec.c)
  end
  return cjson.encode(rec)
end

local function save_life(k, id, rec)
  if next(rec) == nil then redis.call('HDEL', k.life, id)
  else redis.call('HSET', k.life, id, format_life(rec)) end
end

-- The receipt of a message's current lease, or nil if it was never delivered.
local function receipt_of(rec)
  if rec.d and rec.c then return string.format('%d:%.0f', rec.d, rec.c) end
  return nil
end

-- The shard (1..n) where id is leased, and its lifecycle record, when it is leased by receipt
-- ('' = any lease of the id); nil when it is not leased, or leased again since that receipt.
local function leased(k, id, receipt)
  for s = 1, k.n do
    if redis.call('ZSCORE', k.unack(s), id) then
      local rec = life_of(k, id)
      if receipt == '' or receipt_of(rec) == receipt then return s, rec end
      return nil, nil
    end
  end
  return nil, nil
end

local function max_deliveries(rec, p)
  return tonumber(rec.m) or p.max
end

-- The shard (1..n) whose queue or unack zset holds id, and which: 'queue' / 'unack' / nil.
local function where(k, id)
  for s = 1, k.n do
    if redis.call('ZSCORE', k.unack(s), id) then return s, 'unack' end
    if redis.call('ZSCORE', k.queue(s), id) then return s, 'queue' end
  end
  return nil, nil
end

-- Whether any message of the queue has a TTL (an EXPIRY entry): checked once per script call,
-- so queues without TTLs pay nothing per message.
local HAS_EXPIRY = nil
local function has_expiry(k)
  if HAS_EXPIRY == nil then HAS_EXPIRY = redis.call('EXISTS', k.expiry) == 1 end
  return HAS_EXPIRY
end

-- Drop id from its zsets (shard s when known, else every shard), the message hash and its
-- lifecycle data.
local function forget(k, id, s)
  local first, last = 1, k.n
  if s then first, last = s, s end
  for i = first, last do
    redis.call('ZREM', k.queue(i), id)
    redis.call('ZREM', k.unack(i), id)
  end
  redis.call('HDEL', k.msg, id)
  redis.call('HDEL', k.life, id)
  if has_expiry(k) then redis.call('ZREM', k.expiry, id) end
end

local function forget_everywhere(k, id)
  forget(k, id, nil)
end

-- The message leaves the queue for good, in state 'ACKED', 'EXPIRED' or 'DELETED', once it is
-- out of its zsets: its payload and lifecycle data go; with a retention it stays queryable
-- (state, payload, deliveries) until the sweep drops it.
local function finish(k, p, id, state, now, shard)
  if p.ret > 0 then
    local json = redis.call('HGET', k.msg, id)
    if json then
      local rec = life_of(k, id)
      redis.call('HSET', k.ended, id, cjson.encode({s = state, at = now, j = json, d = rec.d or 0,
                                                   sh = shard, l = rec.l, e = rec.e, m = rec.m,
                                                   t = rec.t}))
      redis.call('ZADD', k.endedat, now, id)
    end
  end
  redis.call('HDEL', k.msg, id)
  redis.call('HDEL', k.life, id)
  if has_expiry(k) then redis.call('ZREM', k.expiry, id) end
end

-- The same for a message still in a zset of shard s (nil: look in every shard).
local function end_message(k, p, id, state, now, shard)
  local first, last = 1, k.n
  if shard then first, last = shard, shard end
  for i = first, last do
    redis.call('ZREM', k.queue(i), id)
    redis.call('ZREM', k.unack(i), id)
  end
  finish(k, p, id, state, now, shard)
end

-- The message becomes a dead letter (reason 'max_deliveries', 'ttl' or 'undecodable'): out of
-- every zset and the message hash, into the dead zset (by time of death) and dead info.
local function dead_letter(k, id, reason, now, shard)
  local json = redis.call('HGET', k.msg, id)
  local rec = life_of(k, id)
  forget(k, id, shard)
  if not json then return false end
  redis.call('ZADD', k.dead, now, id)
  redis.call('HSET', k.deadinfo, id, cjson.encode({r = reason, at = now, j = json,
                                                  d = rec.d or 0, sh = shard, l = rec.l,
                                                  e = rec.e, m = rec.m, t = rec.t}))
  return true
end

-- Lease id (waiting in shard s, its JSON read) for lease_ms: count the delivery, set the
-- receipt. Returns the delivery count, or nil when its TTL had run out (it ends instead).
local function lease(k, p, id, s, now, lease_ms)
  if has_expiry(k) then
    local expires = redis.call('ZSCORE', k.expiry, id)
    if expires and tonumber(expires) <= now then
      local rec = life_of(k, id)
      if (rec.d or 0) > 0 then dead_letter(k, id, 'ttl', now, s)
      else end_message(k, p, id, 'EXPIRED', now, s) end
      return nil
    end
  end
  local rec = life_of(k, id)
  rec.d = (rec.d or 0) + 1
  rec.c = now
  save_life(k, id, rec)
  redis.call('ZREM', k.queue(s), id)
  redis.call('ZADD', k.unack(s), now + lease_ms, id)
  return rec.d
end
