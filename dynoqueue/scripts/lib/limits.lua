-- Queue-wide limits of the stored policy (QueuePolicy.max_in_flight and rate_limit), held by
-- the claim scripts: they take at most limit_room() and log what they leased with started().
--- @include "lib/clock.lua"
--- @include "lib/doorbell.lua"

-- Leases held now, every shard of the queue.
local function in_flight(k)
  local held = 0
  for i = 1, k.n do held = held + redis.call('ZCARD', k.unack(i)) end
  return held
end

-- How many of want deliveries the limits let start now, and, when they hold some back, the ms
-- until a place may free (the earliest lease end, or the rate window's oldest delivery leaving
-- it; -1: only an ack or the like frees one, and it rings). nil: nothing held back.
-- max_in_flight counts the leases of every shard (expired ones too, until put back: the claim
-- puts back every shard's first when the cap holds it back).
local function limit_room(k, p, now, want)
  local allowed, wake = want, nil
  if p.mif > 0 then
    local free = p.mif - in_flight(k)
    if free < allowed then
      allowed = math.max(free, 0)
      local first = nil
      for i = 1, k.n do
        local ends = earliest(k.unack(i))
        if ends and (not first or ends < first) then first = ends end
      end
      wake = first and math.max(1, math.ceil(first - now)) or -1
    end
  end
  if p.rlc > 0 then
    -- a delivery at t counts in the window while now - rlp < t
    redis.call('ZREMRANGEBYSCORE', k.rate, '-inf', string.format('%.0f', now - p.rlp))
    local free = p.rlc - redis.call('ZCARD', k.rate)
    if free < allowed then
      allowed = math.max(free, 0)
      local oldest = earliest(k.rate)
      local opens = oldest and math.max(1, math.ceil(oldest + p.rlp - now)) or 1
      if not wake or wake < 0 or opens < wake then wake = opens end
    end
  end
  return allowed, wake
end

-- Log the deliveries that just started, for the rate limit (member id:claim ms): the ids at
-- ids[from], ids[from + step], ... up to ids[to].
local function started(k, p, now, ids, from, to, step)
  if p.rlc == 0 or to < from then return end
  local stamp = ':' .. string.format('%.0f', now)
  local args, n = {}, 0
  for i = from, to, step do
    args[n + 1] = now
    args[n + 2] = ids[i] .. stamp
    n = n + 2
  end
  redis.call('ZADD', k.rate, unpack(args))
  redis.call('PEXPIRE', k.rate, p.rlp + 1000)
end

-- ended leases just ended (ack, nack, release, remove, postpone, put back): when they held
-- max_in_flight at its cap, ring every shard's doorbell, so waiting pops claim again.
local function leases_freed(k, p, ended)
  if p.mif > 0 and ended > 0 and in_flight(k) + ended >= p.mif then
    for i = 1, k.n do ring(k.queue(i)) end
  end
end
