-- set_timeout: make a waiting message due at now + timeout, keeping its priority fraction
-- (DynoQueue.set_timeout). A TTL is counted from the new due time. A grouped message takes its
-- place in its group again by its new due time (group_reschedule).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] timeout ms, [4] priority, [5] JSON the caller read,
--       [6] JSON with the new timeout
-- Returns: 1 updated; 0 not waiting in any shard (unknown, or leased); -1 the JSON changed since
-- the caller read it (retry).
--- @include "lib/clock.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/waiting.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
if redis.call('HGET', k.msg, id) ~= ARGV[5] then return -1 end
local s, place = where(k, id)
if place ~= 'queue' and place ~= 'ready' and place ~= 'group' then return 0 end
local due = now + tonumber(ARGV[3])
local pr = tonumber(ARGV[4])
unwait(k, id, s)
redis.call('HSET', k.msg, id, ARGV[6])
local rec = has_groups(k) and group_rec(k, id)
if rec then group_reschedule(k, id, rec, due, pr) else wait_in(k, s, id, due, pr) end
if redis.call('ZSCORE', k.expiry, id) then
  local ttl = tonumber(life_of(k, id).t) or policy_of(k).ttl
  if ttl > 0 then redis.call('ZADD', k.expiry, due + ttl, id) end
end
return 1
