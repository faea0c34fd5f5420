-- The shards' pub/sub doorbells.

-- Ring a shard's doorbell: waiting pops subscribed to the channel named like the shard's queue
-- key re-check at once instead of sleeping until their next poll.
-- DOORBELL is switched off (text replaced at load) for servers without pub/sub, e.g. Dynomite.
-- pcall: an ACL user without channel permission (Redis 7 gives new users none) gets an error
-- from PUBLISH after the script's writes, which stay applied; a lost ring only delays pops.
-- SHARDED (switched on at load for Redis Cluster): SPUBLISH, which reaches only the nodes of
-- the channel's slot instead of the whole cluster bus; PUBLISH where the server lacks it.
local DOORBELL = true
local SHARDED = false
local function ring(queue_key)
  if not DOORBELL then return end
  if not SHARDED or type(redis.pcall('SPUBLISH', queue_key, '1')) == 'table' then
    redis.pcall('PUBLISH', queue_key, '1')
  end
end
