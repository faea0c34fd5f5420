-- postpone: make a message waiting again, due after a delay and with a new priority, in one
-- step, whether it was waiting or leased (DynoQueue.postpone, Conductor's QueueDAO.postpone,
-- which was remove + push there). Its delivery count is kept; its lease, if any, ends.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] delay ms (>= 0), [4] priority (0..99),
--       [5] the JSON the caller read, [6] that JSON with the new priority and timeout
-- Returns: 1 postponed; 0 not waiting or leased (unknown, ended, dead); -1 the JSON changed since
-- the caller read it (retry).
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
local s, place = where(k, id)
local json = redis.call('HGET', k.msg, id)
if not place or not json then return 0 end
if json ~= ARGV[5] then return -1 end
local qkey = k.queue(s)
local first = earliest(qkey)
local score = now + tonumber(ARGV[3]) + tonumber(ARGV[4]) / 100
redis.call('ZREM', k.unack(s), id)
redis.call('ZADD', qkey, score, id)
redis.call('HSET', k.msg, id, ARGV[6])
if first == nil or score < first then ring(qkey) end
return 1
