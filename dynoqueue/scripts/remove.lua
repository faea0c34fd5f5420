-- remove: delete a message wherever it is: waiting, leased, or a dead letter
-- (DynoQueue.remove / atomic_remove). With a retention it stays queryable as DELETED.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id
-- Returns: 1 if anything was removed, else 0.
local k = lifecycle_keys()
local id = ARGV[2]
if redis.call('HEXISTS', k.msg, id) == 1 then
  local s = where(k, id)
  end_message(k, policy_of(k), id, 'DELETED', now_ms(ARGV[1]), s)
  return 1
end
local removed = redis.call('ZREM', k.dead, id) + redis.call('HDEL', k.deadinfo, id)
for s = 1, k.n do removed = removed + redis.call('ZREM', k.queue(s), id) + redis.call('ZREM', k.unack(s), id) end
removed = removed + redis.call('HDEL', k.life, id)
if removed > 0 then return 1 end
return 0
