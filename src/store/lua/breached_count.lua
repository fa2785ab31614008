-- breached_count.lua: count one accept of a breached password on an account (docs/breach.md,
-- "Grace logins"), bound to the credential; src/throttle/breached_count.rs is the same
-- rule in Rust.
--
-- contract: KEYS count | ARGV credential, ttl_ms | REPLY count
-- KEYS[1]  portcullis:v2:{<digest>}:b   string "<16 hex credential>:<count>"
-- ARGV[1]  credential   16 lowercase hex digits: a keyed digest of the stored hash
-- ARGV[2]  ttl_ms       how long the count is kept after this accept (>= 1000)
--
-- Returns the count including this accept: the kept count plus one for the same
-- credential, 1 for another (a new stored hash ends the old count).
-- Example: no key -> "00ff00ff00ff00ff:1", returns 1; again -> ":2", returns 2; with
-- credential "1111111111111111" -> "1111111111111111:1", returns 1.

assert(#KEYS == 1, 'breached takes one key')
local credential = ARGV[1]
local ttl = tonumber(ARGV[2])
assert(#credential == 16 and not string.find(credential, '[^0-9a-f]'),
  'credential must be 16 hex digits')
assert(ttl and ttl >= 1000 and ttl % 1 == 0, 'ttl_ms must be >= 1000')
local count = 0
local held = redis.call('GET', KEYS[1])
if held then
  local kept, n = string.match(held, '^([0-9a-f]+):(%d+)$')
  if not kept or #kept ~= 16 then error('corrupt breached count') end
  if kept == credential then count = stored(n, MAX_COUNT, 'breached count') end
end
count = count + 1
redis.call('SET', KEYS[1], credential .. ':' .. string.format('%d', count), 'PX', ttl)
return count
