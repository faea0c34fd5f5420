-- sweep: the lifecycle upkeep the unack reprocessor runs for each queue, bounded per call:
-- messages whose TTL ran out end (EXPIRED if never delivered, else dead-lettered "ttl"), retained
-- ended messages and dead letters past their retention are dropped, and lifecycle records and
-- born entries and group places whose message is gone (acked or removed by a Java v1 client) are swept; a group
-- whose current message a Java client acked or removed gets its next one.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] most ids to handle per kind (1..1000)
-- Returns: {expired, dead-lettered by TTL, ended dropped, dead letters dropped, orphans swept,
--           1 if more remains}
--- @include "lib/clock.lua"
--- @include "lib/dead.lua"
--- @include "lib/ending.lua"
--- @include "lib/group_records.lua"
--- @include "lib/groups.lua"
--- @include "lib/keys.lua"
--- @include "lib/policy.lua"
--- @include "lib/records.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local limit = tonumber(ARGV[2])
local p = policy_of(k)
local expired, dead_ttl, ended_dropped, dead_dropped, orphans, more = 0, 0, 0, 0, 0, 0
local bound = string.format('%.0f', now)

local due = redis.call('ZRANGEBYSCORE', k.expiry, '-inf', bound, 'LIMIT', 0, limit)
for _, id in ipairs(due) do
  local s, place = where(k, id)
  if not place or redis.call('HEXISTS', k.msg, id) == 0 then
    redis.call('ZREM', k.expiry, id)
  elseif (life_of(k, id).d or 0) > 0 then
    dead_letter(k, id, 'ttl', now, s)
    dead_ttl = dead_ttl + 1
  else
    end_message(k, p, id, 'EXPIRED', now, s)
    expired = expired + 1
  end
end
if #due == limit then more = 1 end

local function drop(zset, hash, older_than)
  local ids = redis.call('ZRANGEBYSCORE', zset, '-inf', string.format('%.0f', older_than), 'LIMIT', 0, limit)
  for _, id in ipairs(ids) do
    redis.call('ZREM', zset, id)
    redis.call('HDEL', hash, id)
  end
  if #ids == limit then more = 1 end
  return #ids
end
ended_dropped = drop(k.endedat, k.ended, now - p.ret)
dead_dropped = drop(k.dead, k.deadinfo, now - p.dret)

-- One page per call of each scan; the cursors carry on at the next call. Records and born
-- entries share the cursor key, "life cursor:born cursor".
local function scan(hash, cursor, orphaned)
  local page = redis.call('HSCAN', hash, cursor, 'COUNT', limit)
  for i = 1, #page[2], 2 do
    local id = page[2][i]
    if id ~= LIFE_PAD and redis.call('HEXISTS', k.msg, id) == 0 then
      orphaned(id)
      orphans = orphans + 1
    end
  end
  return page[1]
end
local cursors = redis.call('GET', k.sweep) or '0'
local life_cursor, born_cursor = string.match(cursors, '^(%d+):(%d+)$')
if not life_cursor then life_cursor, born_cursor = '0', '0' end
life_cursor = scan(k.life, life_cursor, function(id)
  redis.call('HDEL', k.life, id)
  redis.call('HDEL', k.born, id)
  redis.call('ZREM', k.expiry, id)
end)
born_cursor = scan(k.born, born_cursor, function(id)
  redis.call('HDEL', k.born, id)
  redis.call('ZREM', k.expiry, id)
end)
if life_cursor == '0' and born_cursor == '0' then redis.call('DEL', k.sweep)
else redis.call('SET', k.sweep, life_cursor .. ':' .. born_cursor) end
if redis.call('HLEN', k.life) == 1 then redis.call('HDEL', k.life, LIFE_PAD) end
if has_groups(k) then
  local cursor = scan(k.groupof, redis.call('GET', k.gsweep) or '0',
                      function(id) group_leave(k, id) end)
  if cursor == '0' then redis.call('DEL', k.gsweep) else redis.call('SET', k.gsweep, cursor) end
end
return {expired, dead_ttl, ended_dropped, dead_dropped, orphans, more}
