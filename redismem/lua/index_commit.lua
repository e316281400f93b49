-- Commit an indexing pass: the docs of the session's messages after the
-- index watermark, their postings and filter entries, links to their
-- previous doc and speaker, and the advanced watermark, with compare-and-set on the
-- session's incarnation and watermark. A re-sent or duplicate pass finds the
-- watermark moved and changes nothing, so each message is indexed once.
-- The user's index format decides how the docs are written: format 2
-- (`i:meta v` = 2, see _index.lua) when the user has it, format 1 (the
-- `r:` keys, _recall.lua) when the user has a format-1 index (`r:stats`),
-- ARGV[8]'s for a user with neither.
-- include: _common _index _recall
-- KEYS[1..9]    session keys (see _common.lua)
-- KEYS[10..15]  the user's format-2 keys (see _index.lua)
-- KEYS[16..21]  the user's format-1 recall keys (see _recall.lua)
-- ARGV[1]  the incarnation (gen) the pass read   ARGV[2]  the watermark it read
-- ARGV[3]  the new watermark (seq of the last message indexed)
-- ARGV[4]  recall ttl in ms (0 = keep forever)   ARGV[5]  prefix of format-1 posting and filter keys
-- ARGV[6]  D, the number of docs
-- ARGV[7]  "1" when the workers extract memories too: the session's
--          extraction watermark starts (at 0) no later than its index
-- ARGV[8]  the format a user with no index gets ("1" or "2")
-- ARGV[9]  prefix of format-2 keys (`E i:`)
-- ARGV[10..] per doc 4 arguments, oldest first:
--          created_ms, "role|name terms|payload", filter key suffixes
--          (space separated, the session's first: f:s:<escaped session id>),
--          postings "term weight term weight ..."
-- Returns {status, docs added, format, next, sealed}: status 1 committed,
-- 0 stale watermark, -1 the session is gone (or another incarnation);
-- format 1 or 2, the format the docs went to (1: the user's index waits
-- for its migration); with format 2, `i:meta` next (the last docid given)
-- and sealed (every record block below it is sealed: index_seal.lua).
local meta = load_meta(KEYS[2], 'gen', 'ilast')
if meta == nil or meta.gen ~= ARGV[1] then return {-1, 0, 0, 0, 0} end
if meta.iwm ~= tonumber(ARGV[2]) then return {0, 0, 0, 0, 0} end
local ndocs = tonumber(ARGV[6])
local IK = index2_keys(10, ARGV[9])
local format = redis.call('HGET', IK.meta, 'v')

local function commit_format1()
  local now = now_ms()
  local rttl = tonumber(ARGV[4])
  local prefix = ARGV[5]
  forget_expired(now, prefix, 64)
  local deadline = ''
  if rttl > 0 then deadline = now + rttl end

  local touched = {R_DOCS, R_LINKS, R_DKEYS, R_STATS, R_TIME}
  if rttl > 0 then touched[#touched + 1] = R_EXP end
  local seen = {}
  -- The session's last doc, to link the new ones to, if it is still its own
  -- (it may have expired, and its id been given to another doc since).
  local prev = meta.ilast or ''
  if prev ~= '' and ndocs > 0 then
    local held = redis.call('HGET', R_DKEYS, prev)
    local own = string.match(ARGV[12], '^(%S+)')
    if not held or not string.find(' ' .. held .. ' ', ' ' .. own .. ' ', 1, true) then prev = '' end
  end
  for d = 0, ndocs - 1 do
    local at = 10 + 4 * d
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
  return {1, ndocs, 1, 0, 0}
end

if format ~= '2' and (redis.call('EXISTS', R_STATS) == 1 or ARGV[8] == '1') then
  return commit_format1()
end

local rttl = tonumber(ARGV[4])
local deadline = nil
if rttl > 0 then deadline = now_ms() + rttl end
local docs = {}
local prev = meta.ilast
for d = 0, ndocs - 1 do
  local at = 10 + 4 * d
  local sid, filters = nil, {}
  for suffix in string.gmatch(ARGV[at + 2], '%S+') do
    if sid then filters[#filters + 1] = suffix else sid = string.sub(suffix, 5) end
  end
  local postings = {}
  for term, weight in string.gmatch(ARGV[at + 3], '(%S+) (%S+)') do
    postings[#postings + 1] = {term, weight}
  end
  docs[d + 1] = {
    created = tonumber(ARGV[at]), deadline = deadline, record = ARGV[at + 1],
    session = sid, filters = filters, postings = postings, prev = prev,
  }
  prev = true  -- the doc before it in the batch
end
local last = prev
if ndocs > 0 then
  local _
  _, last = index2_add(IK, docs)
end
if format ~= '2' then redis.call('HSET', IK.meta, 'v', 2) end
redis.call('HSET', KEYS[2], 'iwm', ARGV[3], 'ilast', last or '')
if ARGV[7] == '1' then redis.call('HSETNX', KEYS[2], 'xwm', 0) end
if deadline then cover_guard(deadline) else cover_guard(math.huge) end
local state = redis.call('HMGET', IK.meta, 'next', 'sealed')
return {1, ndocs, 2, tonumber(state[1] or '0'), tonumber(state[2] or '0')}
