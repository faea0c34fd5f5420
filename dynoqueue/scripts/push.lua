-- push: store messages and make them wait in their shard (DynoQueue.push and ensure).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override in epoch ms or '' for server TIME,
--       [2] mode: 'replace' (an existing id is replaced and moved, its lifecycle reset),
--           'keep' (an id waiting, leased, retained as ended, or dead is left alone: first wins),
--           'ensure' (an id waiting or leased is left alone: dyno-queues' ensure),
--       then per message 9 values: id, json, delay ms (>= 0), priority (0..99), shard index
--       (1..n), due at epoch ms or '' (a past time means due now), own max deliveries or '',
--       own TTL ms or '', group or ''.
-- Returns: {now, then 1 (pushed) or 0 (left alone) per message}.
-- A pushed id lives in exactly one shard and never both waits and is leased. A grouped one
-- goes to its group's shard when the group has messages (the given shard otherwise) and waits
-- behind the group's current message unless it becomes the current one (group_insert).
-- With strict priority a message due at once goes straight to the ready zset.
--
-- A producer's usual call runs first, before the prelude below makes its helpers (their
-- closures cost ~2.5 us a call): mode replace or keep, no message with a group or its own max
-- deliveries or TTL, and a queue whose stored policy (if any) has no TTL nor strict priority,
-- with no ended or dead messages, groups or born entries (one GET and one EXISTS; a second
-- when the first finds something). Delivery records may exist (a
-- queue whose consumers hold leases): a new id's leftover record, of an earlier message with
-- that id that a Java client acked or removed, is deleted as the general code deletes it. Each
-- id is stored with HSETNX; a new id then waits in its shard's queue zset (one ZADD per shard;
-- the doorbell rings as wait_in rings it: one ZRANK for a single message, one ZRANGE per shard
-- for a batch).
-- Anything else, and an id that exists in replace mode (this call's new ids are deleted
-- again first), is left to the general code below, which then starts from nothing written.
--- @include "lib/clock.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/waiting.lua"
local DOORBELL = true
local SHARDED = false
-- ring() of lib/doorbell.lua, which the fast path below runs before the helpers are made.
local function ring_now(key)
  if not SHARDED or type(redis.pcall('SPUBLISH', key, '1')) == 'table' then
    redis.pcall('PUBLISH', key, '1')
  end
end
-- The queue score of the message whose fields start at ARGV[i]: due ms + priority / 100.
local function score_at(now, i)
  local due = now + tonumber(ARGV[i + 2])
  if ARGV[i + 5] ~= '' then due = math.max(now, tonumber(ARGV[i + 5])) end
  return due + tonumber(ARGV[i + 3]) / 100
end
-- The ids of a fast path's adds (shard -> {score, id, score, id, ...}).
local function added_ids(adds)
  local ids = {}
  for _, add in pairs(adds) do
    for j = 2, #add, 2 do ids[#ids + 1] = add[j] end
  end
  return ids
