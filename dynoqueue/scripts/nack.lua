-- nack: end leases now instead of waiting for them to expire (DynoQueue.nack / nack_many): each
-- message is due again after a delay, or dead-lettered once it has been delivered max
-- deliveries times.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] delay ms (>= 0), [3] error text or '',
--       then pairs: id, receipt ('' = any lease of that id)
-- Returns: {due again, dead-lettered, of those without payload ('payload-missing')}; an id not
-- leased (or leased again since its receipt) counts in none; an id given twice counts once.
-- Ids are looked up, checked and moved with one variadic command per key and shard (ZMSCORE,
-- HMGET, ZREM, ZADD), not one per message, as in ack.lua; dead letters go one by one.
--- @include "lib/clock.lua"
--- @include "lib/dead.lua"
--- @include "lib/doorbell.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/limits.lua"
--- @include "lib/message.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/strict.lua"
--- @include "lib/waiting.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local delay = tonumber(ARGV[2])
local err = ARGV[3]
local p = policy_of(k)
local again, dead, missing = 0, 0, 0
local ids, receipts = {}, {}
local n = 0
for i = 4, #ARGV, 2 do
  n = n + 1
  ids[n] = ARGV[i]
  receipts[n] = ARGV[i + 1]
end
local due = now + delay
local due_text = string.format('%.0f', due)
local done = {}
for s = 1, k.n do
  if #ids == 0 then break end
  local here, want, rest, rest_receipts = split_leased(k, s, ids, receipts)
  if #here > 0 then
    local lives = redis.call('HMGET', k.life, unpack(here))
    local found, raws = {}, {}
    for i, id in ipairs(here) do
      local raw, w = lives[i], want[i]
      -- as leased(): '' takes any lease; else the record's receipt must match
      if not done[id] and (w == '' or record_has_receipt(raw, w)) then
        done[id] = true
        found[#found + 1] = id
        raws[#found] = raw
      end
    end
    if #found > 0 then
      local jsons = redis.call('HMGET', k.msg, unpack(found))
      -- push-time limits (e, m, t): the born entries (see with_born)
      local borns = {}
      if has_born(k) then borns = redis.call('HMGET', k.born, unpack(found)) end
      local records, going, moves, dying, gone = {}, {}, {}, {}, {}
      local first = first_waiting(k, s)
      local lowest = math.huge
      local ready = strict(k) and due <= now
      for i, id in ipairs(found) do
        local rec = with_born(parse_life(raws[i]), borns[i])
        local json = jsons[i]
        if err ~= '' and json then  -- recorded before a dead letter reads it (not for one buried)
          rec.l = err
          records[#records + 1] = id
          records[#records + 1] = format_life(rec)
        end
        local most = max_deliveries(rec, p)
        if not json then
          gone[#gone + 1] = id
        elseif most > 0 and (rec.d or 0) >= most then
          dying[#dying + 1] = id
        else
          local pr = priority_of(json)
          going[#going + 1] = id
          if ready then
            moves[#moves + 1] = ready_score(due, pr)
          elseif pr == 0 then
            moves[#moves + 1] = due_text
          else
            moves[#moves + 1] = due + pr / 100
          end
          moves[#moves + 1] = id
          lowest = math.min(lowest, due + pr / 100)
        end
      end
      if #records > 0 then redis.call('HSET', k.life, unpack(records)) end
      for _, id in ipairs(gone) do
        bury_missing(k, id, now, s)
        dead = dead + 1
        missing = missing + 1
      end
      for _, id in ipairs(dying) do
        dead_letter(k, id, 'max_deliveries', now, s)
        dead = dead + 1
      end
      if #going > 0 then
        redis.call('ZREM', k.unack(s), unpack(going))
        redis.call('ZADD', ready and k.ready(s) or k.queue(s), unpack(moves))
        again = again + #going
        if lowest < first and not RUNG[s] then  -- as wait_in
          RUNG[s] = true
          ring(k.queue(s))
        end
      end
    end
  end
  ids, receipts = rest, rest_receipts
end
leases_freed(k, p, again + dead)
return {again, dead, missing}
