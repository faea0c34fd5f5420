-- sizes: how many messages wait and how many are leased in each shard (DynoQueue.size /
-- shard_sizes). Read-only; one round trip on the non-quorum connection.
-- KEYS: the n queue zsets, the n unack zsets, the n ready zsets (the tail of
--       QueueKeys.lifecycle_keys()), then the group waiting counts hash
-- ARGV: none
-- Returns: {waiting 1, leased 1, waiting 2, leased 2, ...}; waiting counts the queue and ready
-- zsets and the grouped messages waiting behind their group's current one (in group lines).
local n = (#KEYS - 1) / 3
local fields = {}
for s = 1, n do fields[s] = s end
local lines = redis.call('HMGET', KEYS[#KEYS], unpack(fields))
local out = {}
for s = 1, n do
  out[#out + 1] = redis.call('ZCARD', KEYS[s]) + redis.call('ZCARD', KEYS[2 * n + s])
                  + (tonumber(lines[s]) or 0)
  out[#out + 1] = redis.call('ZCARD', KEYS[n + s])
end
return out
