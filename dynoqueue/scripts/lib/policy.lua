-- The queue's stored policy.

-- The queue's stored QueuePolicy (defaults when none is stored): max deliveries, TTL ms,
-- retention ms, dead-letter retention ms (0 = off), strict priority, max in flight (mif) and
-- the rate limit (rlc deliveries per rlp ms; 0: none). Read once per script call.
local POLICY = nil
-- The policy stored as raw (nil: none stored, the defaults), kept as the call's POLICY.
local function policy_from(raw)
  local p = {max = 0, ttl = 0, ret = 0, dret = 604800000, strict = 0, mif = 0, rlc = 0,
             rlp = 0}
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
