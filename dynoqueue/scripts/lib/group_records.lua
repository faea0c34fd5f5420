-- Ordered groups: their records, lines and counts.

-- All messages of a group live in one shard s. Only the group's current message (K.ghead)
-- is in a queue, ready or unack zset of s: waiting, or leased (then the group is locked). The
-- others wait in the group's line (group_line: a small zset, scored by due ms; member: the
-- push sequence (16 digits), the priority (2 digits), the id), in the order they are
-- delivered. K.gwait counts each shard's waiting line members (for sizes).
--
-- K.groupof has each grouped id's record: due ms (16 digits), sequence (16), shard (3),
-- priority (2), group, then byte 255 and its successor: the message delivered after it (as
-- succ_of writes it), or nothing for the group's last one (byte 255 is in no UTF-8 text).
-- The successors chain the group in delivery order,
-- so an ack moves a group on from the record it reads anyway, without touching the line: the
-- promoted message's member stays in the line, as its "stale mark" (K.ghead names the current
-- message; its member is in the line only when it came from there). The members up to the
-- mark are stale: messages already delivered and this current one. Pushes cut them off
-- (every 16th, and one that does not go last in the line, before it inserts), and the group's
-- last ack deletes the line.

-- Whether the queue has grouped messages at all: checked once per script call, so queues
-- without groups pay nothing per message.
local HAS_GROUPS = nil
local function has_groups(k)
  if HAS_GROUPS == nil then HAS_GROUPS = redis.call('EXISTS', k.groupof) == 1 end
  return HAS_GROUPS
end

-- The group of the record raw, then raw and the position its successor's text starts at (past
-- the end: none). An ack reads the successor in place: cutting it out first would cost one
-- more string per message.
local function group_and_next(raw)
  local cut = string.find(raw, '\255', 38, true)
  return string.sub(raw, 38, cut - 1), raw, cut + 1
end

-- A group record's fields from its text raw: {key = due .. sequence (32 digits, its place in
-- the group), due, seq (its 16 digits), s, pr, g, succ (the successor's text: '' for none)}.
local function parse_group_rec(raw)
  local g, text, at = group_and_next(raw)
  return {key = string.sub(raw, 1, 32), due = tonumber(string.sub(raw, 1, 16)),
          seq = string.sub(raw, 17, 32), s = tonumber(string.sub(raw, 33, 35)),
          pr = tonumber(string.sub(raw, 36, 37)), g = g, succ = string.sub(text, at)}
end

-- id's group record (parse_group_rec), or nil when it has no group.
local function group_rec(k, id)
  local raw = redis.call('HGET', k.groupof, id)
  if not raw then return nil end
  return parse_group_rec(raw)
end

-- Store rec as id's record, with successor text succ ('' for none).
local function save_group_rec(k, id, rec, succ)
  redis.call('HSET', k.groupof, id, rec.key .. string.format('%03d%02d', rec.s, rec.pr) .. rec.g
                                    .. '\255' .. succ)
end

-- The successor text naming id (its record rec): due ms (16 digits), '.', priority (2),
-- sequence (16), id. Its first 19 bytes are the queue score as Redis reads it (due + pr / 100,
-- without formatting a double in Lua), so moving a group on cuts strings and adds nothing.
local function succ_of(rec, id)
  return string.sub(rec.key, 1, 16) .. string.format('.%02d', rec.pr) .. rec.seq .. id
end

-- The record of a line entry (its member: sequence, priority, id; its score: due ms), in
-- group g's shard s, and its id: all a record holds, so none is read to rewrite it.
local function entry_rec(member, score, s, g)
  local seq = string.sub(member, 1, 16)
  return {key = string.format('%016.0f', tonumber(score)) .. seq, seq = seq, s = s, g = g,
          pr = tonumber(string.sub(member, 17, 18))}, string.sub(member, 19)
end

-- The successor text naming a line entry's message.
local function succ_of_entry(member, score)
  local rec, id = entry_rec(member, score)
  return succ_of(rec, id)
end

-- The key of group g's line: the base, '.', and g with every byte but 0-9 A-Z a-z _ : - written
-- %XX (as QueueKeys.group_line): no dot or brace, so the queue's hash tag stays the first.
local function escape_byte(c) return string.format('%%%02X', string.byte(c)) end
local function line_key(k, g)
  if string.find(g, '[^0-9A-Za-z_:%-]') then g = string.gsub(g, '[^0-9A-Za-z_:%-]', escape_byte) end
  return k.gline .. '.' .. g
end

-- The same, remembered for the script call (a push of many messages of one group).
local LINES = {}
local function group_line(k, g)
  local key = LINES[g]
  if not key then
    key = line_key(k, g)
    LINES[g] = key
  end
  return key
end

-- The line member of id (its record rec: seq, pr).
local function line_member(rec, id)
  return rec.seq .. string.format('%02d', rec.pr) .. id
end

-- Whether id (its record rec) waits in its group's line: its member is there and it is not
-- the current message (whose member may be there as the stale mark).
local function waits_in_line(k, rec, id)
  return redis.call('ZSCORE', group_line(k, rec.g), line_member(rec, id)) ~= false
         and redis.call('HGET', k.ghead, rec.g) ~= id
end

-- The rank of group g's stale mark in its line (the line member of its current message head,
-- record cur, when it is there), or nil: the members up to it are stale.
local function mark_rank(k, line, head, cur)
  if not cur then return nil end
  return redis.call('ZRANK', line, line_member(cur, head))
end

-- Shard s's line members changed by delta: keep its count in K.gwait (no field at 0). A script
-- that changes many (push) sets WAITING = {} first and calls flush_waiting(k) at its end: one
-- HINCRBY per shard and call instead of one per message.
local WAITING = nil
local function add_waiting(k, s, delta)
  if delta ~= 0 and redis.call('HINCRBY', k.gwait, s, delta) <= 0 then
    redis.call('HDEL', k.gwait, s)
  end
end

local function count_waiting(k, s, delta)
  if WAITING then WAITING[s] = (WAITING[s] or 0) + delta
  else add_waiting(k, s, delta) end
end

local function flush_waiting(k)
  if not WAITING then return end
  for s, delta in pairs(WAITING) do add_waiting(k, s, delta) end
  WAITING = nil
end

-- The successor text of group g's current message when it has no record (a Java client
-- removed it): the line's first member after
-- the stale ones (with no record to find the mark, members whose record is gone are skipped).
local function succ_from_line(k, g)
  local line = group_line(k, g)
  local head = redis.call('HGET', k.ghead, g)
  local rank = head and mark_rank(k, line, head, group_rec(k, head))
  rank = rank and rank + 1 or 0
  while true do
    local top = redis.call('ZRANGE', line, rank, rank, 'WITHSCORES')
    if not top[1] then return '' end
    local id = string.sub(top[1], 19)
    if id ~= head and redis.call('HEXISTS', k.groupof, id) == 1 then
      return succ_of_entry(top[1], top[2])
    end
    rank = rank + 1
  end
end
