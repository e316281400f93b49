-- Delete one session atomically: its keys and its members in the user
-- indexes; and set aside the list of its docs in the recall index, so that
-- they are forgotten (recall_forget.lua) and never mixed up with the docs of
-- a session written again under the same id. Idempotent.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- KEYS[10]    the session's filter key in the recall index (its docs)
-- KEYS[11]    a fresh key to move that list to (a grave; unique per call)
-- KEYS[12]    the user's set of graves not yet forgotten
-- ARGV[1]     session id (unescaped)
-- Returns {keys deleted, counting user index keys that this removal left
-- empty (Redis deletes an empty sorted set); the grave made, "" if none}.
local grave = ''
if redis.call('EXISTS', KEYS[10]) == 1 then
  redis.call('RENAME', KEYS[10], KEYS[11])
  redis.call('SADD', KEYS[12], KEYS[11])
  local left = redis.call('PTTL', KEYS[11])
  if left > 0 and redis.call('PTTL', KEYS[12]) < left then redis.call('PEXPIRE', KEYS[12], left) end
  if left == -1 then redis.call('PERSIST', KEYS[12]) end
  grave = KEYS[11]
elseif redis.call('EXISTS', KEYS[11]) == 1 then
  grave = KEYS[11]  -- a re-send: the first call made it
end
local indexes_before = redis.call('EXISTS', KEYS[7], KEYS[8], KEYS[9])
local removed = redis.call('DEL', unpack(KEYS, 1, SESSION_KEYS))
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[9], ARGV[1])
untag_session(ARGV[1])
fit_user_ttl()
return {removed + indexes_before - redis.call('EXISTS', KEYS[7], KEYS[8], KEYS[9]), grave}
