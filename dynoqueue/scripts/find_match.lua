-- find_match: the first stored message whose JSON matches a Lua pattern (DynoQueue
-- get_msg_with_predicate / contains_predicate). Read-only; runs on the non-quorum connection.
-- KEYS: [1] message hash, [2] the local queue zset, [3] the local ready zset, [4] group of,
--       [5] the local group queue zset
-- ARGV: [1] Lua pattern, [2] '1' = only messages waiting in the local shard (in its queue or
--       ready zset, or behind their group's current message), [3] the local shard's index
-- Returns: the id, false if none matches; error BADPATTERN on a malformed pattern.
-- Cost: HSCANs the whole hash in the worst case.
local k = {groupof = KEYS[4]}
function k.gq() return KEYS[5] end
local local_shard = tonumber(ARGV[3])

local function waits_locally(id)
  if redis.call('ZSCORE', KEYS[2], id) or redis.call('ZSCORE', KEYS[3], id) then return true end
  local rec = group_rec(k, id)
  return rec ~= nil and rec.s == local_shard
         and redis.call('ZSCORE', KEYS[5], pending_member(rec, id)) ~= false
end

local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 200)
  cursor = page[1]
  local fields = page[2]
  for i = 1, #fields, 2 do
    local m = matches(fields[i + 1], ARGV[1])
    if type(m) == 'table' then return m end
    if m and (ARGV[2] ~= '1' or waits_locally(fields[i])) then return fields[i] end
  end
until cursor == '0'
return false
