-- Recall index format 2: the encoders and the one write of docs
-- (`index2_add`), included by the scripts that write format 2. The layout
-- is in redismem/core/keys.py; redismem/recall/postings.py is its Python
-- reference. Plain arithmetic only (no `bit`, `struct`): the embedded
-- backend's Lua has neither.
-- include: _time
-- KEYS, ARGV: none of its own; `index2_keys(first)` reads the six fixed
-- keys of format 2 from KEYS[first .. first+5] (keys.INDEX_KEY_KINDS:
-- meta, rec, docs, sess, spk, dead), and the caller hands the prefix of
-- the other `i:` keys to it.

local I_EPOCH_2020_MS = 1577836800000
-- ranking.MAX_WEIGHT (K1 + 1) and WEIGHT_LEVELS; a test checks they agree.
local I_MAX_WEIGHT = 2.2
local I_LEVELS = 63
local I_CHUNK, I_SLOT, I_BLOCK = 4096, 22, 64
local I_MAX_LINK = 16777215
local I_MAX_SPEAKER = 65535

local function index2_keys(first, prefix)
  return {
    prefix = prefix,
    meta = KEYS[first], rec = KEYS[first + 1], docs = KEYS[first + 2],
    sess = KEYS[first + 3], spk = KEYS[first + 4], dead = KEYS[first + 5],
  }
end

-- `value` as `n` bytes, big-endian.
local function i_be(value, n)
  local out = {}
  for i = n, 1, -1 do
    out[i] = value % 256
    value = math.floor(value / 256)
  end
  return string.char(unpack(out))
end

-- The big-endian number in bytes `from .. from+n-1` of `s`.
local function i_unbe(s, from, n)
  local value = 0
  for i = from, from + n - 1 do value = value * 256 + string.byte(s, i) end
  return value
end

