-- Commit an indexing pass: the docs of the session's messages after the
-- index watermark, their postings and filter entries, links to their
-- previous doc and speaker, and the advanced watermark, with compare-and-set on the
-- session's incarnation and watermark. A re-sent or duplicate pass finds the
-- watermark moved and changes nothing, so each message is indexed once.
-- include: _common _recall
-- KEYS[1..9]    session keys (see _common.lua)
-- KEYS[10..15]  the user's recall keys (see _recall.lua)
-- ARGV[1]  the incarnation (gen) the pass read   ARGV[2]  the watermark it read
-- ARGV[3]  the new watermark (seq of the last message indexed)
-- ARGV[4]  recall ttl in ms (0 = keep forever)   ARGV[5]  prefix of posting and filter keys
-- ARGV[6]  D, the number of docs
-- ARGV[7]  "1" when the workers extract memories too: the session's
--          extraction watermark starts (at 0) no later than its index
-- ARGV[8..] per doc 4 arguments, oldest first:
--          created_ms, "role|name terms|payload", filter key suffixes
--          (space separated, the session's first), postings
--          "term weight term weight ..."
-- Returns {status, docs added}: status 1 committed, 0 stale watermark,
-- -1 the session is gone (or another incarnation).
local meta = load_meta(KEYS[2], 'gen', 'ilast')
if meta == nil or meta.gen ~= ARGV[1] then return {-1, 0} end
if meta.iwm ~= tonumber(ARGV[2]) then return {0, 0} end
local now = now_ms()
local rttl = tonumber(ARGV[4])
local prefix = ARGV[5]
forget_expired(now, prefix, 64)
local deadline = ''
if rttl > 0 then deadline = now + rttl end

local touched = {R_DOCS, R_LINKS, R_DKEYS, R_STATS, R_TIME}
if rttl > 0 then touched[#touched + 1] = R_EXP end
local seen = {}
local ndocs = tonumber(ARGV[6])
-- The session's last doc, to link the new ones to, if it is still its own
-- (it may have expired, and its id been given to another doc since).
local prev = meta.ilast or ''
if prev ~= '' and ndocs > 0 then
  local held = redis.call('HGET', R_DKEYS, prev)
  local own = string.match(ARGV[10], '^(%S+)')
  if not held or not string.find(' ' .. held .. ' ', ' ' .. own .. ' ', 1, true) then prev = '' end
end
for d = 0, ndocs - 1 do
  local at = 8 + 4 * d
  local created = ARGV[at]
  local id = tostring(redis.call('HINCRBY', R_STATS, 'next', 1))
  redis.call('HSET', R_DOCS, id, created .. ',' .. deadline .. ',' .. ARGV[at + 1])
  local suffixes = {}
  for term, weight in string.gmatch(ARGV[at + 3], '(%S+) (%S+)') do
    suffixes[#suffixes + 1] = 't:' .. term
    redis.call('ZADD', prefix .. 't:' .. term, weight, id)
  end
  for suffix in string.gmatch(ARGV[at + 2], '%S+') do
    suffixes[#suffixes + 1] = suffix
    redis.call('ZADD', prefix .. suffix, created, id)
  end
  for i = 1, #suffixes do
    if not seen[suffixes[i]] then
      seen[suffixes[i]] = true
      touched[#touched + 1] = prefix .. suffixes[i]
    end
  end
  redis.call('HSET', R_DKEYS, id, table.concat(suffixes, ' '))
  redis.call('ZADD', R_TIME, created, id)
  if rttl > 0 then redis.call('ZADD', R_EXP, deadline, id) end
  local names = string.match(ARGV[at + 1], '^%d+|([^|]*)|') or ''
  redis.call('HSET', R_LINKS, id, prev .. '|' .. names)
  prev = id
end
if ndocs > 0 then redis.call('HINCRBY', R_STATS, 'n', ndocs) end
redis.call('HSET', KEYS[2], 'iwm', ARGV[3], 'ilast', prev)
if ARGV[7] == '1' then redis.call('HSETNX', KEYS[2], 'xwm', 0) end

-- No index key outlives its newest doc's deadline; with a recall ttl of 0
-- (keep forever) the keys never expire.
for i = 1, #touched do
  if rttl > 0 then
    local left = redis.call('PTTL', touched[i])
    if left < rttl then redis.call('PEXPIREAT', touched[i], deadline) end
  else
    redis.call('PERSIST', touched[i])
  end
end
if rttl > 0 then cover_guard(deadline) else cover_guard(math.huge) end
return {1, ndocs}
