-- group_info: where an ordered group stands (DynoQueue.group_info). Read-only.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] group, [3] the shard index a new group would go to
-- Returns: {waiting count, leased id or '', due ms of the message delivered next or '',
--           shard index}. "Next": the current message when it waits; when it is leased, the
-- first one waiting behind it (deliverable once the leased one is acked, dead-lettered or
-- removed).
--- @include "lib/clock.lua"
--- @include "lib/group_records.lua"
--- @include "lib/keys.lua"
--- @include "lib/strict.lua"
local k = lifecycle_keys()
now_ms(ARGV[1])
local g = ARGV[2]
local head = redis.call('HGET', k.ghead, g)
local rec = head and group_rec(k, head)
if not rec then return {0, '', '', tonumber(ARGV[3])} end
local s = rec.s
local line = group_line(k, g)
local rank = (mark_rank(k, line, head, rec) or -1) + 1  -- members before it are stale
local waiting = redis.call('ZCARD', line) - rank
if redis.call('ZSCORE', k.unack(s), head) then
  local first = redis.call('ZRANGE', line, rank, rank, 'WITHSCORES')
  local due = ''
  if first[2] then due = string.format('%.0f', tonumber(first[2])) end
  return {waiting, head, due, s}
end
local due = ''
local score = redis.call('ZSCORE', k.queue(s), head)
if score then
  due = string.format('%.0f', math.floor(tonumber(score)))
else
  score = redis.call('ZSCORE', k.ready(s), head)
  if score then due = string.format('%.0f', (split_ready_score(tonumber(score)))) end
end
if score then waiting = waiting + 1 end
return {waiting, '', due, s}
