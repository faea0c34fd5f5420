-- Shared helpers, prepended to every script by dynoqueue.scripts.source(); not a script itself.
-- Scores are IEEE doubles: never tostring() one (Lua prints 14 digits and would round away the
-- priority fraction); pass numbers straight to redis.call, which keeps 17 digits.

-- Epoch ms: the injected clock's value when the caller passed one, else the server's TIME, so
-- producers and consumers with skewed clocks agree on when a message is due.
-- The value is kept in NOW for the helpers below (every state-changing script calls now_ms first).
local NOW = nil
local function now_ms(override)
  if override ~= nil and override ~= '' then
    NOW = tonumber(override)
  else
    local t = redis.call('TIME')
    NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return NOW
end

-- ZRANGEBYSCORE bound for "due at now": a score t + p/100 is due once now >= t, i.e. score < now + 1.
local function due_bound(now)
  return '(' .. string.format('%.0f', now + 1)
end

-- Lowest score of a zset, or nil when it is empty.
local function earliest(key)
  local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
  if first[2] then return tonumber(first[2]) end
  return nil
end

-- The priority (0..99; 0 when missing or unreadable) and the group (nil when none) stored in a
-- message's JSON.
local function fields_of(json)
  local ok, doc = pcall(cjson.decode, json)
  local pr, group = 0, nil
  if ok and type(doc) == 'table' then
    local p = tonumber(doc['priority'])
    if p and p >= 0 and p <= 99 then pr = math.floor(p) end
    if type(doc['group']) == 'string' and doc['group'] ~= '' then group = doc['group'] end
  end
  return pr, group
end

