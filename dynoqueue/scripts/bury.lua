-- bury: dead-letter leased messages now (DynoQueue.dead_letter, the Worker's DeadLetterNow), or
-- ones the client could not decode (reason "undecodable", after a claim), so a corrupt message
-- never breaks a pop and the rest of its batch is delivered.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] reason, [3] error text or '', then pairs: id, receipt
--       ('' = any lease of that id)
-- Returns: {how many were dead-lettered, how many of the leased ids had no payload (dead-lettered
-- 'payload-missing' instead)}; an id not leased, or leased again since its receipt, is left
-- alone.
--- @include "lib/clock.lua"
--- @include "lib/dead.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/records.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local buried, missing = 0, 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local s, rec = leased(k, id, ARGV[i + 1])
  if s then
    if ARGV[3] ~= '' then
      rec.l = ARGV[3]
      save_life(k, id, rec)
    end
    if dead_letter(k, id, ARGV[2], now, s) then buried = buried + 1 else missing = missing + 1 end
  end
end
return {buried, missing}