-- Unsigned LEB128: 7 bits per byte, low group first, high bit = more.
local function i_varint(value)
  if value < 128 then return string.char(value) end
  local out = {}
  while value >= 128 do
    out[#out + 1] = value % 128 + 128
    value = math.floor(value / 128)
  end
  out[#out + 1] = value
  return string.char(unpack(out))
end

-- ranking.quantize_weight of a weight sent as text.
local function i_quantize(weight_text)
  local q = math.floor(tonumber(weight_text) / I_MAX_WEIGHT * I_LEVELS + 0.5)
  if q > I_LEVELS then return I_LEVELS end
  if q < 1 then return 1 end
  return q
end

-- postings.deadline_field: a deadline in ms as whole seconds since 2020,
-- rounded up; 0 = none.
local function i_deadline_field(deadline)
  if not deadline then return 0 end
  return math.max(1, math.ceil((deadline - I_EPOCH_2020_MS) / 1000))
end

-- The 22-byte doc-table slot (postings.encode_slot; deltas already checked).
local function i_slot(doc)
  return i_be(doc.created, 6) .. i_be(i_deadline_field(doc.deadline), 4)
    .. i_be(doc.prev_delta, 3) .. i_be(doc.next_delta, 3) .. i_be(doc.ord, 3)
    .. i_be(doc.role, 1) .. i_be(doc.speaker, 2)
end

-- Give every key in `deadlines` (key -> deadline ms, math.huge: forever)
-- the later of its expiry and that deadline: a key keeps a longer TTL, a
-- key without one (kept forever) stays without; `fresh` keys (created by
-- this script) take the deadline as it is. `untimed`: no key of the family
-- has a TTL (i:meta ttl unset), so none needs PERSIST.
local function i_expire(deadlines, fresh, untimed)
  for key, deadline in pairs(deadlines) do
    if deadline == math.huge then
      if not untimed then redis.call('PERSIST', key) end
    elseif fresh[key] then
      redis.call('PEXPIREAT', key, deadline)
    else
      redis.call('PEXPIREAT', key, deadline, 'GT')
    end
  end
end

-- The ordinal of a session (escaped id), given from `i:meta sords` when it
-- has none: a session cleared since (clear.lua drops the mapping) gets a
-- fresh one.
local function i_session_ord(ik, sid)
  local ord = redis.call('HGET', ik.sess, sid)
  if ord then return tonumber(ord), false end
  ord = redis.call('HINCRBY', ik.meta, 'sords', 1)
  redis.call('HSET', ik.sess, sid, ord, '#' .. ord, sid .. ',0')
  return ord, true
end

-- The ordinal of a speaker (its name terms, space-joined); 0 past 2 bytes.
local function i_speaker_ord(ik, names)
  local ord = redis.call('HGET', ik.spk, names)
  if ord then return tonumber(ord) end
  ord = redis.call('HINCRBY', ik.meta, 'spords', 1)
  if ord > I_MAX_SPEAKER then
    redis.call('HINCRBY', ik.meta, 'spords', -1)
    return 0
  end
  redis.call('HSET', ik.spk, names, ord, '#' .. ord, names)
  return ord
end

-- Add `docs` to format 2 of the user of `ik` (index2_keys). Each doc is a
-- table: id (a docid, or nil: given from `i:meta next`), created (ms),
-- deadline (ms, nil: kept forever), record ("role|name terms|payload"),
-- session (escaped session id), filters (list of agent and tag filter
-- suffixes, keys.agent_filter_suffix / tag_filter_suffix), postings (list
-- of {term, weight as text}), prev (docid of the doc before it in its
-- session, or nil; linked only when that doc is still the session's; true:
-- the doc before it in `docs`).
-- Docs given with ids come first, in ascending order, above every docid
-- already in the lists. Returns the first and last docid written.
local function index2_add(ik, docs)
  local fresh, deadlines = {}, {}
  -- i:meta ttl = 1 once a doc with a deadline was written: until then no
  -- key of the family has a TTL, and a doc kept forever needs no PERSIST.
  local timed = redis.call('HGET', ik.meta, 'ttl') == '1'
  local untimed = not timed
  for i = 1, #docs do
    if docs[i].deadline then timed = true end
  end
  local function touch(key, deadline)
    local old = deadlines[key]
    local new = deadline or math.huge
    if not old or new > old then deadlines[key] = new end
  end
  for _, key in ipairs({ik.meta, ik.rec, ik.sess, ik.spk}) do
    if redis.call('EXISTS', key) == 0 then fresh[key] = true end
  end

  -- Docids.
  local allocate, given = 0, 0
  for i = 1, #docs do
    if docs[i].id then given = math.max(given, docs[i].id) else allocate = allocate + 1 end
  end
  if given > 0 and given > tonumber(redis.call('HGET', ik.meta, 'next') or '0') then
    redis.call('HSET', ik.meta, 'next', given)
  end
  if allocate > 0 then
    local id = redis.call('HINCRBY', ik.meta, 'next', allocate) - allocate
    for i = 1, #docs do
      if not docs[i].id then
        id = id + 1
        docs[i].id = id
      end
    end
  end

  -- Ordinals, links, and the lists each doc goes into.
  local ords, speakers, counts, by_id = {}, {}, {}, {}
  local lists, order, latest = {}, {}, {}
  local function post(suffix, id, q, deadline)
    local list = lists[suffix]
    if not list then
      list = {}
      lists[suffix] = list
      order[#order + 1] = suffix
      latest[suffix] = deadline
    elseif deadline > latest[suffix] then
      latest[suffix] = deadline
    end
    list[#list + 1] = id
    list[#list + 1] = q
  end
  local records = {}
  for i = 1, #docs do
    local doc = docs[i]
    by_id[doc.id] = doc
    local ord = ords[doc.session]
    if not ord then
      ord = i_session_ord(ik, doc.session)
      ords[doc.session] = ord
    end
    doc.ord = ord
    counts[ord] = (counts[ord] or 0) + 1
    local role, names = string.match(doc.record, '^(%d+)|([^|]*)|')
    doc.role = tonumber(role) or 0
    doc.speaker = 0
    if names and names ~= '' then
      local speaker = speakers[names]
      if not speaker then
        speaker = i_speaker_ord(ik, names)
        speakers[names] = speaker
      end
      doc.speaker = speaker
    end
    doc.prev_delta, doc.next_delta = 0, 0
    local prev = doc.prev
    if prev == true then prev = docs[i - 1].id else prev = prev and tonumber(prev) end
    if prev and prev > 0 and prev < doc.id and doc.id - prev <= I_MAX_LINK then
      local before = by_id[prev]
      if before then
        if before.ord == ord then
          doc.prev_delta = doc.id - prev
          before.next_delta = doc.id - prev
        end
      else
        local key = ik.prefix .. 'dt:' .. math.floor(prev / I_CHUNK)
        local at = (prev % I_CHUNK) * I_SLOT
        local held = redis.call('GETRANGE', key, at + 16, at + 18)
        if #held == 3 and i_unbe(held, 1, 3) == ord then
          doc.prev_delta = doc.id - prev
          redis.call('SETRANGE', key, at + 13, i_be(doc.id - prev, 3))
        end
      end
    end
    records[#records + 1] = doc.id
    records[#records + 1] = doc.record
    touch(ik.rec, doc.deadline)
    touch(ik.meta, doc.deadline)
    touch(ik.sess, doc.deadline)
    if doc.speaker > 0 then touch(ik.spk, doc.deadline) end
    local deadline = doc.deadline or math.huge
    -- A term's list is named by the term alone here (terms hold no ':',
    -- filter suffixes do), its key made once per list below.
    for j = 1, #doc.postings do
      local p = doc.postings[j]
      post(p[1], doc.id, i_quantize(p[2]), deadline)
    end
    post('f:s:' .. ord, doc.id, 0, deadline)
    for j = 1, #doc.filters do post(doc.filters[j], doc.id, 0, deadline) end
  end

  -- The doc table: one SETRANGE per run of consecutive docids in a chunk.
  local i = 1
  while i <= #docs do
    local first = docs[i]
    local chunk = math.floor(first.id / I_CHUNK)
    local key = ik.prefix .. 'dt:' .. chunk
    local parts = {i_slot(first)}
    touch(key, first.deadline)
    local j = i + 1
    while j <= #docs and docs[j].id == docs[j - 1].id + 1
        and math.floor(docs[j].id / I_CHUNK) == chunk do
      parts[#parts + 1] = i_slot(docs[j])
      touch(key, docs[j].deadline)
      j = j + 1
    end
    if redis.call('EXISTS', key) == 0 then fresh[key] = true end
    redis.call('SETRANGE', key, (first.id % I_CHUNK) * I_SLOT, table.concat(parts))
    i = j
  end

  redis.call('HSET', ik.rec, unpack(records))

  -- Posting and filter lists: the header rewritten, the postings appended
  -- (varint bytes gathered as numbers, made a string once per list).
  for _, suffix in ipairs(order) do
    local key
    if string.find(suffix, ':', 1, true) then
      key = ik.prefix .. suffix
    else
      key = ik.prefix .. 't:' .. suffix
    end
    local list = lists[suffix]
    local head = redis.call('GETRANGE', key, 0, 3)
    local last = 0
    if #head == 4 then last = i_unbe(head, 1, 4) end
    local bytes, nb = {}, 0
    for k = 1, #list, 2 do
      local id = list[k]
      if id > last then
        local v = (id - last) * 64 + list[k + 1]
        while v >= 128 do
          nb = nb + 1
          bytes[nb] = v % 128 + 128
          v = math.floor(v / 128)
        end
        nb = nb + 1
        bytes[nb] = v
        last = id
      end
    end
    local parts = {}
    for from = 1, nb, 4000 do
      parts[#parts + 1] = string.char(unpack(bytes, from, math.min(nb, from + 3999)))
    end
    local body = table.concat(parts)
    touch(key, latest[suffix])
    if #head < 4 then
      fresh[key] = true
      redis.call('SET', key, i_be(last, 4) .. body)
    elseif nb > 0 then
      redis.call('SETRANGE', key, 0, i_be(last, 4))
      redis.call('APPEND', key, body)
    end
  end

  redis.call('HINCRBY', ik.meta, 'n', #docs)
  for ord, count in pairs(counts) do
    local entry = redis.call('HGET', ik.sess, '#' .. ord) or ''
    local sid, before = string.match(entry, '^(.*),(%d+)$')
    if sid then
      redis.call('HSET', ik.sess, '#' .. ord, sid .. ',' .. (tonumber(before) + count))
    end
  end
  if timed and untimed then redis.call('HSET', ik.meta, 'ttl', 1) end
  i_expire(deadlines, fresh, untimed)
  return docs[1].id, docs[#docs].id
end
