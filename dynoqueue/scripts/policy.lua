-- policy: store a queue's QueuePolicy unless one is stored, and return what is stored, so every
-- process can check it agrees (DynoQueue's first call with an explicit policy).
-- KEYS: [1] policy key
-- ARGV: [1] the policy as JSON
-- Returns: the stored policy JSON.
redis.call('SET', KEYS[1], ARGV[1], 'NX')
return redis.call('GET', KEYS[1])
