-- peek: read due messages without leasing them (DynoQueue.peek / unsafe_peek_all_shards).
-- Read-only, so it runs on a replica through the non-quorum connection.
-- KEYS: [1] message hash, [2..k+1] queue zsets, read in that order until count is reached
-- ARGV: [1] now override or '', [2] count
-- Returns: {shard position, json, shard position, json, ...} in score order within each shard.
local now = now_ms(ARGV[1])
local want = tonumber(ARGV[2])
local out = {}
for s = 2, #KEYS do
  if want <= 0 then break end
  local ids = redis.call('ZRANGEBYSCORE', KEYS[s], '-inf', due_bound(now), 'LIMIT', 0, want)
  for _, id in ipairs(ids) do
    local json = redis.call('HGET', KEYS[1], id)
    if json then
      out[#out + 1] = s - 1
      out[#out + 1] = json
      want = want - 1
    end
  end
end
return out
