-- claim_id: lease one message by id if it is waiting and due (DynoQueue.pop_with_msg_id and
-- unsafe_pop_with_msg_id_all_shards). Shards are tried in the order given.
-- KEYS: [1] message hash, [2..k+1] queue zsets to search, [k+2..2k+1] their unack zsets
-- ARGV: [1] now override or '', [2] id, [3] unack timeout ms
-- Returns: {shard position (1..k), json}, or false when not waiting, not yet due, or unknown.
local now = now_ms(ARGV[1])
local id = ARGV[2]
local k = (#KEYS - 1) / 2
for s = 1, k do
  local score = redis.call('ZSCORE', KEYS[1 + s], id)
  if score then
    if tonumber(score) >= now + 1 then return false end
    local json = redis.call('HGET', KEYS[1], id)
    redis.call('ZREM', KEYS[1 + s], id)
    if not json then return false end
    redis.call('ZADD', KEYS[1 + k + s], now + tonumber(ARGV[3]), id)
    return {s, json}
  end
end
return false