end
-- The fast path of one partition whose push.lua KEYS are KEYS[kb + 1 ..] and whose messages'
-- 9 values start at ARGV[first], ARGV[first + 9], ... ARGV[last] (push_parts runs it on each
-- partition of its call without copying KEYS and ARGV). now: ARGV[1]'s override ('' or nil:
-- TIME); mode: ARGV[2]'s. Returns the reply, or nil then the general code's now (nil: not read)
-- and what its EXISTS would count (nil: not looked) when it cannot serve the call, having
-- written nothing that stays.
local function push_fast(kb, first, last, now, mode)
  if mode == 'ensure' then return nil end
  for i = first, last, 9 do
    if ARGV[i + 6] ~= '' or ARGV[i + 7] ~= '' or ARGV[i + 8] ~= '' then return nil end
  end
  -- A stored policy without TTL or strict priority changes nothing a push of new ids does
  -- (a policy is stored by every process given one, and by every partitioned queue).
  local stored = redis.call('GET', KEYS[kb + 3])
  if stored and not (string.find(stored, '"ttl":0,', 1, true)
                     and string.find(stored, '"strict":0', 1, true)) then
    return nil
  end
  -- ended, dead, groupof, life, born (lifecycle_keys' order)
  local others = redis.call('EXISTS', KEYS[kb + 6], KEYS[kb + 4], KEYS[kb + 10], KEYS[kb + 2],
                            KEYS[kb + 14])
  -- the same without life: only delivery records (live: new ids' leftovers go)
  local live = others ~= 0 and redis.call('EXISTS', KEYS[kb + 6], KEYS[kb + 4],
                                          KEYS[kb + 10], KEYS[kb + 14]) == 0
  -- found counts the policy too, as the general code counts it when an existing id sends
  -- the call there
  local found = others + (stored and 1 or 0)
  if others ~= 0 and not live then return nil, nil, found end
  if now ~= nil and now ~= '' then
    now = tonumber(now)
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local msg, keep = KEYS[kb + 1], mode == 'keep'
  if first == last then  -- one message
    local id = ARGV[first]
    if redis.call('HSETNX', msg, id, ARGV[first + 1]) == 1 then
      if live then redis.call('HDEL', KEYS[kb + 2], id) end
      local key = KEYS[kb + 16 + tonumber(ARGV[first + 4])]
      redis.call('ZADD', key, score_at(now, first), id)
      -- It rings when the message is now the shard's first: ZRANK's integer costs ~5 us less
      -- than reading the first score before (a score comes back as text, formatted by the
      -- server and parsed again here). Unlike wait_in, a tie with the first score whose id
      -- sorts first rings too: at worst one extra wake-up.
      if DOORBELL and redis.call('ZRANK', key, id) == 0 then
        ring_now(key)
      end
      return {now, 1}
    elseif keep then
      return {now, 0}
    end
    return nil, now, found
  end
  -- Each new id is stored, then its score joins its shard's one ZADD (adds[s]: score, id, ...;
  -- low[s]: the lowest), in one pass.
  local out, adds, low, n = {now}, {}, {}, 1
  for i = first, last, 9 do
    n = n + 1
    local id = ARGV[i]
    if redis.call('HSETNX', msg, id, ARGV[i + 1]) == 1 then
      out[n] = 1
      local score = score_at(now, i)
      local s = tonumber(ARGV[i + 4])
      local add = adds[s]
      if not add then
        adds[s] = {score, id}
        low[s] = score
      else
        if score < low[s] then low[s] = score end
        add[#add + 1] = score
        add[#add + 1] = id
      end
    elseif keep then
      out[n] = 0
    else
      -- replace of an existing id: the general code, from nothing written
      local ids = added_ids(adds)
      if #ids > 0 then redis.call('HDEL', msg, unpack(ids)) end
      return nil, now, found
    end
  end
  if live then
    local ids = added_ids(adds)
    if #ids > 0 then redis.call('HDEL', KEYS[kb + 2], unpack(ids)) end
  end
  -- one ZADD per shard; the doorbell rings when the shard's earliest score drops
  for s, add in pairs(adds) do
    local key = KEYS[kb + 16 + s]
    local first_score = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
    redis.call('ZADD', key, unpack(add))
    if DOORBELL and (not first_score or low[s] < tonumber(first_score)) then
      ring_now(key)
    end
  end
  return out
end
-- @fast-end
local FAST_REPLY, FAST_NOW, FOUND = push_fast(0, 3, #ARGV - 8, ARGV[1], ARGV[2])
if FAST_REPLY then return FAST_REPLY end
-- @prelude
local k = lifecycle_keys()
local now = now_ms(FAST_NOW or ARGV[1])
local mode = ARGV[2]
-- Ended and dead records of a pushed id are dropped; most queues have none, so look once (and
-- at the groups, the stored policy, the records and the born entries too: for a queue with none
-- of them, the usual case for a producer, one EXISTS answers all six, and there is no policy
-- to read).
local has_ended, has_dead, has_life, has_born = false, false, false, false
local found = FOUND or redis.call('EXISTS', k.ended, k.dead, k.groupof, k.policy, k.life,
                                      k.born)
local stored = 0
local p
if found == 0 then
  p = policy_from(nil)
else
  local raw = redis.call('GET', k.policy)
  if raw then stored = 1 end
  p = policy_from(raw)
end
if found == stored then
  HAS_GROUPS = false
else
  has_ended = redis.call('EXISTS', k.ended) == 1
  has_dead = redis.call('EXISTS', k.dead) == 1
  -- records and born entries: leftovers of an earlier message with a pushed id (see the loop)
  has_life = redis.call('EXISTS', k.life) == 1
  has_born = redis.call('EXISTS', k.born) == 1
end
local out = {now}
WAITING = {}
-- Push sequences are taken a block at a time (gaps are harmless: they only order a group).
local seq, seq_last = 0, -1
for i = 3, #ARGV, 9 do
  local id, json = ARGV[i], ARGV[i + 1]
  local s = tonumber(ARGV[i + 4])
  local group = ARGV[i + 8]
  local exists, stored_json = false, false
  if mode == 'replace' then
    -- Store first: HSET tells whether the id existed (most pushes are new ids), saving the
    -- HEXISTS; an existing one is forgotten everywhere below and stored again.
    exists = redis.call('HSET', k.msg, id, json) == 0
    stored_json = not exists
  else
    exists = redis.call('HEXISTS', k.msg, id) == 1
  end
  local skip = false
  if mode == 'keep' then
    skip = exists or (has_ended and redis.call('HEXISTS', k.ended, id) == 1)
           or (has_dead and redis.call('ZSCORE', k.dead, id))
  elseif mode == 'ensure' then
    skip = where(k, id) ~= nil
  end
  if skip then
    out[#out + 1] = 0
  else
    if exists then forget_everywhere(k, id) else group_leave(k, id) end
    if has_ended then
      redis.call('HDEL', k.ended, id)
      redis.call('ZREM', k.endedat, id)
    end
    if has_dead then
      redis.call('HDEL', k.deadinfo, id)
      redis.call('ZREM', k.dead, id)
    end
    local due = now + tonumber(ARGV[i + 2])
    if ARGV[i + 5] ~= '' then due = math.max(now, tonumber(ARGV[i + 5])) end
    local pr = tonumber(ARGV[i + 3])
    if not stored_json then redis.call('HSET', k.msg, id, json) end
    if group ~= '' then
      if seq > seq_last then  -- enough for every message left in this call
        seq_last = redis.call('INCRBY', k.gseq, (#ARGV - i + 1) / 9)
        seq = seq_last - (#ARGV - i + 1) / 9 + 1
      end
      group_insert(k, id, group, s, due, pr, seq)
      seq = seq + 1
    else
      wait_in(k, s, id, due, pr)
    end
    local own_max = tonumber(ARGV[i + 6])
    local ttl = tonumber(ARGV[i + 7]) or p.ttl
    -- Leftovers of an earlier message with this id (a Java client acked or removed it, the
    -- sweep has not run yet) must not count for this one.
    if has_life then redis.call('HDEL', k.life, id) end
    if own_max or ttl > 0 then
      save_born(k, id, now, own_max, tonumber(ARGV[i + 7]))
    elseif has_born then
      redis.call('HDEL', k.born, id)
    end
    if ttl > 0 then
      redis.call('ZADD', k.expiry, due + ttl, id)
      HAS_EXPIRY = true
    end
    out[#out + 1] = 1
  end
end
flush_waiting(k)
return out
