-- claim_match: lease the message the client matched for DynoQueue.pop_msg_with_predicate (see
-- match_page.lua), if it still waits due in that shard and its stored JSON is still the one
-- matched; anything else (leased meanwhile, replaced, removed) returns false and the client
-- searches again. A paused queue (P.PAUSED.Q set) leases nothing: false.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] the JSON the client matched, [4] lease ms,
--       [5] shard index
-- Returns: {shard index, json, deliveries, now, due ms (its score without the priority)}, or
-- false.
--- @include "lib/clock.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/policy.lua"
--- @include "lib/strict.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
local s = tonumber(ARGV[5])
if redis.call('EXISTS', k.paused) == 1 then return false end
local p = policy_of(k)
local from = k.queue(s)
local score = redis.call('ZSCORE', from, id)
local due
if score then
  if tonumber(score) >= now + 1 then return false end
  due = split_queue_score(tonumber(score))
else
  local ready = p.strict and redis.call('ZSCORE', k.ready(s), id)
  if not ready then return false end
  from = k.ready(s)
  due = split_ready_score(tonumber(ready))
end
local json = redis.call('HGET', k.msg, id)
if json ~= ARGV[3] then return false end
local deliveries = lease(k, p, id, s, now, tonumber(ARGV[4]), from)
if not deliveries then return false end
return {s, json, deliveries, now, due}
