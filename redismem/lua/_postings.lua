-- Index format 2 decoders (redismem/recall/postings.py is the reference and
-- documents the layouts): posting lists and doc-table slots. Plain
-- string.byte arithmetic: the embedded backend's Lua has no bit or struct.
-- KEYS: none of its own (slot reads E i:dt:<c>, P_DT.prefix .. 'dt:' .. c).
-- ARGV: none (the including script passes keys and strings).

-- Hot loops call string.byte as S.byte (one field lookup, no global one).
local S = string
-- Bytes of a list's header, docids per doc-table string, bytes per slot.
local P_HEADER, P_CHUNK, P_SLOT = 4, 4096, 22
-- 2020-01-01T00:00Z in ms: the origin of the slots' deadlines (seconds).
local P_EPOCH_2020 = 1577836800000

-- How many postings the list s (header included) holds: one varint ends at
-- each byte below 128, counted in C by gsub.
local function postings_count(s)
  local len = #s
  if len <= P_HEADER then return 0 end
  local _, n = string.gsub(s, '[%z\1-\127]', '')
  for i = 1, P_HEADER do
    if S.byte(s, i) < 128 then n = n - 1 end
  end
  return n
end

-- For each posting (doc, q) of the list s: base[doc] = base[doc] + add[q]
-- (base[doc] absent: add[q]).
local function postings_add(s, add, base)
    local pos, len, doc = P_HEADER + 1, #s, 0
  while pos <= len do
    local v = S.byte(s, pos)
    pos = pos + 1
    if v >= 128 then
      local m = 128
      v = v - 128
      local b = S.byte(s, pos)
      pos = pos + 1
      while b >= 128 do
        v = v + (b - 128) * m
        m = m * 128
        b = S.byte(s, pos)
        pos = pos + 1
      end
      v = v + b * m
    end
    local q = v % 64
    doc = doc + (v - q) / 64
    local old = base[doc]
    if old then base[doc] = old + add[q] else base[doc] = add[q] end
  end
end

-- The docids of the list s, ascending, as an array; with `only` (a set),
-- just those in it.
local function postings_docs(s, only)
    local out, n = {}, 0
  local pos, len, doc = P_HEADER + 1, #s, 0
  while pos <= len do
    local v = S.byte(s, pos)
    pos = pos + 1
    if v >= 128 then
      local m = 128
      v = v - 128
      local b = S.byte(s, pos)
      pos = pos + 1
      while b >= 128 do
        v = v + (b - 128) * m
        m = m * 128
        b = S.byte(s, pos)
        pos = pos + 1
      end
      v = v + b * m
    end
    doc = doc + (v - v % 64) / 64
    if only == nil or only[doc] then
      n = n + 1
      out[n] = doc
    end
  end
  return out
end

-- The slot of doc d at byte `off` (0-based) of the string t, as
-- {created ms, deadline s since 2020 (0 none), prev docid or false,
-- next docid or false, session ordinal, role code, speaker ordinal};
-- false when there is no doc.
local function slot_decode(d, t, off)
  local b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15, b16, b17, b18,
    b19, b20, b21, b22 = S.byte(t, off + 1, off + P_SLOT)
  if b22 == nil then return false end
  local sess = (b17 * 256 + b18) * 256 + b19
  if sess == 0 then return false end
  local prev = (b11 * 256 + b12) * 256 + b13
  local nxt = (b14 * 256 + b15) * 256 + b16
  return {
    ((((b1 * 256 + b2) * 256 + b3) * 256 + b4) * 256 + b5) * 256 + b6,
    ((b7 * 256 + b8) * 256 + b9) * 256 + b10,
    prev > 0 and d - prev,
    nxt > 0 and d + nxt,
    sess, b20, b21 * 256 + b22,
  }
end

-- The doc table read by `slot`: under P_DT.prefix (E i:, set by the
-- script before the first read), decoded slots cached; a string read a few
-- times is fetched whole (GET) instead of by GETRANGE.
local P_DT = {prefix = '', cache = {}, tables = {}, reads = {}}

-- The slot of doc d (see slot_decode), or false.
local function slot(d)
  local found = P_DT.cache[d]
  if found ~= nil then return found end
  local c = math.floor(d / P_CHUNK)
  local off = (d - c * P_CHUNK) * P_SLOT
  local key = P_DT.prefix .. 'dt:' .. c
  local t = P_DT.tables[c]
  if t == nil then
    local n = (P_DT.reads[c] or 0) + 1
    P_DT.reads[c] = n
    if n > 8 then
      t = redis.call('GET', key) or ''
      P_DT.tables[c] = t
    end
  end
  if t then
    found = slot_decode(d, t, off)
  else
    found = slot_decode(d, redis.call('GETRANGE', key, off, off + P_SLOT - 1), 0)
  end
  P_DT.cache[d] = found
  return found
end

-- Whether bit `ord` of the bitmap string s is set (SETBIT order: bit 0 is
-- the high bit of the first byte).
local function bit_set(s, ord)
  local b = S.byte(s, math.floor(ord / 8) + 1)
  if b == nil then return false end
  return math.floor(b / 2 ^ (7 - ord % 8)) % 2 == 1
end
