-- find_stale: ids waiting in a shard whose payload is gone and that are not leased
-- (DynoQueue.find_stale_messages). Read-only: reports, never deletes.
-- KEYS: [1] message hash, [2] queue zset of the shard, [3] unack zset of the shard, [4] ready
--       zset of the shard
-- ARGV: [1] how many of the shard's earliest (and, with strict priority, most urgent) ids to
--       check
-- Returns: the stale ids.
local stale = {}
for _, zset in ipairs({KEYS[2], KEYS[4]}) do
  for _, id in ipairs(redis.call('ZRANGE', zset, 0, tonumber(ARGV[1]) - 1)) do
    if redis.call('HEXISTS', KEYS[1], id) == 0 and not redis.call('ZSCORE', KEYS[3], id) then
      stale[#stale + 1] = id
    end
  end
end
return stale
