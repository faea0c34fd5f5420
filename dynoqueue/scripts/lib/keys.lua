-- The KEYS of the scripts that change a queue's messages.

-- Scripts that take QueueKeys.lifecycle_keys(): message hash, life, policy, dead, dead info,
-- ended, ended at, expiry, sweep cursor, group of, group head, group sequence, group sweep
-- cursor, born, group line base (a name: group_line() adds the group), group waiting counts,
-- then n queue zsets, n unack zsets and n ready zsets, and last the rate limit's log, the
-- limited counter and the pause flag.
-- (One table constructor: Lua sizes the table for all its fields at once.)
local FIXED_KEYS = 16
local function lifecycle_keys()
  local n = (#KEYS - FIXED_KEYS - 3) / 3
  return {msg = KEYS[1], life = KEYS[2], policy = KEYS[3], dead = KEYS[4], deadinfo = KEYS[5],
          ended = KEYS[6], endedat = KEYS[7], expiry = KEYS[8], sweep = KEYS[9],
          groupof = KEYS[10], ghead = KEYS[11], gseq = KEYS[12], gsweep = KEYS[13],
          born = KEYS[14], gline = KEYS[15], gwait = KEYS[16], n = n, rate = KEYS[#KEYS - 2],
          limited = KEYS[#KEYS - 1], paused = KEYS[#KEYS],
          queue = function(s) return KEYS[FIXED_KEYS + s] end,
          unack = function(s) return KEYS[FIXED_KEYS + n + s] end,
          ready = function(s) return KEYS[FIXED_KEYS + 2 * n + s] end}
end
