-- Copy the next docs of a user's format-1 recall index (`r:*`) into format
-- 2 (`i:*`), keeping their docids, times, deadlines, weights, filters and
-- links, with compare-and-set on the copy's cursor (`i:meta mig`): a
-- re-sent or duplicate call finds the cursor moved and changes nothing.
-- Docs of a cleared session (listed in a grave) or past their deadline
-- are not copied. When the cursor passes format 1's last docid, format 2
-- takes over (`i:meta v` = 2): commits and searches use it from then on,
-- and the caller retires format 1 (index_retire.lua).
-- include: _index _recall
-- KEYS[1..6]   the user's format-2 keys (keys.INDEX_KEY_KINDS, see _index.lua)
-- KEYS[7]      the user's set of graves (format 1)
-- KEYS[8..13]  the user's format-1 recall keys (see _recall.lua)
-- ARGV[1]  prefix of format-1 posting and filter keys (`E r:`)
-- ARGV[2]  prefix of format-2 list keys (`E i:`)
-- ARGV[3]  the cursor the caller read ("" = none yet: 0)
-- ARGV[4]  most docids to look at in this call
-- Returns {status, new cursor, docs copied, i:meta next, i:meta sealed}:
-- status 1 copied, 2 copied and format 2 took over (or had already), 0
-- stale cursor; the caller then seals the complete record blocks.
local rprefix, iprefix = ARGV[1], ARGV[2]
local ik = index2_keys(1, iprefix)
local GRAVES = KEYS[7]
local cursor = tonumber(redis.call('HGET', ik.meta, 'mig') or '0')
local function reply(status, at, copied)
  local mark = redis.call('HMGET', ik.meta, 'next', 'sealed')
  return {status, at, copied, tonumber(mark[1] or '0'), tonumber(mark[2] or '0')}
end
if redis.call('HGET', ik.meta, 'v') == '2' then return reply(2, cursor, 0) end
if redis.call('EXISTS', R_STATS) == 0 and redis.call('EXISTS', ik.meta) == 0 then
  return reply(2, cursor, 0)  -- no index at all (e.g. the user was cleared): nothing to move
end
if cursor ~= tonumber(ARGV[3] ~= '' and ARGV[3] or '0') then return reply(0, cursor, 0) end
local last = tonumber(redis.call('HGET', R_STATS, 'next') or '0')
local upto = math.min(last, cursor + tonumber(ARGV[4]))
local now = now_ms()
local had_meta = redis.call('EXISTS', ik.meta) == 1

local graves = redis.call('SMEMBERS', GRAVES)
local function buried(id)
  for i = 1, #graves do
    if redis.call('ZSCORE', graves[i], id) then return true end
  end
  return false
end

local docs = {}
for id = cursor + 1, upto do
  local record = redis.call('HGET', R_DOCS, id)
  if record and not buried(id) then
    local created, deadline, rest = string.match(record, '^(%d+),(%d*),(.*)$')
    deadline = tonumber(deadline)
    if created and (not deadline or deadline > now) then
      local doc = {id = id, created = tonumber(created), deadline = deadline, record = rest,
        filters = {}, postings = {}}
      for suffix in string.gmatch(redis.call('HGET', R_DKEYS, id) or '', '%S+') do
        local term = string.match(suffix, '^t:(.*)$')
        if term then
          local weight = redis.call('ZSCORE', rprefix .. suffix, id)
          if weight then doc.postings[#doc.postings + 1] = {term, weight} end
        elseif string.sub(suffix, 1, 4) == 'f:s:' then
          doc.session = string.sub(suffix, 5)
        elseif string.sub(suffix, 1, 4) ~= 'f:x:' then
          doc.filters[#doc.filters + 1] = suffix
        end
      end
      local link = redis.call('HGET', R_LINKS, id)
      local prev = link and tonumber(string.match(link, '^(%d*)|'))
      doc.prev = prev
      if doc.session then docs[#docs + 1] = doc end
    end
  end
end
if #docs > 0 then index2_add(ik, docs) end
redis.call('HSET', ik.meta, 'mig', upto)
if not had_meta and #docs == 0 then
  -- No key without a TTL: the cursor lives as long as format 1 does.
  local left = redis.call('PTTL', R_STATS)
  if left > 0 then redis.call('PEXPIRE', ik.meta, left) end
end
if upto >= last then
  local next = tonumber(redis.call('HGET', ik.meta, 'next') or '0')
  redis.call('HSET', ik.meta, 'v', 2, 'next', math.max(next, last))
  return reply(2, upto, #docs)
end
return reply(1, upto, #docs)
