-- Read what an indexing pass needs: the session's messages after its index
-- watermark `iwm`, the entry records covering them, and the messages just
-- before them (context for the ranking).
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     cap: most messages returned
-- ARGV[2]     context: how many earlier messages to return too
-- Returns {seq, gen, iwm, rttl or false, first_seq, {messages oldest first},
--          {entry records covering them, newest first}, {context messages
--          oldest first}}; seq is 0 when the session does not exist,
--          first_seq 0 when every stored message is indexed. rttl is false
--          when the session's writes are not indexed.
-- Errors: REDISMEM_CORRUPT when the session's keys were evicted apart.
local cap = tonumber(ARGV[1])
local context = tonumber(ARGV[2])
local len = redis.call('LLEN', KEYS[1])
local meta = load_meta(KEYS[2], 'gen')
local broken = integrity_error(meta, len)
if broken then return broken end
if meta == nil then return {0, '', 0, false, 0, {}, {}, {}} end
local seq = meta.seq
local iwm = meta.iwm
local gen = meta.gen or ''
local rttl = meta.rttl or false
local head = seq - len + 1
local first = math.max(iwm + 1, head)
if rttl == false or first > seq then return {seq, gen, iwm, rttl, 0, {}, {}, {}} end
local last = math.min(seq, first + cap - 1)
local msgs = redis.call('LRANGE', KEYS[1], first - head, last - head)
local before = {}
local from = math.max(head, first - context)
if from < first then before = redis.call('LRANGE', KEYS[1], from - head, first - head - 1) end

local covering = entries_covering(first)
return {seq, gen, iwm, rttl, first, msgs, covering, before}
