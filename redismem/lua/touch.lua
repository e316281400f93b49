-- The side effects and checks of a read whose messages the caller fetches in
-- the same MULTI (so they never pass through Lua): check that the session's
-- keys agree, and slide its TTL.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     ttl in ms to slide (0 = never expire, -1 = do not refresh)
-- ARGV[2]     session id (unescaped)
-- Returns {seq, stored message count}.
-- Errors: REDISMEM_CORRUPT when the session's keys were evicted apart.
local ttl = tonumber(ARGV[1])
local len = redis.call('LLEN', KEYS[1])
local meta = load_meta(KEYS[2], 'accessed')
local broken = integrity_error(meta, len)
if broken then return broken end
if meta == nil then return {0, 0} end
if ttl >= 0 then
  local now = now_ms()
  -- meta `accessed` moves only by a second or more, or with the TTL: most
  -- reads write nothing (no AOF or replica traffic).
  local slid = touch_session(ttl, now, ARGV[2], meta.exp)
  if slid or now - (tonumber(meta.accessed) or 0) >= 1000 then
    redis.call('HSET', KEYS[2], 'accessed', now)
  end
end
return {meta.seq, len}
