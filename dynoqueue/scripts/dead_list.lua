-- dead_list: the oldest dead letters (DynoQueue.dead_letters). Read-only.
-- KEYS: [1] dead zset, [2] dead info hash
-- ARGV: [1] most to return
-- Returns: {id, died at, dead record JSON, ...}, oldest first.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local out = {}
for i = 1, #ids, 2 do
  local info = redis.call('HGET', KEYS[2], ids[i])
  if info then
    out[#out + 1] = ids[i]
    out[#out + 1] = ids[i + 1]
    out[#out + 1] = info
  end
end
return out
