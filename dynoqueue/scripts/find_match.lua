-- find_match: the first stored message whose JSON matches a Lua pattern (DynoQueue
-- get_msg_with_predicate / contains_predicate). Read-only; runs on the non-quorum connection.
-- KEYS: [1] message hash, [2] the local queue zset
-- ARGV: [1] Lua pattern, [2] '1' = only messages waiting in the local shard
-- Returns: the id, false if none matches; error BADPATTERN on a malformed pattern.
-- Cost: HSCANs the whole hash in the worst case.
local cursor = '0'
repeat
  local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 200)
  cursor = page[1]
  local fields = page[2]
  for i = 1, #fields, 2 do
    local m = matches(fields[i + 1], ARGV[1])
    if type(m) == 'table' then return m end
    if m and (ARGV[2] ~= '1' or redis.call('ZSCORE', KEYS[2], fields[i])) then return fields[i] end
  end
until cursor == '0'
return false
