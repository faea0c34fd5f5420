-- Where a message is, and messages leaving the queue.
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/records.lua"
--- @include "lib/strict.lua"
--- @include "lib/waiting.lua"

-- The shard (1..n) that holds id, and where: 'unack', 'queue', 'ready' (strict priority: due),
-- 'group' (waiting behind its group's current message) or nil.
local function where(k, id)
  local st = strict(k)
  for s = 1, k.n do
    if redis.call('ZSCORE', k.unack(s), id) then return s, 'unack' end
    if redis.call('ZSCORE', k.queue(s), id) then return s, 'queue' end
    if st and redis.call('ZSCORE', k.ready(s), id) then return s, 'ready' end
  end
  if has_groups(k) then
    local rec = group_rec(k, id)
    if rec and waits_in_line(k, rec, id) then return rec.s, 'group' end
  end
  return nil, nil
end

-- Drop id from the zsets of shard s (nil: every shard): waiting, ready and leased.
local function leave_shards(k, id, s)
  local first, last = 1, k.n
  if s then first, last = s, s end
  for i = first, last do
    unwait(k, id, i)
    redis.call('ZREM', k.unack(i), id)
  end
end

-- Drop id from its zsets (shard s when known, else every shard), its group, the message hash
-- and its lifecycle data.
local function forget(k, id, s)
  leave_shards(k, id, s)
  group_leave(k, id)
  redis.call('HDEL', k.msg, id)
  redis.call('HDEL', k.life, id)
  redis.call('HDEL', k.born, id)
  if has_expiry(k) then redis.call('ZREM', k.expiry, id) end
end

local function forget_everywhere(k, id)
  forget(k, id, nil)
end

-- The message leaves the queue for good, in state 'ACKED', 'EXPIRED' or 'DELETED', once it is
-- out of its zsets: its payload, group place and lifecycle data go (the next of its group
-- becomes current; was_leased = true: it was leased, so it was its group's current one); with a
-- retention it stays queryable (state, payload, deliveries) until the sweep drops it.
local function finish(k, p, id, state, now, shard, was_leased)
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
  group_leave(k, id, was_leased)
  redis.call('HDEL', k.msg, id)
  redis.call('HDEL', k.life, id)
  redis.call('HDEL', k.born, id)
  if has_expiry(k) then redis.call('ZREM', k.expiry, id) end
end

-- The same for a message still in a zset of shard s (nil: look in every shard).
local function end_message(k, p, id, state, now, shard)
  leave_shards(k, id, shard)
  finish(k, p, id, state, now, shard)
end