-- The priority alone. dynoqueue and Jackson write it as the last field when there is no group:
-- the pair right before the final brace of a JSON object is one of its own (top-level) fields,
-- and a later duplicate key wins in cjson too, so it is read from the tail without decoding
-- the whole message (~2.5 us each in Redis' Lua). Anything else is decoded.
local function priority_of(json)
  local pr = string.match(string.sub(json, -15), '"priority":(%d%d?)}$')
  if pr then return tonumber(pr) end
  return (fields_of(json))
end

-- Whether string a sorts before b by bytes, as Redis orders zset members with equal scores
-- (Lua's own "<" on strings follows the server's locale).
local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Ring a shard's doorbell: waiting pops subscribed to the channel named like the shard's queue
-- key re-check at once instead of sleeping until their next poll.
-- DOORBELL is switched off (text replaced at load) for servers without pub/sub, e.g. Dynomite.
-- pcall: an ACL user without channel permission (Redis 7 gives new users none) gets an error
-- from PUBLISH after the script's writes, which stay applied; a lost ring only delays pops.
local DOORBELL = true
local function ring(queue_key)
  if DOORBELL then redis.pcall('PUBLISH', queue_key, '1') end
end

-- ---------------------------------------------------------------------------------- lifecycle
-- Scripts that take QueueKeys.lifecycle_keys(): message hash, life, policy, dead, dead info,
-- ended, ended at, expiry, sweep cursor, group of, group head, group sequence, group sweep
-- cursor, born, group line base (a name: group_line() adds the group), group waiting counts,
-- then n queue zsets, n unack zsets and n ready zsets.
-- (One table constructor: Lua sizes the table for all its fields at once.)
local FIXED_KEYS = 16
local function lifecycle_keys()
  local n = (#KEYS - FIXED_KEYS) / 3
  return {msg = KEYS[1], life = KEYS[2], policy = KEYS[3], dead = KEYS[4], deadinfo = KEYS[5],
          ended = KEYS[6], endedat = KEYS[7], expiry = KEYS[8], sweep = KEYS[9],
          groupof = KEYS[10], ghead = KEYS[11], gseq = KEYS[12], gsweep = KEYS[13],
          born = KEYS[14], gline = KEYS[15], gwait = KEYS[16], n = n,
          queue = function(s) return KEYS[FIXED_KEYS + s] end,
          unack = function(s) return KEYS[FIXED_KEYS + n + s] end,
          ready = function(s) return KEYS[FIXED_KEYS + 2 * n + s] end}
end

-- The queue's stored QueuePolicy (defaults when none is stored): max deliveries, TTL ms,
-- retention ms, dead-letter retention ms (0 = off), strict priority. Read once per script call.
local POLICY = nil
-- The policy stored as raw (nil: none stored, the defaults), kept as the call's POLICY.
local function policy_from(raw)
  local p = {max = 0, ttl = 0, ret = 0, dret = 604800000, strict = 0}
  if raw then
    local ok, doc = pcall(cjson.decode, raw)
    if ok and type(doc) == 'table' then
      for f, v in pairs(doc) do if p[f] ~= nil then p[f] = tonumber(v) or p[f] end end
    end
  end
  p.strict = p.strict == 1
  POLICY = p
  return p
end

local function policy_of(k)
  if POLICY then return POLICY end
  return policy_from(redis.call('GET', k.policy))
end

-- A message's lifecycle record: d deliveries, c claim time of the current lease (the receipt
-- is d:c), e enqueued at, m its own max deliveries, t its own TTL, l last error. {} when it has
-- none. Stored as text, cheap to read and write with string.match: "d:c" when that is all it
-- holds (the common case), else "d:c:e:m:t" with absent numbers left empty and ":l" after it
-- when there is an error text (the rest of the string: it may hold colons).
-- e, m and t are written at push to the born hash (k.born, "e:m:t", see with_born), not to the
-- record: the record holds only per-delivery data and is absent until the first claim, so a
-- claim neither reads nor rewrites the push-time fields. Records stored by older versions
-- (JSON, "::e:m:t" from push, "d:c:e:m:t[:l]") still parse, and their e, m, t count when the
-- record has them (such a message has no born entry).
local function parse_life(raw)
  if not raw then return {} end
  if string.byte(raw, 1) ~= 123 then  -- not '{': the text form
    local d, c, rest = string.match(raw, '^(%d*):(%d*)(.*)$')
    if not d then return {} end
    local rec = {d = tonumber(d), c = tonumber(c)}
    if rest ~= '' then
      local e, m, t, l = string.match(rest, '^:(%d*):(%d*):(%d*)(.*)$')
      if not e or (l ~= '' and string.byte(l, 1) ~= 58) then return {} end
      rec.e, rec.m, rec.t = tonumber(e), tonumber(m), tonumber(t)
      if #l > 1 then rec.l = string.sub(l, 2) end
    end
    return rec
  end
  local ok, doc = pcall(cjson.decode, raw)
  if ok and type(doc) == 'table' then return doc end
  return {}
end

-- A field of the records hash that no message id can be (ids are UTF-8 text, where byte 0xFF
-- never occurs), with a value longer than hash-max-listpack-value (64 bytes by default). A claim
-- that writes many records at once writes it too, so Redis makes the hash a hash table at once:
-- in a listpack (up to hash-max-listpack-entries fields) every insert and lookup scans all the
-- fields, ~3 us per record for a batch of 500. It goes when it is the last field (ack, sweep).
-- (LIFE_PAD_VALUE is 200 dashes, one literal: string.rep or '..' would make it on every call.)
local LIFE_PAD, LIFE_PAD_FROM = '\255pad', 64
local LIFE_PAD_VALUE = '--------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------'

-- rec (parsed) with the push-time fields of its born entry (raw: "e:m:t" or nil) when the
-- record has none of its own; rec.b marks fields that came from there, so format_life leaves
-- them out of the record again. Returns rec.
local function with_born(rec, raw)
  if raw and rec.e == nil and rec.m == nil and rec.t == nil then
    local e, m, t = string.match(raw, '^(%d*):(%d*):(%d*)$')
    if e then
      rec.e, rec.m, rec.t, rec.b = tonumber(e), tonumber(m), tonumber(t), true
    end
  end
  return rec
end

local function life_of(k, id)
  local rec = parse_life(redis.call('HGET', k.life, id))
  if rec.e == nil and rec.m == nil and rec.t == nil then
    with_born(rec, redis.call('HGET', k.born, id))
  end
  return rec
end

-- The stored form of a lifecycle record (see parse_life).
local function life_number(x)
  x = tonumber(x)
  if x == nil then return '' end
  return string.format('%.0f', x)
end

-- The stored text of rec, or nil when it holds nothing to store (push-time fields from the
-- born hash, rec.b, stay there).
local function format_life(rec)
  local e, m, t = rec.e, rec.m, rec.t
  if rec.b then e, m, t = nil, nil, nil end
  if rec.d and rec.c and e == nil and m == nil and t == nil and (rec.l == nil or rec.l == '') then
    return string.format('%d:%.0f', rec.d, rec.c)
  end
  if rec.d == nil and rec.c == nil and e == nil and m == nil and t == nil
      and (rec.l == nil or rec.l == '') then
    return nil
  end
  local text = life_number(rec.d) .. ':' .. life_number(rec.c) .. ':' .. life_number(e)
               .. ':' .. life_number(m) .. ':' .. life_number(t)
  if rec.l ~= nil and rec.l ~= '' then text = text .. ':' .. tostring(rec.l) end
  return text
end

local function save_life(k, id, rec)
  local text = format_life(rec)
  if text == nil then redis.call('HDEL', k.life, id)
  else redis.call('HSET', k.life, id, text) end
end

-- The born entry of a message pushed at e with its own max deliveries m and TTL t (nil: none).
local function save_born(k, id, e, m, t)
  redis.call('HSET', k.born, id, life_number(e) .. ':' .. life_number(m) .. ':' .. life_number(t))
end

-- The receipt of a message's current lease, or nil if it was never delivered.
local function receipt_of(rec)
  if rec.d and rec.c then return string.format('%d:%.0f', rec.d, rec.c) end
  return nil
end

-- The shard (1..n) where id is leased, and its lifecycle record, when it is leased by receipt
-- ('' = any lease of the id); nil when it is not leased, or leased again since that receipt.
local function leased(k, id, receipt)
  for s = 1, k.n do
    if redis.call('ZSCORE', k.unack(s), id) then
      local rec = life_of(k, id)
      if receipt == '' or receipt_of(rec) == receipt then return s, rec end
      return nil, nil
    end
  end
  return nil, nil
end

-- Whether raw, a message's stored lifecycle record (nil: none), is the lease of receipt want
-- (non-empty). A record's text form starts with its receipt (d:c), so that part is compared;
-- a JSON record of an older version is parsed.
local function record_has_receipt(raw, want)
  return raw ~= nil and raw ~= false and (raw == want or string.match(raw, '^%d+:%d+') == want
    or (string.byte(raw, 1) == 123 and receipt_of(parse_life(raw)) == want))
end

-- ids (with their receipts, in step) split by one ZMSCORE of shard s's unack zset: those leased
-- there and their receipts, then the others and theirs (the next shard's to look at). Counts
-- are kept by hand: t[#t + 1] costs a length lookup per message.
local function split_leased(k, s, ids, receipts)
  local scores = redis.call('ZMSCORE', k.unack(s), unpack(ids))
  local here, want, rest, rest_receipts = {}, {}, {}, {}
  local nh, nr = 0, 0
  for i, id in ipairs(ids) do
    if scores[i] then
      nh = nh + 1
      here[nh] = id
      want[nh] = receipts[i]
    else
      nr = nr + 1
      rest[nr] = id
      rest_receipts[nr] = receipts[i]
    end
  end
  return here, want, rest, rest_receipts
end

local function max_deliveries(rec, p)
  return tonumber(rec.m) or p.max
end

-- Whether any message of the queue has a TTL (an EXPIRY entry): checked once per script call,
-- so queues without TTLs pay nothing per message.
local HAS_EXPIRY = nil
local function has_expiry(k)
  if HAS_EXPIRY == nil then HAS_EXPIRY = redis.call('EXISTS', k.expiry) == 1 end
  return HAS_EXPIRY
end

-- Whether any message of the queue has a born entry: checked once per script call.
local HAS_BORN = nil
local function has_born(k)
  if HAS_BORN == nil then HAS_BORN = redis.call('EXISTS', k.born) == 1 end
  return HAS_BORN
end

-- ---------------------------------------------------------------------- strict priority
-- With strict priority, due waiting ids of shard s sit in K.ready(s), scored
-- priority * 2^42 + due ms: exact in a double (below 2^49) for any due time before 2109, so the
-- lowest score is the most urgent due message, the earliest due among equal priorities.
-- Ids still delayed wait in K.queue(s) as always; a claim first moves the due ones over.
local READY_SCALE = 4398046511104
-- Most due ids one claim (or strict peek) moves from the queue zset to the ready zset.
local PROMOTE_LIMIT = 1000

local function strict(k)
  return policy_of(k).strict
end

local function ready_score(due, pr)
  return pr * READY_SCALE + math.max(due, 0)
end

-- The due ms and priority of a queue zset score (due + priority / 100).
local function split_queue_score(score)
  local t = math.floor(score)
  return t, math.floor((score - t) * 100 + 0.5)
end

-- The due ms and priority of a ready zset score.
local function split_ready_score(score)
  local pr = math.floor(score / READY_SCALE)
  return score - pr * READY_SCALE, pr
end

-- Move up to PROMOTE_LIMIT due ids of shard s, earliest first, from the queue to the ready zset.
local function promote(k, s)
  local due = redis.call('ZRANGEBYSCORE', k.queue(s), '-inf', due_bound(NOW), 'WITHSCORES',
                         'LIMIT', 0, PROMOTE_LIMIT)
  if #due == 0 then return end
  local add, ids = {}, {}
  for i = 1, #due, 2 do
    local t, pr = split_queue_score(tonumber(due[i + 1]))
    add[#add + 1] = ready_score(t, pr)
    add[#add + 1] = due[i]
    ids[#ids + 1] = due[i]
  end
  redis.call('ZADD', k.ready(s), unpack(add))
  redis.call('ZREM', k.queue(s), unpack(ids))
end

-- ---------------------------------------------------------------------- waiting
-- The queue-zset score of shard s's earliest waiting message before this script call changed
-- it (-inf when something is ready, +inf when nothing waits), so the doorbell rings only when a
-- change makes a message due earlier than anything before; at most once per shard and call.
local FIRST, RUNG = {}, {}
local function first_waiting(k, s)
  if FIRST[s] == nil then
    if strict(k) and redis.call('EXISTS', k.ready(s)) == 1 then FIRST[s] = -math.huge
    else FIRST[s] = earliest(k.queue(s)) or math.huge end
  end
  return FIRST[s]
end

-- Make id wait in shard s, due at epoch ms due with priority pr: in the ready zset when the
-- queue has strict priority and it is due now, else in the queue zset (score due + pr / 100).
local function wait_in(k, s, id, due, pr)
  local first = first_waiting(k, s)
  local score = due + pr / 100
  if strict(k) and due <= NOW then
    redis.call('ZADD', k.ready(s), ready_score(due, pr), id)
  else
    redis.call('ZADD', k.queue(s), score, id)
  end
  if score < first and not RUNG[s] then
    RUNG[s] = true
    ring(k.queue(s))
  end
end

-- Take id out of shard s's waiting zsets (not its group's pending ones).
local function unwait(k, id, s)
  redis.call('ZREM', k.queue(s), id)
  if strict(k) then redis.call('ZREM', k.ready(s), id) end
end

-- ---------------------------------------------------------------------- ordered groups
-- All messages of a group live in one shard s. Only the group's current message (K.ghead)
-- is in a queue, ready or unack zset of s: waiting, or leased (then the group is locked). The
-- others wait in the group's line (group_line: a small zset, scored by due ms; member: the
-- push sequence (16 digits), the priority (2 digits), the id), in the order they are
-- delivered. K.gwait counts each shard's waiting line members (for sizes).
--
-- K.groupof has each grouped id's record: due ms (16 digits), sequence (16), shard (3),
-- priority (2), group, then byte 255 and its successor: the message delivered after it (as
-- succ_of writes it), or nothing for the group's last one. (Byte 255 is
-- in no UTF-8 text; a record without it, written by an older version, has no successor: the
-- next one is then looked up in the line.) The successors chain the group in delivery order,
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
-- the end: none), or nil and nil when it names none (an older version's record). An ack reads
-- the successor in place: cutting it out first would cost one more string per message.
local function group_and_next(raw)
  local cut = string.find(raw, '\255', 38, true)
  if cut then return string.sub(raw, 38, cut - 1), raw, cut + 1 end
  return string.sub(raw, 38), nil, nil
end

-- A group record's fields from its text raw: {key = due .. sequence (32 digits, its place in
-- the group), due, seq (its 16 digits), s, pr, g, succ (the successor's text: '' for none,
-- nil when not known)}.
local function parse_group_rec(raw)
  local g, text, at = group_and_next(raw)
  return {key = string.sub(raw, 1, 32), due = tonumber(string.sub(raw, 1, 16)),
          seq = string.sub(raw, 17, 32), s = tonumber(string.sub(raw, 33, 35)),
          pr = tonumber(string.sub(raw, 36, 37)), g = g, succ = text and string.sub(text, at)}
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

-- The successor text of group g's current message when its record does not have one (an
-- older version's record, or none: a Java client removed it): the line's first member after
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

-- The current messages of groups[i] (in shard shards[i], or in shard shards when it is a
-- number) left; succs[i] is the successor text from the leaving one's record (nil: look it
-- up in the line), starting at position ats[i] of that string (1 when ats is nil). Each
-- successor becomes current and waits, due at its own due time; its line member stays, as
-- the group's stale mark. A group with no successor has no messages left: its head entry and
-- line go. One HSET / HDEL of the heads, one ZADD per shard and zset, one count per shard for
-- all of them.
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
  if not succ then
    local after = redis.call('ZRANGE', line, rank + 1, rank + 1, 'WITHSCORES')
    succ = after[1] and succ_of_entry(after[1], after[2]) or ''
  end
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

