-- claim_id: lease one message by id if it is waiting and due (DynoQueue.pop_with_msg_id and
-- unsafe_pop_with_msg_id_all_shards). Shards are tried in the order given. A grouped message
-- waiting behind its group's current one is not deliverable, so it is not claimed.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] id, [3] lease ms, [4..] shard indexes to search, in order
-- Returns: {shard index, json, deliveries, now, due ms (its score without the priority)}, or
-- false when not waiting, not yet due, unknown, ended by its TTL, or the queue is paused; -1 when its payload was
-- gone (it became a 'payload-missing' dead letter).
--- @include "lib/clock.lua"
--- @include "lib/dead.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/policy.lua"
--- @include "lib/strict.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local id = ARGV[2]
if redis.call('EXISTS', k.paused) == 1 then return false end
local p = policy_of(k)
for i = 4, #ARGV do
  local s = tonumber(ARGV[i])
  local from = k.queue(s)
  local score = redis.call('ZSCORE', from, id)
  if score and tonumber(score) >= now + 1 then return false end
  if not score and p.strict then
    from = k.ready(s)
    score = redis.call('ZSCORE', from, id)
  end
  if score then
    local json = redis.call('HGET', k.msg, id)
    if not json then
      bury_missing(k, id, now, s)
      return -1
    end
    local deliveries = lease(k, p, id, s, now, tonumber(ARGV[3]), from)
    if not deliveries then return false end
    local due = from == k.ready(s) and split_ready_score(tonumber(score))
                or split_queue_score(tonumber(score))
    return {s, json, deliveries, now, due}
  end
end
return false
