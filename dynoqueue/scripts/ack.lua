-- ack: end the lease of messages and delete their payloads (DynoQueue.ack / ack_many).
-- KEYS: [1] message hash, [2..n+1] unack zsets of every shard
-- ARGV: ids
-- Returns: how many ids were leased and are now gone. A message that is waiting (never popped, or
-- already put back by unack processing) is not acked and stays.
local acked = 0
for _, id in ipairs(ARGV) do
  for k = 2, #KEYS do
    if redis.call('ZREM', KEYS[k], id) == 1 then
      redis.call('HDEL', KEYS[1], id)
      acked = acked + 1
      break
    end
  end
end
return acked
