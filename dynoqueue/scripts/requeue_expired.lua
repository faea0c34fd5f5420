-- requeue_expired: put back messages of one shard whose lease expired (DynoQueue.process_unacks,
-- run by the unack reprocessor); one whose lease was its max deliveries-th is dead-lettered.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index, [3] batch size (1..1000)
-- Returns: {requeued, leased ids without payload (dead-lettered 'payload-missing'), 1 if more
-- expired leases remain, dead-lettered at their max deliveries}
-- A requeued message is due at its lease expiry (already past, so at once, oldest lease first)
-- plus its priority fraction; a grouped one stays its group's current message (requeue_leases).
--- @include "lib/clock.lua"
--- @include "lib/keys.lua"
--- @include "lib/leases.lua"
--- @include "lib/limits.lua"
--- @include "lib/policy.lua"
local k = lifecycle_keys()
local requeued, stale, dead, more = requeue_leases(k, tonumber(ARGV[2]), now_ms(ARGV[1]),
                                                   tonumber(ARGV[3]))
leases_freed(k, policy_of(k), requeued + dead)
return {requeued, stale, more, dead}
