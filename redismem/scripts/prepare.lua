-- Load what a summarization job needs: the previous summary, the watermark,
-- and the backlog of messages after the watermark and before the recent window.
-- KEYS[1..8]  session keys (see _common.lua)
-- ARGV[1]     keep_recent: messages of the recent window, never summarized
-- ARGV[2]     max messages to return (the job's batch cap)
-- ARGV[3]     session id (unescaped)
-- Returns {seq, wm, len, summary or false, pending_since or false,
--          first_seq of the candidates, {candidates + one lookahead message},
--          {"first_seq,created_ms" of covering entries, newest first}}
local keep_recent = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 0 then return {0, 0, 0, false, false, 0, {}, {}} end
local seq = tonumber(redis.call('HGET', KEYS[2], 'seq') or '0')
local wm = tonumber(redis.call('HGET', KEYS[2], 'wm') or '0')
local len = redis.call('LLEN', KEYS[1])
local head = seq - len + 1
local first = math.max(wm + 1, head)
local last = math.min(seq - keep_recent, first + cap - 1)
local summary = redis.call('GET', KEYS[5])
local since = redis.call('ZSCORE', KEYS[8], ARGV[3])
if last < first then return {seq, wm, len, summary, since, 0, {}, {}} end
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
return {seq, wm, len, summary, since, first, msgs, covering}
