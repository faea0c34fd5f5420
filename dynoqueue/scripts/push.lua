-- push: store messages and make them wait in their shard (DynoQueue.push and ensure).
-- KEYS: QueueKeys.lifecycle_keys() (message hash, lifecycle keys, n queue zsets, n unack zsets)
-- ARGV: [1] now override in epoch ms or '' for server TIME,
--       [2] mode: 'replace' (an existing id is replaced and moved, its lifecycle reset),
--           'keep' (an id waiting, leased, retained as ended, or dead is left alone: first wins),
--           'ensure' (an id waiting or leased is left alone: dyno-queues' ensure),
--       then per message 8 values: id, json, delay ms (>= 0), priority (0..99), shard index
--       (1..n), due at epoch ms or '' (a past time means due now), own max deliveries or '',
--       own TTL ms or ''.
-- Returns: {now, then 1 (pushed) or 0 (left alone) per message}.
-- A pushed id lives in exactly one shard and never both waits and is leased.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local mode = ARGV[2]
local p = policy_of(k)
-- Ended and dead records of a pushed id are dropped; most queues have none, so look once.
local has_ended = redis.call('EXISTS', k.ended) == 1
local has_dead = redis.call('EXISTS', k.dead) == 1
local first_before = {}
local rung = {}
local out = {now}
for i = 3, #ARGV, 8 do
  local id, json = ARGV[i], ARGV[i + 1]
  local s = tonumber(ARGV[i + 4])
  local qkey = k.queue(s)
  local exists = redis.call('HEXISTS', k.msg, id) == 1
  local skip = false
  if mode == 'keep' then
    skip = exists or (has_ended and redis.call('HEXISTS', k.ended, id) == 1)
           or (has_dead and redis.call('ZSCORE', k.dead, id))
  elseif mode == 'ensure' then
    skip = where(k, id) ~= nil
  end
  if skip then
    out[#out + 1] = 0
  else
    if exists then forget_everywhere(k, id) end
    if has_ended then
      redis.call('HDEL', k.ended, id)
      redis.call('ZREM', k.endedat, id)
    end
    if has_dead then
      redis.call('HDEL', k.deadinfo, id)
      redis.call('ZREM', k.dead, id)
    end
    local due = now + tonumber(ARGV[i + 2])
    if ARGV[i + 5] ~= '' then due = math.max(now, tonumber(ARGV[i + 5])) end
    local score = due + tonumber(ARGV[i + 3]) / 100
    if first_before[s] == nil then first_before[s] = earliest(qkey) or false end
    redis.call('HSET', k.msg, id, json)
    redis.call('ZADD', qkey, score, id)
    local own_max = tonumber(ARGV[i + 6])
    local ttl = tonumber(ARGV[i + 7]) or p.ttl
    if own_max or ttl > 0 then
      save_life(k, id, {e = now, m = own_max, t = tonumber(ARGV[i + 7])})
    end
    if ttl > 0 then
      redis.call('ZADD', k.expiry, due + ttl, id)
      HAS_EXPIRY = true
    end
    if first_before[s] == false or score < first_before[s] then rung[s] = true end
    out[#out + 1] = 1
  end
end
for s, _ in pairs(rung) do ring(k.queue(s)) end
return out
