-- Search a user's recall index: keyword ranking (see redismem/ranking.py,
-- whose `rank` this mirrors), or with no query terms the newest docs; both
-- filtered. Read-only. Format 1 (r: keys) is bounded: at most ARGV postings
-- per query term, and a walk of at most MAX_WALK candidates through the
-- filters. Format 2 (i: keys, i:meta v = 2) is exact: every posting of the
-- query terms, no cap (see search2 below); its no-query walk reads at
-- most NEWEST_MAX_WALK docs.
-- include: _recall _postings
-- KEYS[1..6]  the user's format-2 keys (RecallKeys.index_keys): i:meta,
--             i:rec, i:docs, i:sess, i:spk, i:dead
-- KEYS[7..12] the user's format-1 recall keys (see _recall.lua)
-- ARGV[1]  prefix of format-1 posting and filter keys   ARGV[2]  now (ms)
-- ARGV[3]  limit   ARGV[4]  min score ("" = none)
-- ARGV[5]  since ms ("" = none)   ARGV[6]  until ms ("" = none)
-- ARGV[7]  allowed role codes, e.g. "12" ("" = any role)
-- ARGV[8]  F, the number of filter key suffixes; ARGV[9 .. 8+F] the suffixes
--          (a doc must be in every one of them; format 2 maps f:s:<session>
--          to its ordinal's list)
-- then     max postings per term (format 1), prev weight, next weight,
--          speaker boost, Q (the number of query terms), Q pairs: term,
--          query weight; then the largest posting weight (format 2's
--          ranking.MAX_WEIGHT)
-- Returns, format 1: {id, score or false, doc record, ...}, best (or newest)
-- first; format 2: {2, H, then H times: docid, score (text) or false,
-- created ms, record or the number of its block; then per block named:
-- number, zlib block}.
local MAX_WALK = 5000
local NEWEST_WINDOW = 512
local NEWEST_MAX_WALK = 50000
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
local max_weight = tonumber(ARGV[at + 5 + 2 * nterms])
local I_META, I_REC, I_DOCS, I_SESS, I_SPK, I_DEAD = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5],
  KEYS[6]

