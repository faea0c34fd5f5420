-- bury: dead-letter leased messages the client could not decode (reason "undecodable"), so a
-- corrupt message never breaks a pop and the rest of its batch is delivered.
-- KEYS: QueueKeys.lifecycle_keys()
-- ARGV: [1] now override or '', [2] shard index, [3] reason, [4..] ids
-- Returns: how many were dead-lettered.
local k = lifecycle_keys()
local now = now_ms(ARGV[1])
local s = tonumber(ARGV[2])
local buried = 0
for i = 4, #ARGV do
  if redis.call('ZSCORE', k.unack(s), ARGV[i]) and dead_letter(k, ARGV[i], ARGV[3], now, s) then
    buried = buried + 1
  end
end
return buried
