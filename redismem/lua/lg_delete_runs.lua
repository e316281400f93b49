-- Delete the checkpoints of some runs (and their writes and unreferenced
-- channel values).
-- unguarded: a thread's keys belong to no user
-- include: _langgraph
-- KEYS[1..7] the thread's keys: ck ix ids bl wr wi runs (see _langgraph.lua)
-- ARGV[1..]  escaped run ids
-- Returns the runs the thread no longer holds.
local gone = {}
for i = 1, #ARGV do
  local run = ARGV[i]
  local members = with_prefix(KEYS[7], run .. '/')
  for j = 1, #members do drop(string.sub(members[j], #run + 2)) end
  gone[#gone + 1] = run
end
if #gone > 0 then collect_blobs() end
return gone
