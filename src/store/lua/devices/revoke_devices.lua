-- revoke_devices.lua: no device token issued before now is trusted again for one
-- account (docs/devices.md, "Revocation"): the account's device epoch goes up by one.
-- record_attempt.lua counts a device's attempt in its bucket only while the token's
-- epoch is the account's.
--
-- contract: KEYS device_epoch | ARGV ttl_ms | REPLY epoch
-- KEYS[1]  device epoch  portcullis:v2:{<digest>}:e   (string; absent: 0)
-- ARGV[1]  ttl_ms        how long the epoch is kept: the realm's device_token_ttl plus
--                        clock skew, so it outlives every token issued before it (and
--                        record_attempt.lua extends it while attempts come)
--
-- Returns the new epoch.
-- Example: absent -> "1", returns 1; "1" -> "2", returns 2.

local ttl = tonumber(ARGV[1])
assert(#KEYS == 1, 'revoke_devices takes one key')
assert(ttl and ttl >= 1000, 'ttl_ms must be >= 1000')
local held = redis.call('GET', KEYS[1])
local epoch = 0
if held then
  epoch = stored(held, MAX_COUNT, 'device epoch')
end
epoch = epoch + 1
redis.call('SET', KEYS[1], string.format('%d', epoch), 'PX', ttl)
return epoch
