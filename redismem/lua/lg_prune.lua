-- Keep only the latest checkpoint of each namespace (with its writes and
-- channel values).
-- unguarded: a thread's keys belong to no user
-- include: _langgraph
-- KEYS[1..7] the thread's keys: ck ix ids bl wr wi runs (see _langgraph.lua)
-- ARGV: none
-- Returns the runs the thread no longer holds.
local all = redis.call('ZRANGEBYLEX', KEYS[3], '-', '+')
local gone = {}
for i = 1, #all - 1 do
  if ns_of(all[i]) == ns_of(all[i + 1]) then
    local run = drop(all[i])
    if run then gone[#gone + 1] = run end
  end
end
collect_blobs()
return gone
