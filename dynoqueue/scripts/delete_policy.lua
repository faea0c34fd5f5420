-- delete_policy: delete a queue's stored QueuePolicy (DynoQueue.delete_policy, `dynoqueue policy
-- --delete`), atomically; every process's scripts apply none from their next call. A policy that
-- fixes where messages wait (strict_priority, partitions) is kept while the queue holds any
-- message or dead letter: without it they would sit where no process looks.
-- KEYS: [1] policy key, [2] message hash, [3] dead zset
-- ARGV: none
-- Returns: 1 deleted, 0 none stored, {-1, stored JSON} refused (a layout policy, messages held).
local raw = redis.call('GET', KEYS[1])
if not raw then return 0 end
local doc = cjson.decode(raw)
local layout = (tonumber(doc.strict) or 0) ~= 0 or (tonumber(doc.parts) or 1) > 1
if layout and redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then return {-1, raw} end
redis.call('DEL', KEYS[1])
return 1
