-- Time: the call's clock (NOW) and scores due by it. Scores are IEEE doubles: never tostring()
-- one (Lua prints 14 digits and would round away the priority fraction); pass numbers straight
-- to redis.call, which keeps 17 digits.

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
