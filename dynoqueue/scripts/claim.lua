-- claim: lease up to count due messages of one shard (DynoQueue.pop / bulk_pop), counting each
-- delivery and giving each lease a receipt.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index (1..n), [3] count (1..1000), [4] lease ms
-- Returns: {now, ms until the next waiting message is due or lease of the shard ends (-1 if
--           none; when the queue's limits held the claim back: until a place may free),
--           ids dead-lettered as 'payload-missing', 1 if the limits held back a message that
--           was due (else 0), id1, json1, deliveries1, due1, id2, ...}; a receipt is
--           deliveries:now; due: when it fell due, for delivery lateness: its queue zset score
--           as text (due ms + priority / 100: the whole part is the due ms), or with strict
--           priority the due ms as a number.
-- A paused queue (P.PAUSED.Q set: DynoQueue.pause) leases nothing: {now, -1, 0, 0}; its waiting
-- pops sleep until resume.lua rings the doorbells.
-- Only messages due now are claimed (score < now + 1): the claim itself is the visibility check;
-- a lease of the shard that ended is due again (requeued first, in the same script).
-- With strict priority, up to PROMOTE_LIMIT due ids first move to the ready zset, then the
-- lowest ready scores are claimed (most urgent first). A grouped message is claimable only as
-- its group's current message, so claiming it locks the group with no further step.
-- An id whose payload is gone (evicted) can never be delivered, so it becomes a dead letter
-- 'payload-missing' (counted in the reply); one whose TTL ran out ends (EXPIRED, or
-- dead-lettered if it had been delivered) instead.
-- The batch is read and written with one variadic command per key (HMGET, ZREM, ZADD, HSET), not
-- one per message: a claim of 500 costs about as much Lua as a claim of a few.
--- @include "lib/clock.lua"
--- @include "lib/dead.lua"
--- @include "lib/ending.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/limits.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/strict.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local count = tonumber(ARGV[3])
local lease_until = now + tonumber(ARGV[4])
if redis.call('EXISTS', k.paused) == 1 then return {now, -1, 0, 0} end
local p = policy_of(k)
-- Leases of this shard that ended wait again first (up to the batch): the claim below
-- delivers them as the due messages they are, counting the delivery (SQS's visibility
-- timeout), instead of at the unack reprocessor's next pass.
requeue_leases(k, s, now, count)
-- Queue-wide limits (QueuePolicy.max_in_flight, rate_limit): take what they allow now.
local wake = nil
if p.mif > 0 or p.rlc > 0 then
  if p.mif > 0 then  -- every shard's ended leases first: they hold places until put back
    for i = 1, k.n do if i ~= s then requeue_leases(k, i, now, count) end end
  end
  count, wake = limit_room(k, p, now, count)
end
local from, scored, split
if p.strict then
  promote(k, s)
  from, split = k.ready(s), split_ready_score
  if count > 0 then scored = redis.call('ZRANGE', from, 0, count - 1, 'WITHSCORES') end
else
  from, split = k.queue(s), split_queue_score
  if count > 0 then
    scored = redis.call('ZRANGEBYSCORE', from, '-inf', due_bound(now), 'WITHSCORES', 'LIMIT', 0,
                        count)
  end
end
if count <= 0 then  -- held back: was anything due?
  if p.strict then
    scored = redis.call('ZRANGE', from, 0, 0)
  else
    scored = redis.call('ZRANGEBYSCORE', from, '-inf', due_bound(now), 'LIMIT', 0, 1)
  end
  if #scored == 0 then return {now, wake, 0, 0} end
  redis.call('INCR', k.limited)
  return {now, wake, 0, 1}
end
local ids, dues = {}, {}
if p.strict then
  for i = 1, #scored, 2 do
    ids[#ids + 1] = scored[i]
    dues[#dues + 1] = (split(tonumber(scored[i + 1])))
  end
else  -- the score as text: the client takes the due ms from it (no tonumber per message here)
  local n = 0
  for i = 1, #scored, 2 do
    n = n + 1
    ids[n] = scored[i]
    dues[n] = scored[i + 1]
  end
end
local out = {now, -1, 0, 0}
if #ids > 0 then
  local jsons = redis.call('HMGET', k.msg, unpack(ids))
  -- No record at all is common (every earlier delivery acked): then none is read.
  local lives = {}
  if redis.call('EXISTS', k.life) == 1 then lives = redis.call('HMGET', k.life, unpack(ids)) end
  -- A claimed id is past its TTL only if the earliest TTL of the queue is (the sweep ends
  -- those): one lookup of that instead of one per id, unless something has run out.
  local expiries = nil
  local first_expiry = earliest(k.expiry)
  HAS_EXPIRY = first_expiry ~= nil
  if first_expiry and first_expiry <= now then
    expiries = redis.call('ZMSCORE', k.expiry, unpack(ids))
  end
  local leases, records, ended, gone = {}, {}, {}, {}
  -- ':' .. claim ms, the tail of every short record and receipt this claim writes (no
  -- string.format per message: a record that is absent or short is built by concatenation).
  local stamp = ':' .. string.format('%.0f', now)
  -- The lease score as text once: Redis would format a Lua number per member (%.17g).
  local lease_text = string.format('%.0f', lease_until)
  local nl, no = 0, #out
  for i, id in ipairs(ids) do
    local raw = lives[i]
    if not jsons[i] then
      gone[#gone + 1] = id
    elseif expiries and expiries[i] and tonumber(expiries[i]) <= now then
      ended[#ended + 1] = {id, parse_life(raw)}
    else
      local d, record
      if not raw then
        d = 1
        record = '1' .. stamp
      else  -- "d:c" or "d:c:::[:l]" (see parse_life)
        local dn, tail = string.match(raw, '^(%d*):%d*(.*)$')
        if tail and tail ~= '' and string.byte(tail, 1) ~= 58 then dn, tail = nil, nil end
        d = (tonumber(dn) or 0) + 1
        record = d .. stamp .. (tail or '')
      end
      leases[nl + 1] = lease_text
      leases[nl + 2] = id
      records[nl + 1] = id
      records[nl + 2] = record
      nl = nl + 2
      out[no + 1] = id
      out[no + 2] = jsons[i]
      out[no + 3] = d
      out[no + 4] = dues[i]
      no = no + 4
    end
  end
  redis.call('ZREM', from, unpack(ids))  -- claimed, ended, or without payload: out of waiting
  if nl > 0 then
    redis.call('ZADD', k.unack(s), unpack(leases))
    if p.rlc > 0 then started(k, p, now, records, 1, nl, 2) end
    if nl >= 2 * LIFE_PAD_FROM then  -- a hash table from the start (see LIFE_PAD)
      records[nl + 1] = LIFE_PAD
      records[nl + 2] = LIFE_PAD_VALUE
    end
    redis.call('HSET', k.life, unpack(records))
  end
  for _, id in ipairs(gone) do bury_missing(k, id, now, s) end
  out[3] = #gone
  for _, item in ipairs(ended) do  -- TTL ran out: never delivered ends, delivered dies
    if (item[2].d or 0) > 0 then dead_letter(k, item[1], 'ttl', now, s)
    else end_message(k, p, item[1], 'EXPIRED', now, s) end
  end
end
if p.strict and redis.call('EXISTS', k.ready(s)) == 1 then
  out[2] = 0
else
  -- The next message due: a waiting one, or a lease that ends (it is due again then).
  local next_due = earliest(k.queue(s))
  local lease_end = earliest(k.unack(s))
  if lease_end and (not next_due or lease_end < next_due) then next_due = lease_end end
  if next_due then out[2] = math.max(0, math.ceil(next_due - now)) end
end
if wake and #ids >= count then  -- the limits held back what may be due: wait for a place
  out[2], out[4] = wake, 1
  redis.call('INCR', k.limited)
end
return out
