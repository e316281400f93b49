-- Read checkpoints whole.
-- unguarded: a thread's keys belong to no user
-- include: _langgraph
-- KEYS[1..7] the thread's keys: ck ix ids bl wr wi runs (see _langgraph.lua)
-- ARGV[1]    '1': the latest checkpoint of namespace ARGV[2] (escaped)
--            '0': the checkpoints C = ARGV[2..]
-- Returns each as {C, ck, ix, {blob values}, {write values}} (a missing one
-- as {C}).
local cs = {}
if ARGV[1] == '1' then
  local ns = ARGV[2] .. '/'
  cs = redis.call('ZREVRANGEBYLEX', KEYS[3], '(' .. ns .. '\255', '[' .. ns, 'LIMIT', 0, 1)
else
  for i = 2, #ARGV do cs[#cs + 1] = ARGV[i] end
end
local out = {}
for _, c in ipairs(cs) do
  local ck = redis.call('HGET', KEYS[1], c)
  if ck then
    local ix = redis.call('HGET', KEYS[2], c) or '|'
    local ns = ns_of(c)
    local blobs = {}
    for ref in string.gmatch(refs_of(ix), '%S+') do
      blobs[#blobs + 1] = redis.call('HGET', KEYS[4], ns .. '/' .. ref) or ''
    end
    local writes = {}
    local ws = with_prefix(KEYS[6], c .. '/')
    for i = 1, #ws do writes[#writes + 1] = redis.call('HGET', KEYS[5], ws[i]) or '' end
    out[#out + 1] = {c, ck, ix, blobs, writes}
  else
    out[#out + 1] = {c}
  end
end
return out
