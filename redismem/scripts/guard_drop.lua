-- Drop the guard of a cleared user whose new epoch holds nothing yet
-- (clear_user's last step), so a user who never comes back leaves no key.
-- Safe: a script built for the epoch either ran before (then a root key
-- exists and the guard stays) or runs after (then it fails and builds its
-- keys again, for epoch 0). Not itself guarded.
-- KEYS[1]      the user's guard
-- KEYS[2..]    the root keys of the epoch (keys.KeyLayout.epoch_roots)
-- ARGV[1]      the epoch to drop
-- Returns 1 when dropped, 0 when the guard holds another epoch or the
-- epoch holds keys.
if redis.call('HGET', KEYS[1], 'e') ~= ARGV[1] then return 0 end
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then return 0 end
end
redis.call('DEL', KEYS[1])
return 1
