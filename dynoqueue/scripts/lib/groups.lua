-- Ordered groups: messages joining and leaving them, groups moving on.
--- @include "lib/clock.lua"
--- @include "lib/doorbell.lua"
--- @include "lib/group_records.lua"
--- @include "lib/message.lua"
--- @include "lib/records.lua"
--- @include "lib/strict.lua"
--- @include "lib/waiting.lua"

-- The current messages of groups[i] (in shard shards[i], or in shard shards when it is a
-- number) left; succs[i] is the successor text from the leaving one's record (nil: it has
-- none, a Java client removed it; look it up in the line), starting at position ats[i] of
-- that string (1 when ats is nil). Each successor becomes current and waits, due at its own
-- due time; its line member stays, as the group's stale mark. A group with no successor has no
-- messages left: its head entry and line go. One HSET / HDEL of the heads, one ZADD per shard
-- and zset, one count per shard for all of them.
local function promote_groups(k, groups, shards, succs, ats)
  local sub = string.sub
  local heads, nh, gone, by_shard, seen = {}, 0, {}, {}, {}
  local st = strict(k)
  local one = type(shards) == 'number' and shards
  for i = 1, #groups do
    local g = groups[i]
    if not seen[g] then  -- one ack leaves a group once; a second would skip a message
      seen[g] = true
      local s = one or shards[i]
      local succ, at = succs[i], ats and ats[i] or 1
      if not succ then succ, at = succ_from_line(k, g), 1 end
      if at <= #succ then  -- see succ_of for the fields' places
        local id = sub(succ, at + 35)
        heads[nh + 1] = g
        heads[nh + 2] = id
        nh = nh + 2
        local score = sub(succ, at, at + 18)
        local add = by_shard[s]
        if not add then
          add = {q = {}, nq = 0, r = {}, n = 0, min = score}
          by_shard[s] = add
        elseif score < add.min then
          add.min = score
        end
        add.n = add.n + 1
        local due = st and tonumber(sub(succ, at, at + 15))
        if due and due <= NOW then
          add.r[#add.r + 1] = ready_score(due, tonumber(sub(succ, at + 17, at + 18)))
          add.r[#add.r + 1] = id
        else
          add.q[add.nq + 1] = score
          add.q[add.nq + 2] = id
          add.nq = add.nq + 2
        end
      else
        gone[#gone + 1] = g
      end
    end
  end
  if nh > 0 then redis.call('HSET', k.ghead, unpack(heads)) end
  if #gone > 0 then
    redis.call('HDEL', k.ghead, unpack(gone))
    local lines = {}
    for i, g in ipairs(gone) do lines[i] = group_line(k, g) end
    redis.call('DEL', unpack(lines))  -- only stale members are left in them
  end
  for s, add in pairs(by_shard) do
    local first = first_waiting(k, s)  -- as wait_in: before the new ones are in
    if add.nq > 0 then redis.call('ZADD', k.queue(s), unpack(add.q)) end
    if #add.r > 0 then redis.call('ZADD', k.ready(s), unpack(add.r)) end
    count_waiting(k, s, -add.n)
    if tonumber(add.min) < first and not RUNG[s] then
      RUNG[s] = true
      ring(k.queue(s))
    end
  end
end

-- id leaves its group (it ended, or is re-pushed or rescheduled): if it was the current one
-- (current = true: the caller knows, e.g. it was leased), the next one becomes current; if it
-- waited in the line, the message before it takes its successor.
local function group_leave(k, id, current)
  if not has_groups(k) then return end
  local raw = redis.call('HGET', k.groupof, id)
  if not raw then return end
  redis.call('HDEL', k.groupof, id)
  local rec = parse_group_rec(raw)
  local g, s = rec.g, rec.s
  local head = redis.call('HGET', k.ghead, g)
  if current or head == id then
    promote_groups(k, {g}, s, {rec.succ})
    return
  end
  local line = group_line(k, g)
  local member = line_member(rec, id)
  local rank = redis.call('ZRANK', line, member)
  if not rank then return end
  local succ = rec.succ
  local pred = head
  local prec = head and group_rec(k, head)
  if rank > 0 then  -- the member before: a waiting one, or the stale mark (then the current)
    local before = redis.call('ZRANGE', line, rank - 1, rank - 1, 'WITHSCORES')
    if not (prec and before[1] == line_member(prec, head)) then
      prec, pred = entry_rec(before[1], before[2], s, g)
    end
  end
  if prec then save_group_rec(k, pred, prec, succ) end
  redis.call('ZREM', line, member)
  count_waiting(k, s, -1)
end

-- id (its JSON stored, in no zset) joins group g, due at due with priority pr and push
-- sequence seq. It goes to the group's shard (s, the client's crc32 pick, only for a group
-- with no messages). It becomes current if the group has none, or if it is due before a
-- current one that waits and was never delivered; else it waits in the line, in due order,
-- linked in after the message before it. Returns its shard.
local function group_insert(k, id, g, s, due, pr, seq)
  HAS_GROUPS = true
  local head = redis.call('HGET', k.ghead, g)
  local cur = head and group_rec(k, head)
  if head and not (cur and redis.call('HEXISTS', k.msg, head) == 1) then
    -- the current message is gone (a Java client acked or removed it): repair the group first
    if cur then group_leave(k, head, true) else promote_groups(k, {g}, s, {nil}) end
    head = redis.call('HGET', k.ghead, g)
    cur = head and group_rec(k, head)
  end
  if cur then s = cur.s end
  due = math.min(math.max(due, 0), 9999999999999999)
  local key = string.format('%016.0f%016.0f', due, seq)
  local mine = {key = key, seq = string.sub(key, 17, 32), s = s, pr = pr, g = g}
  if not cur then
    save_group_rec(k, id, mine, '')
    redis.call('HSET', k.ghead, g, id)
    wait_in(k, s, id, due, pr)
    return s
  end
  local line = group_line(k, g)
  local mark = line_member(cur, head)  -- in the line when the current one came from there
  -- Cut the stale members off (ranks up to the mark), once: before an insert that does not go
  -- last, and on every 16th push (by sequence) otherwise, so they stay few at no cost per push.
  local cut = false
  local function cut_stale()
    if cut then return end
    cut = true
    local stale = mark_rank(k, line, head, cur)
    if stale then redis.call('ZREMRANGEBYRANK', line, 0, stale) end
  end
  if seq % 16 == 0 then cut_stale() end
  if bytes_less(key, cur.key) and not redis.call('ZSCORE', k.unack(s), head)
      and (life_of(k, head).d or 0) == 0 then
    -- due before the current one, which waits undelivered: this one goes first
    cut_stale()
    unwait(k, head, s)
    count_waiting(k, s, redis.call('ZADD', line, cur.due, mark))
    save_group_rec(k, id, mine, succ_of(cur, head))
    redis.call('HSET', k.ghead, g, id)
    wait_in(k, s, id, due, pr)
    return s
  end
  -- One that sorts before the current one (due earlier, or as early and pushed first: it was
  -- rescheduled while the current one is leased) would sort before the stale mark, and a cut
  -- of the members up to the mark would take it: cut them first.
  if bytes_less(key, cur.key) then cut_stale() end
  local member = line_member(mine, id)
  count_waiting(k, s, redis.call('ZADD', line, due, member))
  -- Link it in: the message before it names it as successor, and it names the one after it.
  -- Most pushes go last (due no earlier than the last one's): the last two members tell;
  -- else its rank does. A member's record is its line entry (score: due) plus g and s.
  local near = redis.call('ZRANGE', line, -2, -1, 'WITHSCORES')
  local before, succ = nil, ''
  if near[3] == member then  -- last: the one before is a waiting one, or the mark
    if near[1] ~= mark then before = 1 end
  elseif not (near[1] == member and not near[3]) then
    cut_stale()  -- so the one before it is a waiting one
    local rank = redis.call('ZRANK', line, member)
    near = redis.call('ZRANGE', line, math.max(rank - 1, 0), rank + 1, 'WITHSCORES')
    if rank > 0 then
      before = 1
      if near[5] then succ = succ_of_entry(near[5], near[6]) end
    elseif near[3] then
      succ = succ_of_entry(near[3], near[4])
    end
  end
  save_group_rec(k, id, mine, succ)
  if before then
    local prec, pred = entry_rec(near[before], near[before + 1], s, g)
    save_group_rec(k, pred, prec, succ_of(mine, id))
  else  -- first in line: the current message names it
    save_group_rec(k, head, cur, succ_of(mine, id))
  end
  return s
end

-- A grouped id (already out of its queue, ready and unack zsets) gets a new due time and
-- priority (set_timeout, postpone): it keeps its push sequence and takes its place again.
local function group_reschedule(k, id, rec, due, pr)
  group_leave(k, id)
  -- a current one that came from the line left its member there (stale): same sequence, so
  -- its new member could be that one; it goes first
  redis.call('ZREM', group_line(k, rec.g), line_member(rec, id))
  group_insert(k, id, rec.g, rec.s, due, pr, tonumber(rec.seq))
end
