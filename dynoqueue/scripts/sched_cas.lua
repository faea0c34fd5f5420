-- sched_cas: move a schedule's record on after a pass queued its ticks, unless it changed
-- meanwhile (another factory's pass moved it, or an upsert replaced it): compare and set.
-- KEYS: [1] the queue's schedule records (P.SCHED.Q)
-- ARGV: [1] schedule id, [2] the record the pass read, [3] the record after its ticks
-- Returns: 1 when set, 0 when the stored record was not [2] (nothing written).
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
