-- List a user's live sessions, optionally only those tagged with every pair.
-- include: _time
-- KEYS[1]  sessions (user index)   KEYS[2]  tagidx (user tag index)
-- ARGV[1..] forward prefixes "f<lp(key)><lp(value)>", one per required pair
-- Returns a flat list {session_id, deadline, ...} of sessions whose deadline
-- has not passed, ordered by deadline.
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now_ms(), '+inf', 'WITHSCORES')
if #ARGV == 0 then return live end
local wanted = nil
for a = 1, #ARGV do
  local prefix = ARGV[a]
  local members = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. prefix, '(' .. prefix .. '\255')
  local have = {}
  for i = 1, #members do
    local sid = string.sub(members[i], #prefix + 1)
    if wanted == nil or wanted[sid] then have[sid] = true end
  end
  wanted = have
end
local out = {}
for i = 1, #live, 2 do
  if wanted[live[i]] then
    out[#out + 1] = live[i]
    out[#out + 1] = live[i + 1]
  end
end
return out
