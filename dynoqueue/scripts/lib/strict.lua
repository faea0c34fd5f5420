-- Strict priority: the ready zsets.
--- @include "lib/clock.lua"
--- @include "lib/policy.lua"

-- With strict priority, due waiting ids of shard s sit in K.ready(s), scored
-- priority * 2^42 + due ms: exact in a double (below 2^49) for any due time before 2109, so the
-- lowest score is the most urgent due message, the earliest due among equal priorities.
-- Ids still delayed wait in K.queue(s) as always; a claim first moves the due ones over.
local READY_SCALE = 4398046511104
-- Most due ids one claim (or strict peek) moves from the queue zset to the ready zset.
local PROMOTE_LIMIT = 1000

local function strict(k)
  return policy_of(k).strict
end

local function ready_score(due, pr)
  return pr * READY_SCALE + math.max(due, 0)
end

-- The due ms and priority of a queue zset score (due + priority / 100).
local function split_queue_score(score)
  local t = math.floor(score)
  return t, math.floor((score - t) * 100 + 0.5)
end

-- The due ms and priority of a ready zset score.
local function split_ready_score(score)
  local pr = math.floor(score / READY_SCALE)
  return score - pr * READY_SCALE, pr
end

-- Move up to PROMOTE_LIMIT due ids of shard s, earliest first, from the queue to the ready zset.
local function promote(k, s)
  local due = redis.call('ZRANGEBYSCORE', k.queue(s), '-inf', due_bound(NOW), 'WITHSCORES',
                         'LIMIT', 0, PROMOTE_LIMIT)
  if #due == 0 then return end
  local add, ids = {}, {}
  for i = 1, #due, 2 do
    local t, pr = split_queue_score(tonumber(due[i + 1]))
    add[#add + 1] = ready_score(t, pr)
    add[#add + 1] = due[i]
    ids[#ids + 1] = due[i]
  end
  redis.call('ZADD', k.ready(s), unpack(add))
  redis.call('ZREM', k.queue(s), unpack(ids))
end
