-- find_match: of the ids whose JSON the client matched (DynoQueue get_msg_with_predicate /
-- contains_predicate with local_only), the first that waits in the local shard: in its queue
-- or ready zset, or behind its group's current message. The pattern itself is matched in
-- Python (see dynoqueue.model.luapattern). Read-only; runs on the non-quorum connection.
-- KEYS: [1] message hash, [2] the local queue zset, [3] the local ready zset, [4] group of,
--       [5] group line base, [6] group head
-- ARGV: [1] the local shard's index, [2..] ids
-- Returns: the id, or false when none waits locally.
--- @include "lib/group_records.lua"
local k = {groupof = KEYS[4], gline = KEYS[5], ghead = KEYS[6]}
local local_shard = tonumber(ARGV[1])

local function waits_locally(id)
  if redis.call('ZSCORE', KEYS[2], id) or redis.call('ZSCORE', KEYS[3], id) then return true end
  local rec = group_rec(k, id)
  return rec ~= nil and rec.s == local_shard and waits_in_line(k, rec, id)
end

for i = 2, #ARGV do
  if waits_locally(ARGV[i]) then return ARGV[i] end
end
return false
