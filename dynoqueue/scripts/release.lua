-- release: put back the messages a cancelled waiting pop had leased, so nobody waits for their
-- lease to expire (dynoqueue.asyncio DynoQueue.pop cancelled by asyncio.wait_for or Task.cancel).
-- The delivery it counted is taken back: the caller never saw the message.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index, [3] the lease expiry that pop set (epoch ms),
--       [4..] ids
-- Returns: how many were put back (due now, with their priority fraction).
-- Only ids whose lease is still exactly that pop's are touched: one acked, removed or leased again
-- since then is left alone.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local released = 0
for i = 4, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', k.unack(s), id)
  if score and tonumber(score) == lease then
    redis.call('ZREM', k.unack(s), id)
    local json = redis.call('HGET', k.msg, id)
    if json then
      local rec = life_of(k, id)
      rec.d = math.max(0, (rec.d or 1) - 1)
      if rec.d == 0 then rec.d = nil; rec.c = nil end
      save_life(k, id, rec)
      wait_in(k, s, id, now, priority_of(json))
      released = released + 1
    end
  end
end
return released
