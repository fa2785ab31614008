-- confirm_device.lua: settle one ConfirmDevice in one step (docs/devices.md, "Step-up
-- for unknown devices"): a challenge confirms one device, once, while the account's
-- code step is open and no revocation came after it; then the account's login record
-- and its second_factor record are cleared together, with their candidate records
-- (docs/throttle.md, "Trying a policy in shadow").
--
-- contract: KEYS record, second_factor, device_epoch, mark, second_factor_candidate, candidate | ARGV challenge_epoch, max_failures, first_window_ms, max_window_ms, max_consecutive, mark_ttl_ms, epoch_ttl_ms | REPLY confirmed, detail, code_candidate_refused
-- KEYS[1]  account record     portcullis:v2:{<digest>}:r
-- KEYS[2]  second_factor      portcullis:v2:{<digest>}:f:2f      (hash: f, ws, st, c; rp, lu)
-- KEYS[3]  device epoch       portcullis:v2:{<digest>}:e         (string; absent: 0)
-- KEYS[4]  the challenge's one-use mark  portcullis:v2:{<digest>}:c:<16 hex>
-- KEYS[5]  second_factor's candidate record  portcullis:v2:{<digest>}:f:2f:s (a string,
--                             record_attempt.lua's shadow; deleted with KEYS[2])
-- KEYS[6]  the account record's candidate record  portcullis:v2:{<digest>}:s (deleted
--                             with KEYS[1])
-- ARGV[1]  challenge_epoch    the account's device epoch when the challenge was issued
-- ARGV[2]  max_failures       the second_factor flow's
-- ARGV[3]  first_window_ms    the second_factor flow's window
-- ARGV[4]  max_window_ms      the same (it never escalates)
-- ARGV[5]  max_consecutive    the realm's ceiling
-- ARGV[6]  mark_ttl_ms        how long the mark is kept: the challenge's lifetime plus
--                             clock skew (after that the token itself is expired)
-- ARGV[7]  epoch_ttl_ms       an existing device epoch is kept at least this long (the
--                             new device token's lifetime plus clock skew)
--
-- Returns {1, epoch, refused}: confirmed (the mark set, both records and their
-- candidate records deleted; the new device token is issued under epoch; refused is 1
-- when the second_factor candidate record said its last code was one the enforced
-- policy allowed and the candidate would have refused, its 'lr': a real user the
-- candidate would have shut out); or {0, reason, 0}, nothing written: 1 the account's
-- devices were revoked after the challenge (another epoch), 2 the code step is shut
-- (its door would refuse the next code), 3 the challenge was already used.
--
-- Worked example (epoch absent, second_factor {f=2, ws=T-60000, st=0}, 5, 900000,
-- 900000, 100, 1200000, 7776300000), ARGV[1] = 0:
--   first call  -> {1, 0, 0}; :r, :s, :f:2f and :f:2f:s deleted, the mark set for 20 min
--   second call -> {0, 3, 0}
-- With {f=5, ws=T-60000} (five wrong codes) -> {0, 2, 0}; with the epoch at 1 -> {0, 1, 0}.

assert(#KEYS == 6, 'confirm_device takes six keys')
local challenge_epoch = tonumber(ARGV[1])
local max_failures = tonumber(ARGV[2])
local first_window = tonumber(ARGV[3])
local max_window = tonumber(ARGV[4])
local max_consecutive = tonumber(ARGV[5])
local mark_ttl = tonumber(ARGV[6])
local epoch_ttl = tonumber(ARGV[7])
assert(challenge_epoch and challenge_epoch >= 0, 'challenge_epoch must be >= 0')
assert(max_failures and max_failures >= 1, 'max_failures must be >= 1')
assert(first_window and first_window >= 1000, 'first_window_ms must be >= 1000')
assert(max_window and max_window >= first_window, 'max_window_ms must be >= first_window_ms')
assert(max_consecutive and max_consecutive >= 1, 'max_consecutive must be >= 1')
assert(mark_ttl and mark_ttl >= 1000, 'mark_ttl_ms must be >= 1000')
assert(epoch_ttl and epoch_ttl >= 1000, 'epoch_ttl_ms must be >= 1000')

local epoch = 0
local held = redis.call('GET', KEYS[3])
if held then epoch = stored(held, MAX_COUNT, 'device epoch') end
if epoch ~= challenge_epoch then
  return {0, 1, 0}
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not door_open(KEYS[2], max_failures, first_window, max_window, max_consecutive, now) then
  return {0, 2, 0}
end

if not redis.call('SET', KEYS[4], '1', 'NX', 'PX', mark_ttl) then
  return {0, 3, 0}
end
-- The code's candidate record is read as clear.lua reads one: one it cannot read is
-- deleted all the same and reports nothing.
local refused = 0
local ok, code_candidate = pcall(redis.call, 'GET', KEYS[5])
if ok and code_candidate then
  local parsed, lr = pcall(function() return select(6, candidate_record(code_candidate)) end)
  if parsed and lr == 1 then refused = 1 end
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[5], KEYS[6])
if held then redis.call('PEXPIRE', KEYS[3], epoch_ttl) end
return {1, epoch, refused}
