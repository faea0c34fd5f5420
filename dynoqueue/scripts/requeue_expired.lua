-- requeue_expired: put back messages of one shard whose lease expired (DynoQueue.process_unacks,
-- run by the unack reprocessor); one whose lease was its max deliveries-th is dead-lettered.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index, [3] batch size (1..1000)
-- Returns: {requeued, leased ids without payload (dead-lettered 'payload-missing'), 1 if more
-- expired leases remain, dead-lettered at their max deliveries}
-- A requeued message is due at its lease expiry (already past, so at once, oldest lease first)
-- plus its priority fraction; a grouped one stays its group's current message.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local unack = k.unack(s)
local expired = redis.call('ZRANGEBYSCORE', unack, '-inf', string.format('%.0f', now), 'WITHSCORES', 'LIMIT', 0, limit)
local p = nil
local requeued, stale, dead = 0, 0, 0
for i = 1, #expired, 2 do
  local id = expired[i]
  local json = redis.call('HGET', k.msg, id)
  if not json then
    bury_missing(k, id, now, s)
    stale = stale + 1
  else
    redis.call('ZREM', unack, id)
    p = p or policy_of(k)
    local rec = life_of(k, id)
    local most = max_deliveries(rec, p)
    if most > 0 and (rec.d or 0) >= most then
      dead_letter(k, id, 'max_deliveries', now, s)
      dead = dead + 1
    else
      wait_in(k, s, id, math.floor(tonumber(expired[i + 1])), priority_of(json))
      requeued = requeued + 1
    end
  end
end
local more = 0
if #expired == 2 * limit then more = 1 end
return {requeued, stale, more, dead}
