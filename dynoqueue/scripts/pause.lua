-- pause: stop the claims of one queue (or partition) from leasing anything (DynoQueue.pause);
-- pushes, acks and every other call go on. Stored configuration: clear() keeps it.
-- KEYS: [1] the pause flag (P.PAUSED.Q)
-- ARGV: none
-- Returns: 1 if the queue was running, 0 if it was paused already.
if redis.call('SET', KEYS[1], '1', 'NX') then return 1 end
return 0
