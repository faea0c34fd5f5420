-- release: give leased messages back, due now, as if they had not been delivered: the delivery
-- each lease counted is taken back (DynoQueue.release; a cancelled asyncio pop; a Worker that
-- shuts down with messages it never started).
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', then pairs: id, receipt ('' = any lease of that id)
-- Returns: how many were given back (an id not leased, or leased again since its receipt, is left
-- alone).
--- @include "lib/clock.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/limits.lua"
--- @include "lib/message.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
--- @include "lib/waiting.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local released = 0
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  local s, rec = leased(k, id, ARGV[i + 1])
  local json = s and redis.call('HGET', k.msg, id)
  if json then
    redis.call('ZREM', k.unack(s), id)
    rec.d = math.max(0, (rec.d or 1) - 1)
    if rec.d == 0 then rec.d = nil; rec.c = nil end
    save_life(k, id, rec)
    wait_in(k, s, id, now, priority_of(json))
    released = released + 1
  end
end
leases_freed(k, policy_of(k), released)
return released
