-- nack: end leases now instead of waiting for them to expire (DynoQueue.nack / nack_many): each
-- message is due again after a delay, or dead-lettered once it has been delivered max
-- deliveries times.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] delay ms (>= 0), [3] error text or '',
--       then pairs: id, receipt ('' = any lease of that id)
-- Returns: {due again, dead-lettered, of those without payload ('payload-missing')}; an id not
-- leased (or leased again since its receipt) counts in none.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local delay = tonumber(ARGV[2])
local p = policy_of(k)
local again, dead, missing = 0, 0, 0
for i = 4, #ARGV, 2 do
  local id = ARGV[i]
  local s, rec = leased(k, id, ARGV[i + 1])
  if s then
    if ARGV[3] ~= '' then rec.l = ARGV[3] end
    local json = redis.call('HGET', k.msg, id)
    local most = max_deliveries(rec, p)
    if not json then
      bury_missing(k, id, now, s)
      dead = dead + 1
      missing = missing + 1
    elseif most > 0 and (rec.d or 0) >= most then
      save_life(k, id, rec)
      dead_letter(k, id, 'max_deliveries', now, s)
      dead = dead + 1
    else
      save_life(k, id, rec)
      redis.call('ZREM', k.unack(s), id)
      wait_in(k, s, id, now + delay, priority_of(json))
      again = again + 1
    end
  end
end
return {again, dead, missing}
