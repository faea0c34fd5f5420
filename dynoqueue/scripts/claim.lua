-- claim: lease up to count due messages of one shard (DynoQueue.pop / bulk_pop), counting each
-- delivery and giving each lease a receipt.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index (1..n), [3] count (1..1000), [4] lease ms
-- Returns: {now, ms until the next waiting message is due (-1 if none),
--           id1, json1, deliveries1, id2, json2, deliveries2, ...}; a receipt is deliveries:now.
-- Only messages due now are claimed (score < now + 1): the claim itself is the visibility check.
-- An id whose payload is gone can never be delivered, so it is dropped from the queue zset; one
-- whose TTL ran out ends (EXPIRED, or dead-lettered if it had been delivered) instead.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local lease_ms = tonumber(ARGV[4])
local p = policy_of(k)
local ids = redis.call('ZRANGEBYSCORE', k.queue(s), '-inf', due_bound(now), 'LIMIT', 0, tonumber(ARGV[3]))
local out = {now, -1}
for _, id in ipairs(ids) do
  local json = redis.call('HGET', k.msg, id)
  if not json then
    redis.call('ZREM', k.queue(s), id)
  else
    local deliveries = lease(k, p, id, s, now, lease_ms)
    if deliveries then
      out[#out + 1] = id
      out[#out + 1] = json
      out[#out + 1] = deliveries
    end
  end
end
local next_due = earliest(k.queue(s))
if next_due then out[2] = math.max(0, math.ceil(next_due - now)) end
return out
