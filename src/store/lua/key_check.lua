-- key_check.lua: the store's key check value (docs/store.md, "One key secret per store").
-- Every daemon sharing a store proves it holds the same key secret before it serves:
-- the first one writes its check value, every later one (and every reconnect) finds
-- its own there or refuses to serve. A daemon keyed differently would count every
-- account afresh: a second allowance, which this check makes loud instead of silent.
-- One script, so two daemons starting at once on an empty store cannot both write.
--
-- contract: KEYS check_value | ARGV check, mode | REPLY value
-- KEYS[1]  the check value   portcullis:v2:key-check   (string; no expiry)
-- ARGV[1]  check             this daemon's check value, 64 hex digits (a sub-key of
--                            the key secret; never the secret)
-- ARGV[2]  mode              'prove': write when absent, else leave it
--                            'adopt': write it (the operator's rotation step)
--
-- Returns the value the store holds after the call; the daemon compares it with its
-- own in constant time (src/secret.rs, KeyCheck::matches).
--
-- Worked example:
--   absent, prove aa..aa       -> writes aa..aa, returns aa..aa   (first daemon)
--   aa..aa, prove aa..aa       -> returns aa..aa                  (same secret: serves)
--   aa..aa, prove bb..bb       -> returns aa..aa                  (another secret: refuses)
--   aa..aa, adopt bb..bb       -> writes bb..bb, returns bb..bb   (rotation)

local check, mode = ARGV[1], ARGV[2]
assert(#KEYS == 1, 'key_check takes one key')
assert(check and #check == 64 and not string.find(check, '[^0-9a-f]'),
  'check must be 64 hex digits')
assert(mode == 'prove' or mode == 'adopt', "mode must be 'prove' or 'adopt'")

if mode == 'adopt' then
  redis.call('SET', KEYS[1], check)
  return check
end
local held = redis.call('GET', KEYS[1])
if held then
  return held
end
redis.call('SET', KEYS[1], check)
return check
