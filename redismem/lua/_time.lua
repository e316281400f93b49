-- The server's clock, the one place a script reads it (every script that
-- needs the time includes this file).
-- KEYS, ARGV: none.

-- Now, in ms since the epoch (Redis TIME: seconds and microseconds).
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
