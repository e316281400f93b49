-- Search a user's recall index: keyword ranking (see redismem/ranking.py,
-- whose `rank` this mirrors), or with no query terms the newest docs; both
-- filtered. Read-only. Bounded: at most ARGV postings per query term, and a
-- walk of at most MAX_WALK candidates through the filters.
-- include: _recall
-- KEYS[1..6]  the user's recall keys (see _recall.lua)
-- ARGV[1]  prefix of posting and filter keys   ARGV[2]  now (ms)
-- ARGV[3]  limit   ARGV[4]  min score ("" = none)
-- ARGV[5]  since ms ("" = none)   ARGV[6]  until ms ("" = none)
-- ARGV[7]  allowed role codes, e.g. "12" ("" = any role)
-- ARGV[8]  F, the number of filter key suffixes; ARGV[9 .. 8+F] the suffixes
--          (a doc must be in every one of them)
-- then     max postings per term, prev weight, next weight, speaker boost,
--          Q (the number of query terms), and Q pairs: term, query weight
-- Returns {id, score or false, doc record, ...}, best (or newest) first.
local MAX_WALK = 5000
local prefix, now, limit = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local min_score = tonumber(ARGV[4])
local since, till = tonumber(ARGV[5]), tonumber(ARGV[6])
local roles = ARGV[7]
local nfilters = tonumber(ARGV[8])
local filters = {}
for i = 1, nfilters do filters[i] = prefix .. ARGV[8 + i] end
local at = 9 + nfilters
local max_postings, alpha, beta, boost = tonumber(ARGV[at]), tonumber(ARGV[at + 1]),
  tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3])
local nterms = tonumber(ARGV[at + 4])
local qterms = {}
for i = 0, nterms - 1 do qterms[ARGV[at + 5 + 2 * i]] = tonumber(ARGV[at + 6 + 2 * i]) end

-- The doc record if the doc passes every filter, else nil.
local function accepted(id)
  local record = redis.call('HGET', R_DOCS, id)
  if not record then return nil end
  local created, deadline, role = string.match(record, '^(%d+),(%d*),(%d+)|')
  if created == nil then return nil end
  created = tonumber(created)
  if deadline ~= '' and tonumber(deadline) < now then return nil end
  if since and created < since then return nil end
  if till and created > till then return nil end
  if roles ~= '' and not string.find(roles, role, 1, true) then return nil end
  for i = 1, #filters do
    if not redis.call('ZSCORE', filters[i], id) then return nil end
  end
  return record
end

local out = {}
if nterms == 0 then
  -- Newest first, driven by the smallest filter key (or the time index).
  local driver, size = R_TIME, nil
  for i = 1, #filters do
    local n = redis.call('ZCARD', filters[i])
    if size == nil or n < size then driver, size = filters[i], n end
  end
  local hi, lo = '+inf', '-inf'
  if till then hi = till end
  if since then lo = since end
  local offset, walked = 0, 0
  while #out < 3 * limit and walked < MAX_WALK do
    local ids = redis.call('ZREVRANGEBYSCORE', driver, hi, lo, 'LIMIT', offset, 200)
    for i = 1, #ids do
      local record = accepted(ids[i])
      if record then
        out[#out + 1] = ids[i]
        out[#out + 1] = false
        out[#out + 1] = record
        if #out >= 3 * limit then break end
      end
    end
    walked = walked + #ids
    offset = offset + #ids
    if #ids < 200 then break end
  end
  return out
end

local n = tonumber(redis.call('HGET', R_STATS, 'n') or '0')
local base = {}
for term, qw in pairs(qterms) do
  local key = prefix .. 't:' .. term
  local df = redis.call('ZCARD', key)
  if df > 0 then
    local w = qw * math.log(1 + (n - df + 0.5) / (df + 0.5))
    local postings = redis.call('ZREVRANGE', key, 0, max_postings - 1, 'WITHSCORES')
    for i = 1, #postings, 2 do
      local id = tonumber(postings[i])
      base[id] = (base[id] or 0) + w * tonumber(postings[i + 1])
    end
  end
end

-- Neighbour smoothing: score(d) = base(d) + alpha * base(prev d) + beta *
-- base(next d), pushed from each scored doc to its previous one, so only the
-- scored docs' link records are read (a previous doc may join the
-- candidates). The same reads give the speakers' names for the boost.
local score, names = {}, {}
for id, s in pairs(base) do score[id] = s end
if alpha > 0 or beta > 0 or boost > 0 then
  for id, s in pairs(base) do
    local link = redis.call('HGET', R_LINKS, id)
    local p, speaker = '', ''
    if link then p, speaker = string.match(link, '^(%d*)|(.*)$') end
    names[id] = speaker or ''
    p = tonumber(p)
    if p then
      if beta > 0 then score[p] = (score[p] or 0) + beta * s end
      if alpha > 0 and base[p] then score[id] = score[id] + alpha * base[p] end
    end
  end
end

local ranked = {}
for id in pairs(score) do ranked[#ranked + 1] = id end
local function better(a, b)
  local sa, sb = score[a], score[b]
  if sa ~= sb then return sa > sb end
  return a > b
end
table.sort(ranked, better)

-- The speaker boost re-scores the head of the ranking only: enough of it
-- that the final top `limit` rarely differs.
local walked = 0
if boost > 0 then
  local head = math.min(#ranked, math.max(10 * limit, 300))
  for i = 1, head do
    local id = ranked[i]
    local speaker = names[id]
    if speaker == nil then
      local link = redis.call('HGET', R_LINKS, id)
      speaker = link and string.match(link, '|(.*)$') or ''
    end
    for name in string.gmatch(speaker, '%S+') do
      if qterms[name] then score[id] = score[id] * (1 + boost) break end
    end
  end
  local top = {}
  for i = 1, head do top[i] = ranked[i] end
  table.sort(top, better)
  for i = 1, head do ranked[i] = top[i] end
end

for i = 1, #ranked do
  local id = ranked[i]
  if min_score and score[id] < min_score then break end
  walked = walked + 1
  if walked > MAX_WALK then break end
  local record = accepted(id)
  if record then
    out[#out + 1] = tostring(id)
    out[#out + 1] = tostring(score[id])
    out[#out + 1] = record
    if #out >= 3 * limit then break end
  end
end
return out
