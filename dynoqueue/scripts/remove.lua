-- remove: delete a message wherever it is: waiting, leased, waiting in its group, or a dead
-- letter (DynoQueue.remove / atomic_remove). With a retention it stays queryable as DELETED.
-- Removing a group's current message makes the next one current.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id
-- Returns: 1 if anything was removed, else 0.
--- @include "lib/clock.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/policy.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
if redis.call('HEXISTS', k.msg, id) == 1 then
  local s = where(k, id)
  end_message(k, policy_of(k), id, 'DELETED', now, s)
  return 1
end
local removed = redis.call('ZREM', k.dead, id) + redis.call('HDEL', k.deadinfo, id)
for s = 1, k.n do
  removed = removed + redis.call('ZREM', k.queue(s), id) + redis.call('ZREM', k.unack(s), id)
            + redis.call('ZREM', k.ready(s), id)
end
removed = removed + redis.call('HDEL', k.life, id) + redis.call('HDEL', k.born, id)
if has_groups(k) and group_rec(k, id) then
  group_leave(k, id)
  removed = removed + 1
end
if removed > 0 then return 1 end
return 0
