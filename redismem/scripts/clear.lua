-- Delete one session: its keys and its members in the user indexes.
-- KEYS[1..8]  session keys (see _common.lua)
-- ARGV[1]     session id (unescaped)
-- Returns the number of keys deleted.
local removed = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('ZREM', KEYS[6], ARGV[1])
redis.call('ZREM', KEYS[8], ARGV[1])
untag_session(ARGV[1])
fit_user_ttl()
return removed
