-- Settle a clear (clear_user's last step, or the workers' sweep finishing a
-- clear whose caller died): record that every key of the epochs before this
-- one is deleted (`reaped`), then drop the guard if this epoch holds nothing
-- yet, so a user who does not come back leaves no key. Dropping is safe: a
-- script built for the epoch either ran before (then a root key exists and
-- the guard stays) or runs after (then it fails and builds its keys again,
-- for epoch 0). Not itself guarded. Idempotent.
-- unguarded: it owns the guard
-- KEYS[1]      the user's guard
-- KEYS[2..]    the root keys of the epoch (keys.KeyLayout.epoch_roots)
-- ARGV[1]      the epoch whose earlier epochs were deleted
-- Returns 1 when the guard was dropped, 0 when it stays (or holds another
-- epoch: a later clear settles that one).
if redis.call('HGET', KEYS[1], 'e') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'reaped', ARGV[1])
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
redis.call('DEL', KEYS[1])
return 1
