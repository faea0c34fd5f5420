-- ack: end the lease of messages; they leave the queue (DynoQueue.ack / ack_many).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', then pairs: id, receipt ('' = any lease of that id)
-- Returns: how many were leased (by that receipt, when given) and are now gone. A message that
-- is waiting (never popped, or put back after its lease expired) is not acked and stays; one
-- delivered again since the receipt was issued is not acked either.
-- With a retention the acked message stays queryable (state ACKED) until the sweep drops it.
-- Ids are looked up, checked and deleted with one variadic command per key (ZMSCORE, HMGET,
-- ZREM, HDEL), not one per message; those with a receipt go first, then those without. A
-- grouped one moves its group on to the successor its record names (no look at the group's
-- line): one HSET of the new current messages and one ZADD per shard for all of them
-- (promote_groups).
--- @include "lib/clock.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/limits.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local p = policy_of(k)
local acked = 0
WAITING = {}  -- line counts: one HINCRBY per shard (flush_waiting below)
local plain, seen = {}, {}
local tagged, receipts = {}, {}
local np, nt = 0, 0  -- counts kept by hand: t[#t + 1] costs a length lookup per message
for i = 2, #ARGV, 2 do
  local id, receipt = ARGV[i], ARGV[i + 1]
  if receipt == '' then
    if not seen[id] then
      seen[id] = true
      np = np + 1
      plain[np] = id
    end
  else
    nt = nt + 1
    tagged[nt] = id
    receipts[nt] = receipt
  end
end

-- End the leases of found (ids leased in shard s).
local function ack_found(s, found)
  redis.call('ZREM', k.unack(s), unpack(found))
  if p.ret > 0 then  -- retention records
    for _, id in ipairs(found) do finish(k, p, id, 'ACKED', now, s, true) end
  else
    if has_groups(k) then  -- a leased grouped id was its group's current one: the next goes
      local raws = redis.call('HMGET', k.groupof, unpack(found))
      local grouped, groups, texts, ats, ng = {}, {}, {}, {}, 0
      for i = 1, #found do
        local raw = raws[i]
        if raw then
          ng = ng + 1
          grouped[ng] = found[i]
          groups[ng], texts[ng], ats[ng] = group_and_next(raw)
        end
      end
      if ng > 0 then  -- as group_leave(k, id, true) for each, batched
        redis.call('HDEL', k.groupof, unpack(grouped))
        promote_groups(k, groups, s, texts, ats)  -- leased in s, so their groups live in s
      end
    end
    redis.call('HDEL', k.msg, unpack(found))
    redis.call('HDEL', k.life, unpack(found))
    if has_born(k) then redis.call('HDEL', k.born, unpack(found)) end
    if has_expiry(k) then redis.call('ZREM', k.expiry, unpack(found)) end
  end
  acked = acked + #found
end

-- With receipts: an id counts where it is leased (one shard) and its lease's receipt matches.
for s = 1, k.n do
  if #tagged == 0 then break end
  local here, want, rest, rest_receipts = split_leased(k, s, tagged, receipts)
  if #here > 0 then
    local lives = redis.call('HMGET', k.life, unpack(here))
    local found, done = {}, {}
    local nf = 0
    for i, id in ipairs(here) do
      if not done[id] and record_has_receipt(lives[i], want[i]) then
        done[id] = true
        nf = nf + 1
        found[nf] = id
      end
    end
    if nf > 0 then ack_found(s, found) end
  end
  tagged, receipts = rest, rest_receipts
end

for s = 1, k.n do
  if #plain == 0 then break end
  local scores = redis.call('ZMSCORE', k.unack(s), unpack(plain))
  local found, rest = {}, {}
  for i, id in ipairs(plain) do
    if scores[i] then found[#found + 1] = id else rest[#rest + 1] = id end
  end
  if #found > 0 then ack_found(s, found) end
  plain = rest
end
-- The records hash goes with its last record (the pad alone is no record: see LIFE_PAD).
if acked > 0 and redis.call('HLEN', k.life) == 1 then redis.call('HDEL', k.life, LIFE_PAD) end
flush_waiting(k)
leases_freed(k, p, acked)
return acked
