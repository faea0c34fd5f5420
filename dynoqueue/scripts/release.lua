-- release: put back the messages a cancelled waiting pop had leased, so nobody waits for their
-- lease to expire (dynoqueue.asyncio DynoQueue.pop cancelled by asyncio.wait_for or Task.cancel).
-- KEYS: [1] message hash, [2] queue zset of the shard, [3] unack zset of the shard
-- ARGV: [1] now override or '', [2] the lease expiry that pop set (epoch ms), [3..] ids
-- Returns: how many were put back (due now, with their priority fraction).
-- Only ids whose lease is still exactly that pop's are touched: one acked, removed or leased again
-- since then is left alone.
local now = now_ms(ARGV[1])
local lease = tonumber(ARGV[2])
local released = 0
for i = 3, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[3], id)
  if score and tonumber(score) == lease then
    redis.call('ZREM', KEYS[3], id)
    local json = redis.call('HGET', KEYS[1], id)
    if json then
      redis.call('ZADD', KEYS[2], now + priority_of(json) / 100, id)
      released = released + 1
    end
  end
end
if released > 0 then ring(KEYS[2]) end
return released
