-- Dead letters.
--- @include "lib/ending.lua"
--- @include "lib/records.lua"

-- id is in a zset of shard s but its payload is gone: evicted (an allkeys-* maxmemory-policy
-- evicts whole keys, the message hash among them) or deleted by hand. It can never be
-- delivered, so it becomes a dead letter with reason 'payload-missing' and no payload (no 'j')
-- instead of vanishing; callers count these so the client logs them. An older dead letter of
-- the same id (one with its payload) is kept as it is.
local function bury_missing(k, id, now, s)
  local rec = life_of(k, id)
  forget(k, id, s)
  if redis.call('HSETNX', k.deadinfo, id, cjson.encode({r = 'payload-missing', at = now,
                                                       d = rec.d or 0, sh = s, l = rec.l,
                                                       e = rec.e, m = rec.m, t = rec.t})) == 1 then
    redis.call('ZADD', k.dead, now, id)
  end
end

-- The message becomes a dead letter (reason 'max_deliveries', 'ttl' or 'undecodable'): out of
-- every zset, its group and the message hash, into the dead zset (by time of death) and dead
-- info. Without its payload it becomes a 'payload-missing' dead letter instead (false).
local function dead_letter(k, id, reason, now, shard)
  local json = redis.call('HGET', k.msg, id)
  if not json then
    bury_missing(k, id, now, shard)
    return false
  end
  local rec = life_of(k, id)
  forget(k, id, shard)
  redis.call('ZADD', k.dead, now, id)
  redis.call('HSET', k.deadinfo, id, cjson.encode({r = reason, at = now, j = json,
                                                  d = rec.d or 0, sh = shard, l = rec.l,
                                                  e = rec.e, m = rec.m, t = rec.t}))
  return true
end
