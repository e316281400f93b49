-- Start a new epoch of a user (clear_user's first step): from this call on,
-- every user-scoped script built for an older epoch fails (see _guard.lua),
-- so nothing can be read from or written to the user's earlier keys, which
-- clear_user then deletes. Not itself guarded.
-- KEYS[1]  the user's guard
-- ARGV[1]  how long the guard lives at least, in ms (longer than any job
--          that may still hold an older epoch)
-- Returns the new epoch: the server's time in ms, above every earlier one.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local epoch = math.max(now, tonumber(redis.call('HGET', KEYS[1], 'e') or '0') + 1)
redis.call('HSET', KEYS[1], 'e', string.format('%d', epoch), 'at', string.format('%d', now))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]))
return string.format('%d', epoch)