-- Format 2 (exact top k).
--   base(d) = sum over query terms t of w_t * q(t, d) * max_weight / 63
--   score(d) = (base(d) + alpha * base(prev d) + beta * base(next d))
--              * (1 + boost when the query names d's speaker)
-- computed on candidates only: the docs with base >= tau and their previous
-- and next docs. Any other doc scores < tau * (1 + alpha + beta) * factor
-- (factor = 1 + boost when the query names some speaker), so once the k-th
-- accepted candidate reaches that bound the top k is exact; else tau is
-- lowered and the new band's docs join. Filters are checked on candidates,
-- as ranking.rank's `accept`; neighbours score with their base whatever
-- the filters say of them.
local function search2()
  local IP = string.sub(I_META, 1, -5)
  local n_docs = tonumber(redis.call('HGET', I_META, 'n') or '0')
  local last = tonumber(redis.call('HGET', I_META, 'next') or '0')
  local sealed = tonumber(redis.call('HGET', I_META, 'sealed') or '0')
  local dead = redis.call('GET', I_DEAD) or ''
  P_DT.prefix = IP
  local none = {2, 0}

  -- The filter lists' docids, intersected (flist ascending, fset a set).
  local flist, fset = nil, nil
  if nfilters > 0 then
    local lists = {}
    for i = 1, nfilters do
      local suffix = ARGV[8 + i]
      if string.sub(suffix, 1, 4) == 'f:s:' then
        local ord = redis.call('HGET', I_SESS, string.sub(suffix, 5))
        if not ord then return none end
        suffix = 'f:s:' .. ord
      end
      local s = redis.call('GET', IP .. suffix)
      if not s then return none end
      lists[#lists + 1] = s
    end
    table.sort(lists, function(a, b) return #a < #b end)
    flist = postings_docs(lists[1])
    for i = 2, #lists do
      local keep = {}
      for j = 1, #flist do keep[flist[j]] = true end
      flist = postings_docs(lists[i], keep)
    end
    fset = {}
    for j = 1, #flist do fset[flist[j]] = true end
  end

  -- The slot of d when d passes the filters (role, time, expiry, a cleared
  -- session, the filter lists), else false.
  local function accepted(d)
    if fset and not fset[d] then return false end
    local sl = slot(d)
    if not sl then return false end
    local created, deadline = sl[1], sl[2]
    if deadline ~= 0 and P_EPOCH_2020 + deadline * 1000 <= now then return false end
    if since and created < since then return false end
    if till and created > till then return false end
    if roles ~= '' and not string.find(roles, tostring(sl[6]), 1, true) then return false end
    if dead ~= '' and bit_set(dead, sl[5]) then return false end
    return sl
  end

  local hits, score = {}, {}
  local function reply()
    local out = {2, #hits}
    local blocks, named_blocks = {}, {}
    for i = 1, #hits do
      local d = hits[i]
      out[#out + 1] = d
      out[#out + 1] = score[d] and string.format('%.17g', score[d]) or false
      out[#out + 1] = slot(d)[1]
      local b = math.floor(d / 64)
      local record = false
      if b >= sealed then record = redis.call('HGET', I_REC, d) end
      if record then
        out[#out + 1] = record
      else
        out[#out + 1] = b
        if not named_blocks[b] then
          named_blocks[b] = true
          blocks[#blocks + 1] = b
        end
      end
    end
    for i = 1, #blocks do
      out[#out + 1] = blocks[i]
      out[#out + 1] = redis.call('HGET', I_DOCS, blocks[i])
    end
    return out
  end

  if nterms == 0 then
    -- Newest first (created, then docid): the filter lists' docids, or
    -- every docid, downwards. Docids follow indexing order, which may lag
    -- the write time a little (sessions indexed by different passes): the
    -- walk goes NEWEST_WINDOW docids past the limit-th hit, then sorts.
    -- Bounded: at most NEWEST_MAX_WALK docs (filters that only the doc
    -- table can check, role and time, may match few of them).
    local walked, stop = 0, nil
    local function take(d)
      walked = walked + 1
      if accepted(d) then
        hits[#hits + 1] = d
        if #hits == limit then stop = walked + math.max(NEWEST_WINDOW, 4 * limit) end
      end
      return (stop ~= nil and walked >= stop) or walked >= NEWEST_MAX_WALK
    end
    if flist then
      for j = #flist, 1, -1 do
        if take(flist[j]) then break end
      end
    else
      for d = last, 1, -1 do
        if take(d) then break end
      end
    end
    table.sort(hits, function(a, b)
      local ca, cb = slot(a)[1], slot(b)[1]
      if ca ~= cb then return ca > cb end
      return a > b
    end)
    for i = #hits, limit + 1, -1 do hits[i] = nil end
    return reply()
  end

  local qset, base, nbase = {}, {}, 0
  local levels = {}
  for q = 0, 63 do levels[q] = q * max_weight / 63 end
  for i = 0, nterms - 1 do
    local term, qw = ARGV[at + 5 + 2 * i], tonumber(ARGV[at + 6 + 2 * i])
    qset[term] = true
    local s = redis.call('GET', IP .. 't:' .. term)
    local df = s and postings_count(s) or 0
    if df > 0 then
      local n = n_docs
      if n < df then n = df end -- docs of cleared sessions still counted in df
      local w = qw * math.log(1 + (n - df + 0.5) / (df + 0.5))
      local add = {}
      for q = 0, 63 do add[q] = w * levels[q] end
      postings_add(s, add, base)
    end
  end

  local smooth = alpha > 0 or beta > 0
  -- Speakers the query names (speaker ordinal -> true/false).
  local named, lookup, factor = {}, false, 1
  if boost > 0 then
    if redis.call('HLEN', I_SPK) <= 512 then
      local all = redis.call('HGETALL', I_SPK)
      for i = 1, #all, 2 do
        if string.sub(all[i], 1, 1) == '#' then
          for name in string.gmatch(all[i + 1], '%S+') do
            if qset[name] then
              named[tonumber(string.sub(all[i], 2))] = true
              factor = 1 + boost
              break
            end
          end
        end
      end
    else
      lookup, factor = true, 1 + boost
    end
  end
  local function names_speaker(spk)
    if spk == 0 then return false end
    local v = named[spk]
    if v == nil then
      v = false
      if lookup then
        local names = redis.call('HGET', I_SPK, '#' .. spk) or ''
        for name in string.gmatch(names, '%S+') do
          if qset[name] then v = true break end
        end
      end
      named[spk] = v
    end
    return v
  end

  local done = {}
  local function evaluate(d)
    if done[d] then return end
    done[d] = true
    local sl = accepted(d)
    if not sl then return end
    local s = base[d] or 0
    if smooth then
      if sl[3] then s = s + alpha * (base[sl[3]] or 0) end
      if sl[4] then s = s + beta * (base[sl[4]] or 0) end
    end
    if boost ~= 0 and names_speaker(sl[7]) then s = s * (1 + boost) end
    if s > 0 and (not min_score or s >= min_score) then
      hits[#hits + 1] = d
      score[d] = s
    end
  end
  local function better(a, b)
    local sa, sb = score[a], score[b]
    if sa ~= sb then return sa > sb end
    return a > b
  end
  local function top()
    table.sort(hits, better)
    for i = #hits, limit + 1, -1 do hits[i] = nil end
    return reply()
  end

  local maxb = 0
  for _, s in pairs(base) do
    nbase = nbase + 1
    if s > maxb then maxb = s end
  end
  if nbase == 0 then return none end

  if flist and #flist <= nbase then
    -- Few docs pass the filter lists: score each of them.
    for j = 1, #flist do evaluate(flist[j]) end
    return top()
  end

  -- tau from a histogram of base: about `want` docs have base >= tau.
  local NB = 1024
  local scale = (NB - 1) / maxb
  local hist = {}
  for _, s in pairs(base) do
    local h = math.floor(s * scale)
    hist[h] = (hist[h] or 0) + 1
  end
  local function tau_for(want, below)
    local c, h = 0, NB - 1
    while h > 0 do
      c = c + (hist[h] or 0)
      if c >= want and h / scale < below then break end
      h = h - 1
    end
    return h / scale
  end
  local mult = (1 + (smooth and alpha or 0) + (smooth and beta or 0)) * factor * (1 + 1e-9)
  local want = math.max(64, 4 * limit)
  local hi = math.huge
  local tau = tau_for(want, hi)
  while true do
    for d, s in pairs(base) do
      if s >= tau and s < hi then
        evaluate(d)
        if smooth then
          local sl = slot(d)
          if sl then
            if sl[3] then evaluate(sl[3]) end
            if sl[4] then evaluate(sl[4]) end
          end
        end
      end
    end
    if tau <= 0 then break end
    local bound = tau * mult
    if min_score and bound <= min_score then break end
    hi = tau
    if #hits >= limit then
      table.sort(hits, better)
      local kth = score[hits[limit]]
      if kth >= bound then break end
      tau = kth / mult
      -- the next round's band holds no doc at all: take one more bucket
      if tau >= hi then tau = tau_for(0, hi) end
    else
      local grow = 16
      if #hits > 0 then grow = math.min(16, math.max(2, 2 * limit / #hits)) end
      want = want * grow
      tau = tau_for(want, hi)
    end
  end
  return top()
end

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

if redis.call('HGET', I_META, 'v') == '2' then return search2() end

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
