-- Read what an extraction pass needs: the session's indexed messages after
-- its extraction watermark `xwm`, the entry records covering them, and the
-- outbox `xbox` of a pass that committed but may not have applied its
-- memories. Starts the watermark at 0 on a session's first pass, so that
-- from then on summarization never compacts a message not yet extracted.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     cap: most messages returned
-- Returns {seq, gen, xwm, first_seq, {messages oldest first}, {entry records
--          covering them, newest first}, xbox or false}; seq is 0 when the
--          session does not exist, first_seq 0 when no indexed message waits.
-- Errors: REDISMEM_CORRUPT when the session's keys were evicted apart.
local cap = tonumber(ARGV[1])
local len = redis.call('LLEN', KEYS[1])
local meta = load_meta(KEYS[2], 'gen', 'xwm', 'xbox')
local broken = integrity_error(meta, len)
if broken then return broken end
if meta == nil then return {0, '', 0, 0, {}, {}, false} end
local seq = meta.seq
local iwm = meta.iwm
-- Only indexed sessions are extracted (the index watermark bounds the pass).
if meta.rttl == nil then return {seq, '', 0, 0, {}, {}, false} end
if meta.xwm == nil then redis.call('HSET', KEYS[2], 'xwm', 0) end
local gen, xwm, xbox = meta.gen or '', tonumber(meta.xwm or 0), meta.xbox or false
local head = seq - len + 1
local first = math.max(xwm + 1, head)
local last = math.min(iwm, seq, first + cap - 1)
if first > last then return {seq, gen, xwm, 0, {}, {}, xbox} end
local msgs = redis.call('LRANGE', KEYS[1], first - head, last - head)

local covering = entries_covering(first)
return {seq, gen, xwm, first, msgs, covering, xbox}
