-- Load what a summarization job needs: the previous summary, the watermark,
-- the session's incarnation, and the backlog of messages after the watermark
-- and before the recent window.
-- include: _common
-- KEYS[1..9]  session keys (see _common.lua)
-- ARGV[1]     keep_recent: messages of the recent window, never summarized
-- ARGV[2]     max messages to return (the job's batch cap)
-- ARGV[3]     session id (unescaped)
-- Returns {seq, wm, len, summary or false, pending_since or false,
--          first_seq of the candidates, {candidates + one lookahead message},
--          {"first_seq,created_ms" of covering entries, newest first}, gen,
--          last: seq of the last candidate (the list holds one more),
--          iwm: the index watermark, -1 when the writes are not indexed};
-- candidates end at the extraction watermark `xwm` when there is one;
-- seq is 0 when the session does not exist.
-- Errors: REDISMEM_CORRUPT when the session's keys were evicted apart.
local keep_recent = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local len = redis.call('LLEN', KEYS[1])
local meta = load_meta(KEYS[2], 'gen', 'xwm')
local broken = integrity_error(meta, len)
if broken then return broken end
if meta == nil then return {0, 0, 0, false, false, 0, {}, {}, '', 0, -1} end
local seq = meta.seq
local wm = meta.wm
local gen = meta.gen or ''
local head = seq - len + 1
local first = math.max(wm + 1, head)
local last = math.min(seq - keep_recent, first + cap - 1)
-- The index watermark, or -1 when the session's writes are not indexed.
local iwm = -1
if meta.rttl then iwm = meta.iwm end
-- Once the workers extract memories, no message is summarized before it
-- was extracted (compaction would take it away first).
if meta.rttl and meta.xwm then last = math.min(last, tonumber(meta.xwm)) end
local summary = redis.call('GET', KEYS[5])
local since = redis.call('ZSCORE', KEYS[9], ARGV[3])
if last < first then return {seq, wm, len, summary, since, 0, {}, {}, gen, 0, iwm} end
-- One message past the batch so the caller can see a tool result that
-- belongs to the batch's last assistant tool call.
local msgs = redis.call('LRANGE', KEYS[1], first - head, math.min(last + 1, seq) - head)
local covering = {}
local records = redis.call('LRANGE', KEYS[3], 0, -1)
for i = #records, 1, -1 do
  local prefix = string.match(records[i], '^(%d+,%d+),')
  if prefix == nil then
    -- A corrupt record: hand the client a marker it reports as CorruptData.
    covering[#covering + 1] = 'corrupt entry record'
    break
  end
  local entry_first = tonumber(string.match(prefix, '^(%d+)'))
  if entry_first <= last + 1 then covering[#covering + 1] = prefix end
  if entry_first <= first then break end
end
return {seq, wm, len, summary, since, first, msgs, covering, gen, last, iwm}