-- ---------------------------------------------------------------------- where and ending

-- The shard (1..n) that holds id, and where: 'unack', 'queue', 'ready' (strict priority: due),
-- 'group' (waiting behind its group's current message) or nil.
local function where(k, id)
  local st = strict(k)
  for s = 1, k.n do
    if redis.call('ZSCORE', k.unack(s), id) then return s, 'unack' end
    if redis.call('ZSCORE', k.queue(s), id) then return s, 'queue' end
    if st and redis.call('ZSCORE', k.ready(s), id) then return s, 'ready' end
  end
  if has_groups(k) then
    local rec = group_rec(k, id)
    if rec and waits_in_line(k, rec, id) then return rec.s, 'group' end
  end
  return nil, nil
end

-- Drop id from its zsets (shard s when known, else every shard), its group, the message hash
-- and its lifecycle data.
local function forget(k, id, s)
  local first, last = 1, k.n
  if s then first, last = s, s end
  for i = first, last do
    unwait(k, id, i)
    redis.call('ZREM', k.unack(i), id)
  end
  group_leave(k, id)
  redis.call('HDEL', k.msg, id)
  redis.call('HDEL', k.life, id)
  redis.call('HDEL', k.born, id)
  if has_expiry(k) then redis.call('ZREM', k.expiry, id) end
end

local function forget_everywhere(k, id)
  forget(k, id, nil)
end

-- The message leaves the queue for good, in state 'ACKED', 'EXPIRED' or 'DELETED', once it is
-- out of its zsets: its payload, group place and lifecycle data go (the next of its group
-- becomes current; leased = true: it was leased, so it was its group's current one); with a
-- retention it stays queryable (state, payload, deliveries) until the sweep drops it.
local function finish(k, p, id, state, now, shard, leased)
  if p.ret > 0 then
    local json = redis.call('HGET', k.msg, id)
    if json then
      local rec = life_of(k, id)
      redis.call('HSET', k.ended, id, cjson.encode({s = state, at = now, j = json, d = rec.d or 0,
                                                   sh = shard, l = rec.l, e = rec.e, m = rec.m,
                                                   t = rec.t}))
      redis.call('ZADD', k.endedat, now, id)
    end
  end
  group_leave(k, id, leased)
  redis.call('HDEL', k.msg, id)
  redis.call('HDEL', k.life, id)
  redis.call('HDEL', k.born, id)
  if has_expiry(k) then redis.call('ZREM', k.expiry, id) end
end

-- The same for a message still in a zset of shard s (nil: look in every shard).
local function end_message(k, p, id, state, now, shard)
  local first, last = 1, k.n
  if shard then first, last = shard, shard end
  for i = first, last do
    unwait(k, id, i)
    redis.call('ZREM', k.unack(i), id)
  end
  finish(k, p, id, state, now, shard)
end

-- id is in a zset of shard s but its payload is gone: evicted (an allkeys-* maxmemory-policy
-- evicts whole keys, the message hash among them) or deleted by hand. It can never be
-- delivered, so it becomes a dead letter with reason 'payload-missing' and no payload (no 'j')
-- instead of vanishing; callers count these so the client logs them. An older dead letter of
-- the same id (one with its payload) is kept as it is.
local function bury_missing(k, id, now, s)
  local rec = life_of(k, id)
  forget(k, id, s)
  if redis.call('HSETNX', k.deadinfo, id, cjson.encode({r = 'payload-missing', at = now,
                                                       d = rec.d or 0, sh = s, l = rec.l,
                                                       e = rec.e, m = rec.m, t = rec.t})) == 1 then
    redis.call('ZADD', k.dead, now, id)
  end
end

-- The message becomes a dead letter (reason 'max_deliveries', 'ttl' or 'undecodable'): out of
-- every zset, its group and the message hash, into the dead zset (by time of death) and dead
-- info. Without its payload it becomes a 'payload-missing' dead letter instead (false).
local function dead_letter(k, id, reason, now, shard)
  local json = redis.call('HGET', k.msg, id)
  if not json then
    bury_missing(k, id, now, shard)
    return false
  end
  local rec = life_of(k, id)
  forget(k, id, shard)
  redis.call('ZADD', k.dead, now, id)
  redis.call('HSET', k.deadinfo, id, cjson.encode({r = reason, at = now, j = json,
                                                  d = rec.d or 0, sh = shard, l = rec.l,
                                                  e = rec.e, m = rec.m, t = rec.t}))
  return true
end

-- Put back up to limit messages of shard s whose lease ended by now (the oldest first), each
-- due at its lease expiry (past: at once) plus its priority fraction; a grouped one stays its
-- group's current message. One whose lease was its max deliveries-th is dead-lettered, one
-- without payload buried. A claim runs this on its shard first, so an expired lease is
-- delivered again by the next pop (SQS's visibility timeout); the unack reprocessor runs it for
-- the shards nobody pops. Returns: requeued, without payload, dead-lettered, 1 if more remain.
local function requeue_leases(k, s, now, limit)
  local unack = k.unack(s)
  local expired = redis.call('ZRANGEBYSCORE', unack, '-inf', string.format('%.0f', now),
                             'WITHSCORES', 'LIMIT', 0, limit)
  local p = nil
  local requeued, stale, dead = 0, 0, 0
  for i = 1, #expired, 2 do
    local id = expired[i]
    local json = redis.call('HGET', k.msg, id)
    if not json then
      bury_missing(k, id, now, s)
      stale = stale + 1
    else
      redis.call('ZREM', unack, id)
      p = p or policy_of(k)
      local rec = life_of(k, id)
      local most = max_deliveries(rec, p)
      if most > 0 and (rec.d or 0) >= most then
        dead_letter(k, id, 'max_deliveries', now, s)
        dead = dead + 1
      else
        wait_in(k, s, id, math.floor(tonumber(expired[i + 1])), priority_of(json))
        requeued = requeued + 1
      end
    end
  end
  local more = 0
  if #expired == 2 * limit then more = 1 end
  return requeued, stale, dead, more
end

-- Lease id (waiting in shard s, in zset from when known, its JSON read) for lease_ms: count
-- the delivery, set the receipt. Returns the delivery count, or nil when its TTL had run out
-- (it ends instead).
local function lease(k, p, id, s, now, lease_ms, from)
  if has_expiry(k) then
    local expires = redis.call('ZSCORE', k.expiry, id)
    if expires and tonumber(expires) <= now then
      local rec = life_of(k, id)
      if (rec.d or 0) > 0 then dead_letter(k, id, 'ttl', now, s)
      else end_message(k, p, id, 'EXPIRED', now, s) end
      return nil
    end
  end
  local rec = life_of(k, id)
  rec.d = (rec.d or 0) + 1
  rec.c = now
  save_life(k, id, rec)
  if from then redis.call('ZREM', from, id) else unwait(k, id, s) end
  redis.call('ZADD', k.unack(s), now + lease_ms, id)
  return rec.d
end
