-- Commit an extraction pass: the advanced extraction watermark and the
-- outbox of memories it found, with compare-and-set on the session's
-- incarnation and watermark. A re-sent or duplicate pass finds the watermark
-- moved and changes nothing, so each message is extracted once; the outbox
-- is applied (idempotently) and cleared by extract_clear.lua.
-- include: _meta
-- KEYS[1]  the session's meta
-- ARGV[1]  the incarnation (gen) the pass read   ARGV[2] the watermark it read
-- ARGV[3]  the new watermark (seq of the last message extracted)
-- ARGV[4]  the outbox: the memories found (msgpack), "" when none
-- Returns 1 committed, 0 stale watermark (or an outbox still unapplied),
-- -1 the session is gone (or another incarnation).
local meta = load_meta(KEYS[1], 'gen', 'xwm', 'xbox')
if meta == nil or meta.gen ~= ARGV[1] then return -1 end
if tonumber(meta.xwm or 0) ~= tonumber(ARGV[2]) or meta.xbox then return 0 end
redis.call('HSET', KEYS[1], 'xwm', ARGV[3])
if ARGV[4] ~= '' then redis.call('HSET', KEYS[1], 'xbox', ARGV[4]) end
return 1
