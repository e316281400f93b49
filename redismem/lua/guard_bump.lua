-- Start a new epoch of a user (clear_user's first step): from this call on,
-- every user-scoped script built for an older epoch fails (see _guard.lua),
-- so nothing can be read from or written to the user's earlier keys, which
-- clear_user then deletes. Not itself guarded. Idempotent per clear: a
-- re-send (redis-py after a reset connection) must not start yet another
-- epoch, which would strand writes made meanwhile in the first one.
-- unguarded: it owns the guard
-- include: _time
-- KEYS[1]  the user's guard
-- ARGV[1]  how long the guard lives at least, in ms (longer than any job
--          that may still hold an older epoch)
-- ARGV[2]  the id of this clear (unique per clear_user call)
-- Returns the new epoch: the server's time in ms, above every earlier one.
local state = redis.call('HMGET', KEYS[1], 'e', 'op')
if state[2] == ARGV[2] then return state[1] end
local now = now_ms()
local epoch = math.max(now, tonumber(state[1] or '0') + 1)
redis.call('HSET', KEYS[1], 'e', string.format('%d', epoch), 'at', string.format('%d', now),
  'op', ARGV[2])
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return string.format('%d', epoch)
