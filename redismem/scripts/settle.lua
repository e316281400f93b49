-- Clear a session's pending mark after a pass that found nothing to
-- summarize, unless a write arrived since the pass read the session.
-- KEYS[1]  meta of the session   KEYS[2]  pending (user index)
-- ARGV[1]  the session's seq the pass observed   ARGV[2]  session id
-- Returns 1 when the mark was cleared, 0 when a newer write keeps it.
local seq = redis.call('HGET', KEYS[1], 'seq')
if seq and tonumber(seq) ~= tonumber(ARGV[1]) then return 0 end
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
