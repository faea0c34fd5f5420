-- remove: delete a message wherever it is, waiting or leased (DynoQueue.remove / atomic_remove).
-- KEYS: [1] message hash, then every queue and unack zset
-- ARGV: [1] id
-- Returns: 1 if anything was removed, else 0.
local id = ARGV[1]
local removed = redis.call('HDEL', KEYS[1], id)
for k = 2, #KEYS do removed = removed + redis.call('ZREM', KEYS[k], id) end
if removed > 0 then return 1 end
return 0
