-- clear.lua: forget one account key's record (a verified password, or a completed
-- password reset; docs/throttle.md), or a known device's bucket after its match.
-- Stored attempt_id answers are kept, so a retried call still gets its first answer
-- (within the retry horizon). The record's window's network set goes with it (a
-- record counted afresh starts a window of its own).
--
-- contract: KEYS record, networks, device_epoch?, candidate? | ARGV epoch_ttl_ms? | REPLY deleted, epoch, candidate_refused
-- KEYS[1]  the record   portcullis:v2:{<digest>}:r (or a device bucket :d:<16 hex>)
-- KEYS[2]  its networks <KEYS[1]>:n (record_attempt.lua)
-- KEYS[3]  optional     portcullis:v2:{<digest>}:e, the account's device epoch: given
--                       by Verify's accept, which issues a device token under it
-- KEYS[3] or KEYS[4] (after the epoch, when ARGV[1] is given)
--          optional     portcullis:v2:{<digest>}:s, the account's record under the
--                       realm's candidate policy (record_attempt.lua): deleted too
-- ARGV[1]  epoch_ttl_ms  with the device epoch only: how long the epoch is kept from now
--                        (the new token's device_token_ttl plus clock skew)
--
-- Returns {deleted (1|0), epoch}: epoch is the account's device epoch (0 when it has
-- none, or without KEYS[3]), kept for ARGV[1] more when it exists; candidate_refused is
-- 1 when the candidate record said the last attempt counted was one the enforced
-- policy allowed and the candidate would have refused (its 'lr'), else 0.
-- Example: {f=6, ws=T, st=1}, no KEYS[3] -> deleted, returns {1, 0}; the next attempt
-- starts at step 0. With KEYS[3] holding "2" -> returns {1, 2}.

assert(#KEYS >= 2 and #KEYS <= 4, 'clear takes two to four keys')
local deleted = redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[2])
local epoch_key, candidate_key = nil, nil
if ARGV[1] then epoch_key, candidate_key = KEYS[3], KEYS[4] else candidate_key = KEYS[3] end
local refused = 0
if candidate_key then
  -- A clear always goes through: a candidate record it cannot read (edited by hand,
  -- another type) is deleted all the same and reports nothing.
  local ok, held = pcall(redis.call, 'GET', candidate_key)
  if ok and held then
    local parsed, lr = pcall(function() return select(6, candidate_record(held)) end)
    if parsed and lr == 1 then refused = 1 end
  end
  redis.call('DEL', candidate_key)
end
local epoch = 0
if epoch_key then
  local ttl = tonumber(ARGV[1])
  assert(ttl and ttl >= 1000, 'epoch_ttl_ms must be >= 1000')
  local held = redis.call('GET', epoch_key)
  if held then
    epoch = stored(held, MAX_COUNT, 'device epoch')
    redis.call('PEXPIRE', epoch_key, ttl)
  end
end
return {deleted, epoch, refused}
