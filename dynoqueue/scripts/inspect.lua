-- inspect: where a message is in its lifecycle (DynoQueue.state / info). Read-only.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id
-- Returns: false if unknown (or its retention ended), else
--   {state, shard index or 0, json or '', score or '' (waiting: due + priority/100, or the due
--    ms; leased: lease expiry), life record (text, with the
--    born entry's fields) or '', expires at or '', ended/died at or '',
--    ended/dead record JSON or '', the stored policy's max deliveries}
-- state: DELAYED, READY, LEASED, ACKED, EXPIRED, DEAD or DELETED. A grouped message waiting
-- behind its group's current one is DELAYED or READY by its own due time; a message whose lease
-- ended is READY (score: the lease's end), as the next claim of its shard takes it.
--- @include "lib/clock.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/keys.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/strict.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
local json = redis.call('HGET', k.msg, id)
if json then
  local s, place = where(k, id)
  if not place then return false end
  -- the record with its born entry's fields, in the record's text form (see parse_life)
  local rec = life_of(k, id)
  rec.b = nil
  local life = format_life(rec) or ''
  local expires = redis.call('ZSCORE', k.expiry, id) or ''
  local score
  local state
  if place == 'unack' then
    score, state = redis.call('ZSCORE', k.unack(s), id), 'LEASED'
    -- A lease that ended is due again: the next claim of its shard delivers it (or
    -- dead-letters it at its max deliveries); its due time is the lease's end.
    if tonumber(score) < now + 1 then state = 'READY' end
  elseif place == 'ready' then
    local due = split_ready_score(tonumber(redis.call('ZSCORE', k.ready(s), id)))
    score, state = string.format('%.0f', due), 'READY'
  else
    local due
    if place == 'group' then
      due = group_rec(k, id).due
      score = string.format('%.0f', due)
    else
      score = redis.call('ZSCORE', k.queue(s), id)
      due = tonumber(score)
    end
    if due < now + 1 then state = 'READY' else state = 'DELAYED' end
  end
  return {state, s, json, score, life, expires, '', '', policy_of(k).max}
end
local dead = redis.call('HGET', k.deadinfo, id)
if dead then
  return {'DEAD', 0, '', '', '', '', redis.call('ZSCORE', k.dead, id) or '', dead, policy_of(k).max}
end
local ended = redis.call('HGET', k.ended, id)
if ended then
  local ok, doc = pcall(cjson.decode, ended)
  local state = (ok and type(doc) == 'table' and doc.s) or 'ACKED'
  return {state, 0, '', '', '', '', redis.call('ZSCORE', k.endedat, id) or '', ended,
          policy_of(k).max}
end
return false
