-- redrive: dead letters back to waiting, their delivery count reset (DynoQueue.redrive, SQS's
-- redrive). Each returns to the shard it died in (a grouped one to its group's shard, behind
-- the group's current message), due after the delay, with its priority.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] delay ms (>= 0), [3] most to move when no ids are given,
--       [4..] ids (none: the oldest dead letters)
-- Returns: how many were moved. A dead letter without payload ('payload-missing') stays; with
-- no ids given, the oldest that can come back are moved, past those that cannot.
--- @include "lib/clock.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/message.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/waiting.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local delay = tonumber(ARGV[2])
local p = policy_of(k)
-- Moves dead letter id back to waiting; false when it cannot come back: its record has no
-- payload ('payload-missing') or the id lives again.
local function redrive_one(id)
  local raw = redis.call('HGET', k.deadinfo, id)
  local ok, info = false, nil
  if raw then ok, info = pcall(cjson.decode, raw) end
  if not (ok and type(info) == 'table' and info.j and redis.call('HEXISTS', k.msg, id) == 0) then
    return false
  end
  local s = tonumber(info.sh) or 1
  if s < 1 or s > k.n then s = 1 end
  local due = now + delay
  local pr, group = fields_of(info.j)
  redis.call('HSET', k.msg, id, info.j)
  if group then
    group_insert(k, id, group, s, due, pr, redis.call('INCR', k.gseq))
  else
    wait_in(k, s, id, due, pr)
  end
  local own_max = tonumber(info.m)
  local ttl = tonumber(info.t) or p.ttl
  redis.call('HDEL', k.life, id)  -- deliveries start again
  if own_max or ttl > 0 then save_born(k, id, now, own_max, tonumber(info.t))
  else redis.call('HDEL', k.born, id) end
  if ttl > 0 then redis.call('ZADD', k.expiry, due + ttl, id) end
  redis.call('ZREM', k.dead, id)
  redis.call('HDEL', k.deadinfo, id)
  return true
end

local moved = 0
if #ARGV >= 4 then
  for i = 4, #ARGV do
    if redrive_one(ARGV[i]) then moved = moved + 1 end
  end
  return moved
end
-- The oldest first: those that cannot come back stay at the front (kept), so page past them.
local limit, kept = tonumber(ARGV[3]), 0
while moved < limit do
  local page = redis.call('ZRANGE', k.dead, kept, kept + limit - moved - 1)
  if #page == 0 then break end
  for _, id in ipairs(page) do
    if redrive_one(id) then moved = moved + 1 else kept = kept + 1 end
  end
end
return moved
