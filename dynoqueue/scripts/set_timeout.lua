-- set_timeout: make a waiting message due at now + timeout, keeping its priority fraction
-- (DynoQueue.set_timeout).
-- KEYS: [1] message hash, [2..n+1] queue zsets of every shard
-- ARGV: [1] now override or '', [2] id, [3] timeout ms, [4] priority, [5] JSON the caller read,
--       [6] JSON with the new timeout
-- Returns: 1 updated; 0 not waiting in any shard (unknown, or leased); -1 the JSON changed since
-- the caller read it (retry).
local now = now_ms(ARGV[1])
local id = ARGV[2]
if redis.call('HGET', KEYS[1], id) ~= ARGV[5] then return -1 end
local score = now + tonumber(ARGV[3]) + tonumber(ARGV[4]) / 100
for k = 2, #KEYS do
  if redis.call('ZSCORE', KEYS[k], id) then
    local first = earliest(KEYS[k])
    redis.call('ZADD', KEYS[k], score, id)
    redis.call('HSET', KEYS[1], id, ARGV[6])
    if score < first then ring(KEYS[k]) end
    return 1
  end
end
return 0
