-- set_policy: replace a queue's stored QueuePolicy (DynoQueue.set_policy, `dynoqueue policy`),
-- atomically; every process's scripts read it at their next call. The ordering mode (strict)
-- cannot change on a live queue: its waiting messages sit in the zsets of the stored mode.
-- KEYS: [1] policy key
-- ARGV: [1] the new policy as JSON
-- Returns: {1, previous policy JSON or ''} when replaced, {0, stored JSON} when refused (the
--          strict flag differs).
local old = redis.call('GET', KEYS[1])
if old then
  local was = cjson.decode(old).strict or 0
  if was ~= cjson.decode(ARGV[1]).strict then return {0, old} end
end
redis.call('SET', KEYS[1], ARGV[1])
return {1, old or ''}
