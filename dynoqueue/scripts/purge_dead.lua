-- purge_dead: delete the oldest dead letters for good (DynoQueue.purge_dead).
-- KEYS: [1] dead zset, [2] dead info hash
-- ARGV: [1] most to delete
-- Returns: how many were deleted.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
for _, id in ipairs(ids) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
return #ids
