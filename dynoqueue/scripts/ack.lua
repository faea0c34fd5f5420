-- ack: end the lease of messages; they leave the queue (DynoQueue.ack / ack_many).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', then pairs: id, receipt ('' = any lease of that id)
-- Returns: how many were leased (by that receipt, when given) and are now gone. A message that
-- is waiting (never popped, or put back after its lease expired) is not acked and stays; one
-- delivered again since the receipt was issued is not acked either.
-- With a retention the acked message stays queryable (state ACKED) until the sweep drops it.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local p = policy_of(k)
local acked = 0
for i = 2, #ARGV, 2 do
  local id, receipt = ARGV[i], ARGV[i + 1]
  for s = 1, k.n do
    local leased
    if receipt == '' then
      leased = redis.call('ZREM', k.unack(s), id) == 1
    elseif redis.call('ZSCORE', k.unack(s), id) then
      leased = receipt_of(life_of(k, id)) == receipt
      if leased then redis.call('ZREM', k.unack(s), id) end
      if not leased then break end
    end
    if leased then
      finish(k, p, id, 'ACKED', now, s, true)
      acked = acked + 1
      break
    end
  end
end
return acked
