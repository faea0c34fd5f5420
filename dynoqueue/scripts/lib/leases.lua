-- Leases: which messages are leased, leasing them, putting back expired ones.
--- @include "lib/dead.lua"
--- @include "lib/ending.lua"
--- @include "lib/limits.lua"
--- @include "lib/message.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/waiting.lua"

-- The shard (1..n) where id is leased, and its lifecycle record, when it is leased by receipt
-- ('' = any lease of the id); nil when it is not leased, or leased again since that receipt.
local function leased(k, id, receipt)
  for s = 1, k.n do
    if redis.call('ZSCORE', k.unack(s), id) then
      local rec = life_of(k, id)
      if receipt == '' or receipt_of(rec) == receipt then return s, rec end
      return nil, nil
    end
  end
  return nil, nil
end

-- ids (with their receipts, in step) split by one ZMSCORE of shard s's unack zset: those leased
-- there and their receipts, then the others and theirs (the next shard's to look at). Counts
-- are kept by hand: t[#t + 1] costs a length lookup per message.
local function split_leased(k, s, ids, receipts)
  local scores = redis.call('ZMSCORE', k.unack(s), unpack(ids))
  local here, want, rest, rest_receipts = {}, {}, {}, {}
  local nh, nr = 0, 0
  for i, id in ipairs(ids) do
    if scores[i] then
      nh = nh + 1
      here[nh] = id
      want[nh] = receipts[i]
    else
      nr = nr + 1
      rest[nr] = id
      rest_receipts[nr] = receipts[i]
    end
  end
  return here, want, rest, rest_receipts
end

-- Put back up to limit messages of shard s whose lease ended by now (the oldest first), each
-- due at its lease expiry (past: at once) plus its priority fraction; a grouped one stays its
-- group's current message. One whose lease was its max deliveries-th is dead-lettered, one
-- without payload buried. A claim runs this on its shard first, so an expired lease is
-- delivered again by the next pop (SQS's visibility timeout); the unack reprocessor runs it for
-- the shards nobody pops. Returns: requeued, without payload, dead-lettered, 1 if more remain.
local function requeue_leases(k, s, now, limit)
  local unack = k.unack(s)
  local expired = redis.call('ZRANGEBYSCORE', unack, '-inf', string.format('%.0f', now),
                             'WITHSCORES', 'LIMIT', 0, limit)
  local p = nil
  local requeued, stale, dead = 0, 0, 0
  for i = 1, #expired, 2 do
    local id = expired[i]
    local json = redis.call('HGET', k.msg, id)
    if not json then
      bury_missing(k, id, now, s)
      stale = stale + 1
    else
      redis.call('ZREM', unack, id)
      p = p or policy_of(k)
      local rec = life_of(k, id)
      local most = max_deliveries(rec, p)
      if most > 0 and (rec.d or 0) >= most then
        dead_letter(k, id, 'max_deliveries', now, s)
        dead = dead + 1
      else
        wait_in(k, s, id, math.floor(tonumber(expired[i + 1])), priority_of(json))
        requeued = requeued + 1
      end
    end
  end
  local more = 0
  if #expired == 2 * limit then more = 1 end
  return requeued, stale, dead, more
end

-- Lease id (waiting in shard s, in zset from when known, its JSON read) for lease_ms: count
-- the delivery, set the receipt. Returns the delivery count, or nil when its TTL had run out
-- (it ends instead) or the queue's limits allow no delivery now (it stays waiting).
local function lease(k, p, id, s, now, lease_ms, from)
  if (p.mif > 0 or p.rlc > 0) and limit_room(k, p, now, 1) < 1 then
    redis.call('INCR', k.limited)
    return nil
  end
  if has_expiry(k) then
    local expires = redis.call('ZSCORE', k.expiry, id)
    if expires and tonumber(expires) <= now then
      local rec = life_of(k, id)
      if (rec.d or 0) > 0 then dead_letter(k, id, 'ttl', now, s)
      else end_message(k, p, id, 'EXPIRED', now, s) end
      return nil
    end
  end
  local rec = life_of(k, id)
  rec.d = (rec.d or 0) + 1
  rec.c = now
  save_life(k, id, rec)
  if from then redis.call('ZREM', from, id) else unwait(k, id, s) end
  redis.call('ZADD', k.unack(s), now + lease_ms, id)
  started(k, p, now, {id}, 1, 1, 1)
  return rec.d
end
