-- Delete one session atomically: its keys and its members in the user
-- indexes. Idempotent.
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     session id (unescaped)
-- Returns the number of keys deleted, counting user index keys that this
-- removal left empty (Redis deletes an empty sorted set).
local indexes_before = redis.call('EXISTS', KEYS[7], KEYS[8], KEYS[9])
local removed = redis.call('DEL', unpack(KEYS, 1, SESSION_KEYS))
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[9], ARGV[1])
untag_session(ARGV[1])
fit_user_ttl()
return removed + indexes_before - redis.call('EXISTS', KEYS[7], KEYS[8], KEYS[9])
