-- Waiting messages: in and out of a shard's queue and ready zsets, ringing its doorbell.
--- @include "lib/clock.lua"
--- @include "lib/doorbell.lua"
--- @include "lib/strict.lua"

-- The queue-zset score of shard s's earliest waiting message before this script call changed
-- it (-inf when something is ready, +inf when nothing waits), so the doorbell rings only when a
-- change makes a message due earlier than anything before; at most once per shard and call.
local FIRST, RUNG = {}, {}
local function first_waiting(k, s)
  if FIRST[s] == nil then
    if strict(k) and redis.call('EXISTS', k.ready(s)) == 1 then FIRST[s] = -math.huge
    else FIRST[s] = earliest(k.queue(s)) or math.huge end
  end
  return FIRST[s]
end

-- Make id wait in shard s, due at epoch ms due with priority pr: in the ready zset when the
-- queue has strict priority and it is due now, else in the queue zset (score due + pr / 100).
local function wait_in(k, s, id, due, pr)
  local first = first_waiting(k, s)
  local score = due + pr / 100
  if strict(k) and due <= NOW then
    redis.call('ZADD', k.ready(s), ready_score(due, pr), id)
  else
    redis.call('ZADD', k.queue(s), score, id)
  end
  if score < first and not RUNG[s] then
    RUNG[s] = true
    ring(k.queue(s))
  end
end

-- Take id out of shard s's waiting zsets (not its group's pending ones).
local function unwait(k, id, s)
  redis.call('ZREM', k.queue(s), id)
  if strict(k) then redis.call('ZREM', k.ready(s), id) end
end
