-- set_unack_timeout: move a lease's expiry to now + timeout (DynoQueue.set_unack_timeout and
-- set_unack_timeout_if_shorter).
-- KEYS: unack zsets of every shard
-- ARGV: [1] now override or '', [2] id, [3] timeout ms (>= 0), [4] '1' = only if that shortens it
-- Returns: 1 if the lease was changed, 0 if the id is not leased (or would not be shortened).
local now = now_ms(ARGV[1])
local id = ARGV[2]
local expiry = now + tonumber(ARGV[3])
for _, key in ipairs(KEYS) do
  local current = redis.call('ZSCORE', key, id)
  if current then
    if ARGV[4] == '1' and tonumber(current) <= expiry then return 0 end
    redis.call('ZADD', key, expiry, id)
    return 1
  end
end
return 0
