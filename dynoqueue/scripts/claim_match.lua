-- claim_match: lease the due message with the lowest score whose stored JSON matches a Lua
-- pattern, over the given shards (DynoQueue.pop_msg_with_predicate). With strict priority the
-- due ids of those shards first move to the ready zset and "lowest score" means most urgent.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] Lua pattern, [3] lease ms, [4..] shard indexes to search
-- Returns: {shard index, json, deliveries, now, due ms (its score without the priority)}, false
-- when nothing due matches; error BADPATTERN on a bad pattern.
-- Cost: reads every due message of every shard until each shard's first match; keep patterns for
-- administration, not the hot path.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local pattern = ARGV[2]
local p = policy_of(k)
local best_shard, best_id, best_score, best_json, best_from
local page = 100
for i = 4, #ARGV do
  local s = tonumber(ARGV[i])
  local zset, bound = k.queue(s), due_bound(now)
  if p.strict then
    promote(k, s)
    zset, bound = k.ready(s), '+inf'
  end
  local offset = 0
  local done = false
  while not done do
    local ids = redis.call('ZRANGEBYSCORE', zset, '-inf', bound, 'WITHSCORES', 'LIMIT', offset, page)
    if #ids == 0 then break end
    for j = 1, #ids, 2 do
      local score = tonumber(ids[j + 1])
      if best_score and score >= best_score then done = true; break end
      local json = redis.call('HGET', k.msg, ids[j])
      if json then
        local m = matches(json, pattern)
        if type(m) == 'table' then return m end
        if m then
          best_shard, best_id, best_score, best_json, best_from = s, ids[j], score, json, zset
          done = true
          break
        end
      end
    end
    offset = offset + page
  end
end
if not best_id then return false end
local deliveries = lease(k, p, best_id, best_shard, now, tonumber(ARGV[3]), best_from)
if not deliveries then return false end
local due = p.strict and split_ready_score(best_score) or split_queue_score(best_score)
return {best_shard, best_json, deliveries, now, due}
