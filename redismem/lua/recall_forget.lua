-- Forget a batch of docs listed in one filter key (e.g. the grave of a
-- cleared session, see clear.lua), and the docs whose recall ttl has passed.
-- include: _time _recall
-- KEYS[1]     the user's set of graves (a grave emptied here leaves it)
-- KEYS[2..7]  the user's recall keys (see _recall.lua)
-- ARGV[1]     prefix of posting and filter keys
-- ARGV[2]     the filter key suffix whose docs to forget ("" = only expired docs)
-- ARGV[3]     most docs to forget in this call
-- Returns the number of docs still listed in that filter key.
local prefix, suffix, max = ARGV[1], ARGV[2], tonumber(ARGV[3])
forget_expired(now_ms(), prefix, max)
if suffix == '' then return 0 end
local ids = redis.call('ZRANGE', prefix .. suffix, 0, max - 1)
for i = 1, #ids do
  forget_doc(ids[i], prefix)
  -- Also when its dkeys record is gone (clear_user unlinking keys as it
  -- finds them): the listing must shrink, or the caller would loop forever.
  redis.call('ZREM', prefix .. suffix, ids[i])
end
local left = redis.call('ZCARD', prefix .. suffix)
if left == 0 then
  redis.call('SREM', KEYS[1], prefix .. suffix)
  if redis.call('EXISTS', KEYS[1]) == 0 and tonumber(redis.call('HGET', R_STATS, 'n') or '0') <= 0 then
    redis.call('DEL', R_STATS)
  end
end
return left
