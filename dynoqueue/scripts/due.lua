-- due: how soon a claim of some shards could lease something (a partitioned queue's pop asks
-- the partitions it has not claimed from yet all at once, then claims only where something is
-- due). Read-only: it runs on the quorum connection, which claims read too.
-- KEYS: per shard asked: its queue zset, its unack zset, its ready zset
-- ARGV: [1] now override or ''
-- Returns: 0 when a claim of one of them would lease something now (a due waiting message, an
-- ended lease, a ready one), else the ms until the first of those is due, or -1 when none waits
-- and none is leased.
--- @include "lib/clock.lua"
local now = now_ms(ARGV[1])
local first = nil
for i = 1, #KEYS, 3 do
  if redis.call('EXISTS', KEYS[i + 2]) == 1 then return 0 end
  local waiting, lease_end = earliest(KEYS[i]), earliest(KEYS[i + 1])
  if lease_end and (not waiting or lease_end < waiting) then waiting = lease_end end
  if waiting and (not first or waiting < first) then first = waiting end
end
if not first then return -1 end
if first < now + 1 then return 0 end  -- due by the claim's own test
return math.ceil(first - now)
