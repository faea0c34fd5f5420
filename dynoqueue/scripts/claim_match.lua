-- claim_match: lease the due message with the lowest score whose stored JSON matches a Lua
-- pattern, over the given shards (DynoQueue.pop_msg_with_predicate).
-- KEYS: [1] message hash, [2..k+1] queue zsets to search, [k+2..2k+1] their unack zsets
-- ARGV: [1] now override or '', [2] Lua pattern, [3] unack timeout ms
-- Returns: {shard position, json}, false when nothing due matches; error BADPATTERN on a bad pattern.
-- Cost: reads every due message of every shard until each shard's first match; keep patterns for
-- administration, not the hot path.
local now = now_ms(ARGV[1])
local pattern = ARGV[2]
local k = (#KEYS - 1) / 2
local best_shard, best_id, best_score, best_json
local page = 100
for s = 1, k do
  local offset = 0
  local done = false
  while not done do
    local ids = redis.call('ZRANGEBYSCORE', KEYS[1 + s], '-inf', due_bound(now), 'WITHSCORES', 'LIMIT', offset, page)
    if #ids == 0 then break end
    for i = 1, #ids, 2 do
      local score = tonumber(ids[i + 1])
      if best_score and score >= best_score then done = true; break end
      local json = redis.call('HGET', KEYS[1], ids[i])
      if json then
        local m = matches(json, pattern)
        if type(m) == 'table' then return m end
        if m then best_shard, best_id, best_score, best_json = s, ids[i], score, json; done = true; break end
      end
    end
    offset = offset + page
  end
end
if not best_id then return false end
redis.call('ZREM', KEYS[1 + best_shard], best_id)
redis.call('ZADD', KEYS[1 + k + best_shard], now + tonumber(ARGV[3]), best_id)
return {best_shard, best_json}
