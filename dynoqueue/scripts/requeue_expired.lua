-- requeue_expired: put back messages whose lease expired (DynoQueue.process_unacks, run by the
-- unack reprocessor thread).
-- KEYS: [1] message hash, [2] queue zset of the shard, [3] unack zset of the shard
-- ARGV: [1] now override or '', [2] batch size (1..1000)
-- Returns: {requeued, stale (leased ids without payload, dropped), 1 if more expired leases remain}
-- A requeued message is due at its lease expiry (already past, so at once, oldest lease first) plus
-- its priority fraction.
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', string.format('%.0f', now), 'WITHSCORES', 'LIMIT', 0, limit)
local requeued, stale = 0, 0
for i = 1, #expired, 2 do
  local id = expired[i]
  local json = redis.call('HGET', KEYS[1], id)
  redis.call('ZREM', KEYS[3], id)
  if json then
    redis.call('ZADD', KEYS[2], math.floor(tonumber(expired[i + 1])) + priority_of(json) / 100, id)
    requeued = requeued + 1
  else
    stale = stale + 1
  end
end
if requeued > 0 then ring(KEYS[2]) end
local more = 0
if #expired == 2 * limit then more = 1 end
return {requeued, stale, more}
