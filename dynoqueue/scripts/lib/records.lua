-- Per-message records: the lifecycle record (deliveries, receipt, last error), the born entry
-- (push-time fields) and the TTL index.

-- A message's lifecycle record: d deliveries, c claim time of the current lease (the receipt
-- is d:c), l last error. {} when it has none. Stored as text, cheap to read and write with
-- string.match: "d:c" when that is all it holds (the common case), else "d:c:::" and ":l" after
-- it when there is an error text (the rest of the string: it may hold colons). The three empty
-- places are e enqueued at, m its own max deliveries and t its own TTL: those are written at
-- push to the born hash (k.born, "e:m:t", see with_born), not to the record, which holds only
-- per-delivery data and is absent until the first claim, so a claim neither reads nor
-- rewrites the push-time fields. (inspect.lua fills them in for the client: format_life.)
local function parse_life(raw)
  if not raw then return {} end
  local d, c, rest = string.match(raw, '^(%d*):(%d*)(.*)$')
  if not d then return {} end
  local rec = {d = tonumber(d), c = tonumber(c)}
  if rest ~= '' then
    local l = string.match(rest, '^:%d*:%d*:%d*(.*)$')
    if not l or (l ~= '' and string.byte(l, 1) ~= 58) then return {} end
    if #l > 1 then rec.l = string.sub(l, 2) end
  end
  return rec
end

-- A field of the records hash that no message id can be (ids are UTF-8 text, where byte 0xFF
-- never occurs), with a value longer than hash-max-listpack-value (64 bytes by default). A claim
-- that writes many records at once writes it too, so Redis makes the hash a hash table at once:
-- in a listpack (up to hash-max-listpack-entries fields) every insert and lookup scans all the
-- fields, ~3 us per record for a batch of 500. It goes when it is the last field (ack, sweep).
-- (LIFE_PAD_VALUE is 200 dashes, one literal: string.rep or '..' would make it on every call.)
local LIFE_PAD, LIFE_PAD_FROM = '\255pad', 64
local LIFE_PAD_VALUE = '--------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------'

-- rec (parsed) with the push-time fields of its born entry (raw: "e:m:t" or nil); rec.b marks
-- fields that came from there, so format_life leaves them out of the record again. Returns rec.
local function with_born(rec, raw)
  if raw then
    local e, m, t = string.match(raw, '^(%d*):(%d*):(%d*)$')
    if e then
      rec.e, rec.m, rec.t, rec.b = tonumber(e), tonumber(m), tonumber(t), true
    end
  end
  return rec
end

local function life_of(k, id)
  return with_born(parse_life(redis.call('HGET', k.life, id)), redis.call('HGET', k.born, id))
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

-- Whether raw, a message's stored lifecycle record (nil: none), is the lease of receipt want
-- (non-empty). A record starts with its receipt (d:c), so that part is compared.
local function record_has_receipt(raw, want)
  return raw ~= nil and raw ~= false and (raw == want or string.match(raw, '^%d+:%d+') == want)
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
