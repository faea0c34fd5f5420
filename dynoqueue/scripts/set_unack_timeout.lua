-- set_unack_timeout: move leases' expiry to now + timeout (DynoQueue.set_unack_timeout,
-- set_unack_timeout_if_shorter, and the batched set_unack_timeout_many of Worker heartbeats).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] timeout ms (>= 0), [3] '1' = only where that shortens it,
--       then pairs: id, receipt ('' = any lease of that id)
-- Returns: how many leases were changed (an id not leased by that receipt, or one that would not
-- be shortened, is not).
--- @include "lib/clock.lua"
--- @include "lib/keys.lua"
--- @include "lib/records.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local expiry = now + tonumber(ARGV[2])
local changed = 0
for i = 4, #ARGV, 2 do
  local id, receipt = ARGV[i], ARGV[i + 1]
  for s = 1, k.n do
    local current = redis.call('ZSCORE', k.unack(s), id)
    if current then
      if (receipt == '' or receipt_of(life_of(k, id)) == receipt)
          and not (ARGV[3] == '1' and tonumber(current) <= expiry) then
        redis.call('ZADD', k.unack(s), expiry, id)
        changed = changed + 1
      end
      break
    end
  end
end
return changed
