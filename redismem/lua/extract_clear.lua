-- Clear an extraction outbox once its memories are applied, unless it was
-- replaced meanwhile (then the newer one stays for its own pass).
-- KEYS[1]  the session's meta
-- ARGV[1]  the outbox that was applied
-- Returns 1 when cleared, else 0.
if redis.call('HGET', KEYS[1], 'xbox') ~= ARGV[1] then return 0 end
redis.call('HDEL', KEYS[1], 'xbox')
return 1
