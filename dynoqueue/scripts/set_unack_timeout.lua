-- set_unack_timeout: move a lease's expiry to now + timeout (DynoQueue.set_unack_timeout and
-- set_unack_timeout_if_shorter).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] timeout ms (>= 0), [4] '1' = only if that shortens
--       it, [5] receipt or '' (any lease of that id)
-- Returns: 1 if the lease was changed, 0 if the id is not leased (by that receipt), or would not
-- be shortened.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
local expiry = now + tonumber(ARGV[3])
for s = 1, k.n do
  local current = redis.call('ZSCORE', k.unack(s), id)
  if current then
    if ARGV[5] ~= '' and receipt_of(life_of(k, id)) ~= ARGV[5] then return 0 end
    if ARGV[4] == '1' and tonumber(current) <= expiry then return 0 end
    redis.call('ZADD', k.unack(s), expiry, id)
    return 1
  end
end
return 0
