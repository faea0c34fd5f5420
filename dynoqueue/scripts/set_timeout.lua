-- set_timeout: make a waiting message due at now + timeout, keeping its priority fraction
-- (DynoQueue.set_timeout). A TTL is counted from the new due time.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] timeout ms, [4] priority, [5] JSON the caller read,
--       [6] JSON with the new timeout
-- Returns: 1 updated; 0 not waiting in any shard (unknown, or leased); -1 the JSON changed since
-- the caller read it (retry).
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
if redis.call('HGET', k.msg, id) ~= ARGV[5] then return -1 end
local due = now + tonumber(ARGV[3])
local score = due + tonumber(ARGV[4]) / 100
for s = 1, k.n do
  local qkey = k.queue(s)
  if redis.call('ZSCORE', qkey, id) then
    local first = earliest(qkey)
    redis.call('ZADD', qkey, score, id)
    redis.call('HSET', k.msg, id, ARGV[6])
    if redis.call('ZSCORE', k.expiry, id) then
      local ttl = tonumber(life_of(k, id).t) or policy_of(k).ttl
      if ttl > 0 then redis.call('ZADD', k.expiry, due + ttl, id) end
    end
    if score < first then ring(qkey) end
    return 1
  end
end
return 0
