-- Read the most recent messages of a session, newest limits first.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     limit: most recent N messages (-1 = all)
-- ARGV[2]     max_tokens: most recent messages whose token counts fit (-1 = no budget)
-- ARGV[3]     ttl in ms to slide (0 = never expire, -1 = do not refresh)
-- ARGV[4]     session id (unescaped)
-- ARGV[5]     "1": context read, only messages after the summary watermark,
--             and the summary is returned too; "0": plain read
-- Returns {first_seq, {messages oldest first}, {"first_seq,created_ms" of the
-- entries covering them, newest first}, summary or false}; first_seq is 0 for
-- an empty result. Errors: REDISMEM_CORRUPT when the session's keys were
-- evicted apart.
local limit = tonumber(ARGV[1])
local max_tokens = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])

local len = redis.call('LLEN', KEYS[1])
local meta = load_meta(KEYS[2], 'accessed')
local broken = integrity_error(meta, len)
if broken then return broken end
local seq = meta and meta.seq or 0
local want = len
local summary = false
if ARGV[5] == '1' then
  local wm = meta and meta.wm or 0
  want = math.max(0, math.min(len, seq - wm))
  summary = redis.call('GET', KEYS[5])
  if wm > 0 and not summary then
    return corrupt(KEYS[5], 'the summary is missing while meta says messages were summarized')
  end
end
if limit >= 0 and limit < want then want = limit end

local out = {}
if want > 0 and max_tokens < 0 then
  out = redis.call('LRANGE', KEYS[1], -want, -1)
elseif want > 0 then
  local newest_first = {}
  local used, got, chunk = 0, 0, 32
  local full = false
  while got < want and not full do
    local n = math.min(chunk, want - got)
    local part = redis.call('LRANGE', KEYS[1], -(got + n), -(got + 1))
    for i = #part, 1, -1 do
      -- A corrupt element costs 0 and is returned: decoding it raises
      -- CorruptData naming the key, instead of the script failing here.
      local t = token_count(part[i]) or 0
      if used + t > max_tokens then full = true break end
      used = used + t
      got = got + 1
      newest_first[got] = part[i]
    end
    chunk = chunk * 2
  end
  for i = got, 1, -1 do out[#out + 1] = newest_first[i] end
end

local first_seq = 0
local covering = {}
if #out > 0 then
  first_seq = seq - #out + 1
  local from, step = -1, 8
  while true do
    local part = redis.call('LRANGE', KEYS[3], from - step + 1, from)
    if #part == 0 then break end
    local done = false
    for i = #part, 1, -1 do
      local prefix = string.match(part[i], '^(%d+,%d+),')
      if prefix == nil then
        -- A corrupt record: return a marker the client cannot parse, so it
        -- raises CorruptData naming the entries key (not a script error).
        covering[#covering + 1] = 'corrupt entry record'
        done = true
        break
      end
      covering[#covering + 1] = prefix
      if tonumber(string.match(prefix, '^(%d+)')) <= first_seq then done = true break end
    end
    if done or #part < step then break end
    from = from - step
    step = step * 2
  end
end

if ttl >= 0 and meta ~= nil then
  local now = now_ms()
  -- As in touch.lua: `accessed` moves only by a second or more, or with the TTL.
  local slid = touch_session(ttl, now, ARGV[4], meta.exp)
  if slid or now - (tonumber(meta.accessed) or 0) >= 1000 then
    redis.call('HSET', KEYS[2], 'accessed', now)
  end
end
return {first_seq, out, covering, summary}
