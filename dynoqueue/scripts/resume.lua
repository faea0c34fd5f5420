-- resume: let a paused queue's (or partition's) claims lease again (DynoQueue.resume), and ring
-- every shard's doorbell so that waiting pops claim at once instead of at their next poll.
-- KEYS: [1] the pause flag (P.PAUSED.Q), [2..] every queue shard zset (the doorbells' names)
-- ARGV: none
-- Returns: 1 if the queue was paused, 0 if it was running already.
--- @include "lib/doorbell.lua"
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
for i = 2, #KEYS do ring(KEYS[i]) end
return 1
