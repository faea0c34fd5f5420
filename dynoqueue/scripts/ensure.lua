-- ensure: atomic push-if-absent (DynoQueue.ensure). Absent = neither waiting nor leased in any shard.
-- KEYS: [1] message hash, [2..n+1] queue zsets, [n+2..2n+1] unack zsets
-- ARGV: [1] now override or '', [2] n, [3] id, [4] json, [5] delay ms, [6] priority, [7] shard index
-- Returns: 1 if the message was pushed, 0 if it was already present.
local now = now_ms(ARGV[1])
local n = tonumber(ARGV[2])
local id = ARGV[3]
for k = 2, 2 * n + 1 do
  if redis.call('ZSCORE', KEYS[k], id) then return 0 end
end
local qkey = KEYS[1 + tonumber(ARGV[7])]
local score = now + tonumber(ARGV[5]) + tonumber(ARGV[6]) / 100
local first = earliest(qkey)
redis.call('HSET', KEYS[1], id, ARGV[4])
redis.call('ZADD', qkey, score, id)
if first == nil or score < first then ring(qkey) end
return 1
