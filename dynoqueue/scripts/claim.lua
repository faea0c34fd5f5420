-- claim: lease up to count due messages of one shard (DynoQueue.pop / bulk_pop).
-- KEYS: [1] message hash, [2] queue zset of the shard, [3] unack zset of the shard
-- ARGV: [1] now override or '', [2] count (1..1000), [3] unack timeout ms (lease length)
-- Returns: {now, ms until the next waiting message is due (-1 if none), json1, json2, ...}
-- Only messages due now are claimed (score < now + 1): the claim itself is the visibility check.
-- An id whose payload is gone can never be delivered, so it is dropped from the queue zset.
local now = now_ms(ARGV[1])
local lease_until = now + tonumber(ARGV[3])
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', due_bound(now), 'LIMIT', 0, tonumber(ARGV[2]))
local out = {now, -1}
for _, id in ipairs(ids) do
  local json = redis.call('HGET', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  if json then
    redis.call('ZADD', KEYS[3], lease_until, id)
    out[#out + 1] = json
  end
end
local next_due = earliest(KEYS[2])
if next_due then out[2] = math.max(0, math.ceil(next_due - now)) end
return out
