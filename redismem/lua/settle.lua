-- Clear a session's pending mark after a pass that found nothing to
-- summarize, unless a write arrived since the pass read the session (or the
-- session is another incarnation by now, with a backlog of its own), or
-- the session has messages not indexed (or not extracted) yet, or an
-- extraction outbox not applied yet.
-- include: _meta
-- KEYS[1]  meta of the session   KEYS[2]  pending (user index)
-- ARGV[1]  the session's seq the pass observed   ARGV[2]  session id
-- ARGV[3]  the incarnation (gen) the pass observed ("" when it found none)
-- Returns 1 when the mark was cleared, 0 when a newer write keeps it.
local meta = load_meta(KEYS[1], 'gen', 'xwm', 'xbox')
if meta then
  if meta.seq ~= tonumber(ARGV[1]) or meta.gen ~= ARGV[3] then return 0 end
  -- Messages still waiting to be indexed or extracted keep the mark too, and
  -- so do extracted memories not applied yet (the outbox `xbox`).
  local done = meta.iwm
  if meta.xwm then done = math.min(done, tonumber(meta.xwm)) end
  if meta.rttl and (done < meta.seq or meta.xbox) then return 0 end
end
redis.call('ZREM', KEYS[2], ARGV[2])
return 1
