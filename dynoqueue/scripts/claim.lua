-- claim: lease up to count due messages of one shard (DynoQueue.pop / bulk_pop), counting each
-- delivery and giving each lease a receipt.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index (1..n), [3] count (1..1000), [4] lease ms
-- Returns: {now, ms until the next waiting message is due (-1 if none),
--           id1, json1, deliveries1, id2, json2, deliveries2, ...}; a receipt is deliveries:now.
-- Only messages due now are claimed (score < now + 1): the claim itself is the visibility check.
-- With strict priority, up to PROMOTE_LIMIT due ids first move to the ready zset, then the
-- lowest ready scores are claimed (most urgent first). A grouped message is claimable only as
-- its group's current message, so claiming it locks the group with no further step.
-- An id whose payload is gone can never be delivered, so it is dropped from the queue zset; one
-- whose TTL ran out ends (EXPIRED, or dead-lettered if it had been delivered) instead.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local lease_ms = tonumber(ARGV[4])
local p = policy_of(k)
local from, ids
if p.strict then
  promote(k, s)
  from = k.ready(s)
  ids = redis.call('ZRANGE', from, 0, count - 1)
else
  from = k.queue(s)
  ids = redis.call('ZRANGEBYSCORE', from, '-inf', due_bound(now), 'LIMIT', 0, count)
end
local out = {now, -1}
for _, id in ipairs(ids) do
  local json = redis.call('HGET', k.msg, id)
  if not json then
    forget(k, id, s)
  else
    local deliveries = lease(k, p, id, s, now, lease_ms, from)
    if deliveries then
      out[#out + 1] = id
      out[#out + 1] = json
      out[#out + 1] = deliveries
    end
  end
end
if p.strict and redis.call('EXISTS', k.ready(s)) == 1 then
  out[2] = 0
else
  local next_due = earliest(k.queue(s))
  if next_due then out[2] = math.max(0, math.ceil(next_due - now)) end
end
return out
