-- The shards' pub/sub doorbells.

-- Ring a shard's doorbell: waiting pops subscribed to the channel named like the shard's queue
-- key re-check at once instead of sleeping until their next poll.
-- DOORBELL is switched off (text replaced at load) for servers without pub/sub, e.g. Dynomite.
-- pcall: an ACL user without channel permission (Redis 7 gives new users none) gets an error
-- from PUBLISH after the script's writes, which stay applied; a lost ring only delays pops.
local DOORBELL = true
local function ring(queue_key)
  if DOORBELL then redis.pcall('PUBLISH', queue_key, '1') end
end
