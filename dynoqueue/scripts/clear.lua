-- clear: delete a queue with all its messages, lifecycle and ordering data (DynoQueue.clear),
-- at once: the group lines too, which no fixed key list names.
-- KEYS: [1] group head, [2] group line base (a name, not a key), then QueueKeys.every_key()
-- ARGV: none
-- Returns: how many keys were deleted.
-- A group with a line always has a current message, so the groups of the group head hash name
-- every line.
--- @include "lib/group_records.lua"
local k = {ghead = KEYS[1], gline = KEYS[2]}
local deleted = 0
local groups = redis.call('HKEYS', k.ghead)
for i = 1, #groups, 1000 do
  local lines = {}
  for j = i, math.min(i + 999, #groups) do lines[#lines + 1] = group_line(k, groups[j]) end
  deleted = deleted + redis.call('DEL', unpack(lines))
end
for i = 3, #KEYS, 1000 do
  deleted = deleted + redis.call('DEL', unpack(KEYS, i, math.min(i + 999, #KEYS)))
end
return deleted
