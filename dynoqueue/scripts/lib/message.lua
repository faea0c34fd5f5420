-- A message's stored JSON: its priority and group; ids ordered as Redis orders them.

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
