-- postpone: make a message waiting again, due after a delay and with a new priority, in one
-- step, whether it was waiting or leased (DynoQueue.postpone, Conductor's QueueDAO.postpone,
-- which was remove + push there). Its delivery count is kept; its lease, if any, ends. A
-- grouped message takes its place in its group again by its new due time (group_reschedule).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] delay ms (>= 0), [4] priority (0..99),
--       [5] the JSON the caller read, [6] that JSON with the new priority and timeout
-- Returns: 1 postponed; 0 not waiting or leased (unknown, ended, dead); -1 the JSON changed since
-- the caller read it (retry).
--- @include "lib/clock.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/waiting.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
local s, place = where(k, id)
local json = redis.call('HGET', k.msg, id)
if not place or not json then return 0 end
if json ~= ARGV[5] then return -1 end
local due = now + tonumber(ARGV[3])
local pr = tonumber(ARGV[4])
redis.call('ZREM', k.unack(s), id)
unwait(k, id, s)
redis.call('HSET', k.msg, id, ARGV[6])
local rec = has_groups(k) and group_rec(k, id)
if rec then group_reschedule(k, id, rec, due, pr) else wait_in(k, s, id, due, pr) end
return 1
