-- match_page: one page of a shard's due messages, in delivery order, for the client-side match
-- of DynoQueue.pop_msg_with_predicate. No pattern is matched in Redis: Lua's string.match
-- backtracks in one C call that neither the script timeout nor SCRIPT KILL can stop, so a bad
-- pattern blocked the server (see dynoqueue.model.luapattern). With strict priority the first
-- page moves the due ids to the ready zset (as claim does) and pages read that zset.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index, [3] offset (ids already read), [4] most ids,
--       [5] most JSON bytes (the page stops after the message that reaches it)
-- Returns: {now, done, id, score, json, id, score, json, ...}; done is 1 when no due id is left
-- after this page; json is '' for an id whose message is gone.
-- Cost: ARGV[4] HGETs at most.
--- @include "lib/clock.lua"
--- @include "lib/keys.lua"
--- @include "lib/policy.lua"
--- @include "lib/strict.lua"
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local offset, most, max_bytes = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local zset, bound = k.queue(s), due_bound(now)
if policy_of(k).strict then
  if offset == 0 then promote(k, s) end
  zset, bound = k.ready(s), '+inf'
end
local ids = redis.call('ZRANGEBYSCORE', zset, '-inf', bound, 'WITHSCORES', 'LIMIT', offset, most)
local out, bytes = {now, 0}, 0
for j = 1, #ids, 2 do
  if bytes >= max_bytes then return out end
  local json = redis.call('HGET', k.msg, ids[j]) or ''
  bytes = bytes + #json
  out[#out + 1] = ids[j]
  out[#out + 1] = ids[j + 1]
  out[#out + 1] = json
end
if #ids < 2 * most then out[2] = 1 end
return out
