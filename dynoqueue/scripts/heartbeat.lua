-- heartbeat: record that a factory whose local shard is ARGV[2] is alive, and name the shards
-- whose factories have all been silent for more than the grace period (orphaned: the caller
-- adopts them). A configured shard that never beat counts as silent from the first beat that
-- found it missing (that beat writes its time for it): a zone whose process died before its
-- first beat, or that was never deployed, is adopted like one that died later.
-- KEYS: [1] P.ZONES (hash shard -> last beat, epoch ms)
-- ARGV: [1] now override or '', [2] local shard, [3] grace (ms, >= 1), [4..] every shard
-- Returns: {now (epoch ms), orphaned shard, ...} in the order of ARGV[4..]
--- @include "lib/clock.lua"
local now = now_ms(ARGV[1])
local zones = KEYS[1]
local grace = tonumber(ARGV[3])
local mine = tonumber(redis.call('HGET', zones, ARGV[2]) or '')
-- Another process of the zone with a clock ahead keeps its later beat.
if not mine or now > mine then
  redis.call('HSET', zones, ARGV[2], string.format('%.0f', now))
end
local out = {now}
for i = 4, #ARGV do
  if ARGV[i] ~= ARGV[2] then
    local last = tonumber(redis.call('HGET', zones, ARGV[i]) or '')
    if not last then
      redis.call('HSET', zones, ARGV[i], string.format('%.0f', now))
    elseif now - last > grace then
      out[#out + 1] = ARGV[i]
    end
  end
end
return out
