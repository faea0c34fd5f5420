-- peek: read due messages without leasing them (DynoQueue.peek / unsafe_peek_all_shards).
-- Read-only, so it runs on a replica through the non-quorum connection.
-- KEYS: [1] message hash, [2] policy, then per shard, read in that order until count is
--       reached: its queue zset, its ready zset
-- ARGV: [1] now override or '', [2] count
-- Returns: {shard position, json, shard position, json, ...} in the order the next claims of
-- each shard would deliver them: by score, or with strict priority the most urgent first (the
-- ready zset merged with the due ids a claim would move there first).
--- @include "lib/clock.lua"
--- @include "lib/message.lua"
--- @include "lib/policy.lua"
--- @include "lib/strict.lua"
local now = now_ms(ARGV[1])
local want = tonumber(ARGV[2])
local strict_priority = policy_of({policy = KEYS[2]}).strict

-- The first n ids of a shard in strict order: its ready ids, and the up to PROMOTE_LIMIT due
-- ids of its queue zset that the next claim would move there, by ready score, then id bytes.
local function strict_order(queue, ready, n)
  local all = {}
  local r = redis.call('ZRANGE', ready, 0, n - 1, 'WITHSCORES')
  for i = 1, #r, 2 do all[#all + 1] = {r[i], tonumber(r[i + 1])} end
  local q = redis.call('ZRANGEBYSCORE', queue, '-inf', due_bound(now), 'WITHSCORES', 'LIMIT', 0,
                       PROMOTE_LIMIT)
  for i = 1, #q, 2 do
    local t, pr = split_queue_score(tonumber(q[i + 1]))
    all[#all + 1] = {q[i], ready_score(t, pr)}
  end
  table.sort(all, function(a, b)
    if a[2] ~= b[2] then return a[2] < b[2] end
    return bytes_less(a[1], b[1])
  end)
  local ids = {}
  for i = 1, math.min(n, #all) do ids[i] = all[i][1] end
  return ids
end

local out = {}
local position = 0
for s = 3, #KEYS, 2 do
  position = position + 1
  if want <= 0 then break end
  local ids
  if strict_priority then
    ids = strict_order(KEYS[s], KEYS[s + 1], want)
  else
    ids = redis.call('ZRANGEBYSCORE', KEYS[s], '-inf', due_bound(now), 'LIMIT', 0, want)
  end
  for _, id in ipairs(ids) do
    local json = redis.call('HGET', KEYS[1], id)
    if json then
      out[#out + 1] = position
      out[#out + 1] = json
      want = want - 1
    end
  end
end
return out
