-- push: store messages and make them wait in their shard (DynoQueue.push, ensure via ensure.lua).
-- KEYS: [1] message hash, [2..n+1] queue zset of shard 1..n, [n+2..2n+1] unack zset of shard 1..n
-- ARGV: [1] now override in epoch ms or '' for server TIME, [2] n = number of shards,
--       then per message 5 values: id, json, delay ms (>= 0), priority (0..99), shard index (1..n)
-- Returns: the now (epoch ms) used for the whole batch.
-- An id that already exists is moved: every other copy in any queue or unack zset is removed, so an
-- id lives in exactly one shard and never both waits and is leased.
local now = now_ms(ARGV[1])
local n = tonumber(ARGV[2])
local hash = KEYS[1]
local first_before = {}
local rung = {}
for i = 3, #ARGV, 5 do
  local id, json = ARGV[i], ARGV[i + 1]
  local score = now + tonumber(ARGV[i + 2]) + tonumber(ARGV[i + 3]) / 100
  local s = tonumber(ARGV[i + 4])
  local qkey = KEYS[1 + s]
  if first_before[s] == nil then first_before[s] = earliest(qkey) or false end
  if redis.call('HEXISTS', hash, id) == 1 then
    for k = 2, 2 * n + 1 do redis.call('ZREM', KEYS[k], id) end
  end
  redis.call('HSET', hash, id, json)
  redis.call('ZADD', qkey, score, id)
  if first_before[s] == false or score < first_before[s] then rung[s] = true end
end
for s, _ in pairs(rung) do ring(KEYS[1 + s]) end
return now
