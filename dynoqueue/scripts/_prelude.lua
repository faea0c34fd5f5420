-- Shared helpers, prepended to every script by dynoqueue.scripts.source(); not a script itself.
-- Scores are IEEE doubles: never tostring() one (Lua prints 14 digits and would round away the
-- priority fraction); pass numbers straight to redis.call, which keeps 17 digits.

-- Epoch ms: the injected clock's value when the caller passed one, else the server's TIME, so
-- producers and consumers with skewed clocks agree on when a message is due.
local function now_ms(override)
  if override ~= nil and override ~= '' then return tonumber(override) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
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

-- The priority stored in a message's JSON, 0..99; 0 when missing or unreadable.
local function priority_of(json)
  local ok, doc = pcall(cjson.decode, json)
  if ok and type(doc) == 'table' then
    local p = tonumber(doc['priority'])
    if p and p >= 0 and p <= 99 then return math.floor(p) end
  end
  return 0
end

-- Ring a shard's doorbell: waiting pops subscribed to the channel named like the shard's queue
-- key re-check at once instead of sleeping until their next poll.
-- DOORBELL is switched off (text replaced at load) for servers without pub/sub, e.g. Dynomite.
local DOORBELL = true
local function ring(queue_key)
  if DOORBELL then redis.call('PUBLISH', queue_key, '1') end
end

-- Lua pattern match that reports a malformed pattern as a typed error instead of a script crash.
local function matches(value, pattern)
  local ok, found = pcall(string.match, value, pattern)
  if not ok then return redis.error_reply('BADPATTERN ' .. tostring(found)) end
  return found ~= nil
end
