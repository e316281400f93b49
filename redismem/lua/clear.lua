-- Delete one session atomically: its keys and its members in the user
-- indexes; and set aside the list of its docs in the recall index, so that
-- they are forgotten (recall_forget.lua) and never mixed up with the docs of
-- a session written again under the same id. Idempotent.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- KEYS[10]    the session's filter key in the recall index (its docs)
-- KEYS[11]    a fresh key to move that list to (a grave; unique per call)
-- KEYS[12]    the user's set of graves not yet forgotten
-- KEYS[13]    the user's format-2 session ordinals (i:sess)
-- KEYS[14]    the user's format-2 meta (i:meta)
-- KEYS[15]    the user's format-2 dead sessions (i:dead)
-- KEYS[16]    the user's format-2 ordinals to purge (i:purge)
-- ARGV[1]     session id (unescaped)
-- ARGV[2]     session id (escaped)
-- In format 2 the session's docs are tombstoned in O(1): its ordinal's bit
-- set in i:dead, its ordinal mapping dropped (a session written again gets
-- a new one), its docs moved from i:meta n (live) to dead, and its ordinal
-- listed in i:purge: the caller (or a worker) then purges its docs
-- (index_purge.lua), so that nothing of the session stays.
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
local ord = redis.call('HGET', KEYS[13], ARGV[2])
if ord then
  local entry = redis.call('HGET', KEYS[13], '#' .. ord) or ''
  local count = tonumber(string.match(entry, ',(%d+)$') or '0')
  local fresh = redis.call('EXISTS', KEYS[15]) == 0
  redis.call('SETBIT', KEYS[15], tonumber(ord), 1)
  redis.call('SADD', KEYS[16], ord)
  redis.call('HDEL', KEYS[13], ARGV[2])
  if count > 0 and redis.call('EXISTS', KEYS[14]) == 1 then
    redis.call('HINCRBY', KEYS[14], 'n', -count)
    redis.call('HINCRBY', KEYS[14], 'dead', count)
  end
  -- The bitmap lives as long as the index it marks (i:meta's deadline).
  local left = redis.call('PTTL', KEYS[14])
  if left == -1 then
    redis.call('PERSIST', KEYS[15])
    redis.call('PERSIST', KEYS[16])
  elseif left > 0 then
    if fresh then
      redis.call('PEXPIRE', KEYS[15], left)
    else
      redis.call('PEXPIRE', KEYS[15], left, 'GT')
    end
    redis.call('PEXPIRE', KEYS[16], left)
  end
end
local indexes_before = redis.call('EXISTS', KEYS[7], KEYS[8], KEYS[9])
local removed = redis.call('DEL', unpack(KEYS, 1, SESSION_KEYS))
redis.call('ZREM', KEYS[7], ARGV[1])
redis.call('ZREM', KEYS[9], ARGV[1])
untag_session(ARGV[1])
fit_user_ttl()
return {removed + indexes_before - redis.call('EXISTS', KEYS[7], KEYS[8], KEYS[9]), grave}
