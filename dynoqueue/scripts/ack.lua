-- ack: end the lease of messages; they leave the queue (DynoQueue.ack / ack_many).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', then pairs: id, receipt ('' = any lease of that id)
-- Returns: how many were leased (by that receipt, when given) and are now gone. A message that
-- is waiting (never popped, or put back after its lease expired) is not acked and stays; one
-- delivered again since the receipt was issued is not acked either.
-- With a retention the acked message stays queryable (state ACKED) until the sweep drops it.
-- Ids without a receipt are looked up and deleted with one variadic command per key.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local p = policy_of(k)
local acked = 0
local plain, seen = {}, {}
for i = 2, #ARGV, 2 do
  local id, receipt = ARGV[i], ARGV[i + 1]
  if receipt == '' then
    if not seen[id] then
      seen[id] = true
      plain[#plain + 1] = id
    end
  else
    local s = leased(k, id, receipt)
    if s then
      redis.call('ZREM', k.unack(s), id)
      finish(k, p, id, 'ACKED', now, s, true)
      acked = acked + 1
    end
  end
end
for s = 1, k.n do
  if #plain == 0 then break end
  local scores = redis.call('ZMSCORE', k.unack(s), unpack(plain))
  local found, rest = {}, {}
  for i, id in ipairs(plain) do
    if scores[i] then found[#found + 1] = id else rest[#rest + 1] = id end
  end
  if #found > 0 then
    redis.call('ZREM', k.unack(s), unpack(found))
    if p.ret > 0 or has_groups(k) then  -- retention records, or the next of a group
      for _, id in ipairs(found) do finish(k, p, id, 'ACKED', now, s, true) end
    else
      redis.call('HDEL', k.msg, unpack(found))
      redis.call('HDEL', k.life, unpack(found))
      if has_expiry(k) then redis.call('ZREM', k.expiry, unpack(found)) end
    end
    acked = acked + #found
  end
  plain = rest
end
return acked
