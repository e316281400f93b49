-- A consistent snapshot of a whole session: meta, entry records and messages.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     ttl in ms to slide (0 = never expire, -1 = do not refresh)
-- ARGV[2]     session id (unescaped)
-- ARGV[3]     "1" to include the messages, "0" for entry records only
-- Returns {seq, stored message count, {entry records}, {messages oldest first},
--          accessed_ms (after this read), created_ms}
-- Errors: REDISMEM_CORRUPT when the session's keys were evicted apart.
local ttl = tonumber(ARGV[1])
local len = redis.call('LLEN', KEYS[1])
local meta = load_meta(KEYS[2], 'accessed', 'created')
local broken = integrity_error(meta, len)
if broken then return broken end
local seq = meta and meta.seq or 0
local entries = redis.call('LRANGE', KEYS[3], 0, -1)
local msgs = {}
if ARGV[3] == '1' then msgs = redis.call('LRANGE', KEYS[1], 0, -1) end
if meta == nil then return {seq, len, entries, msgs, 0, 0} end
local accessed = tonumber(meta.accessed or 0)
if ttl >= 0 then
  accessed = now_ms()
  redis.call('HSET', KEYS[2], 'accessed', accessed)
  touch_session(ttl, accessed, ARGV[2], meta.exp)
end
return {seq, len, entries, msgs, accessed, tonumber(meta.created or 0)}
