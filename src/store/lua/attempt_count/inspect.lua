-- inspect.lua: an account key's record, its window's networks, the account's device
-- lanes and the store's clock, read at one instant, for the operator's Inspect
-- (src/rpc/admin.rs derives door state, time to reopen and why it is shut from them
-- with src/throttle/attempt_count.rs). Reads, never writes.
--
-- contract: KEYS record, networks, device_index?, candidate? | ARGV first_window_ms?, max_window_ms?, bucket_prefix? | REPLY exists, failures, window_start_ms, step, now_ms, repeats, consecutive, locked_until, shut_at, networks, device_lanes, device_failures, candidate_exists, candidate_failures, candidate_window_start_ms, candidate_step, candidate_consecutive, candidate_locked_until
-- KEYS[1]  record key   portcullis:v2:{<digest>}:r   (hash: f, ws, st, c; rp, lu, sa)
-- KEYS[2]  networks     <KEYS[1]>:n                  (set of networks, record_attempt.lua)
-- and for the account's login record only:
-- KEYS[3]  device index portcullis:v2:{<digest>}:dx  (sorted set of 16 hex device tags)
-- KEYS[4]  candidate    portcullis:v2:{<digest>}:s   the record under the realm's candidate
--                       policy (record_attempt.lua), when the realm has one
-- ARGV[1]  first_window_ms  with KEYS[3]: the realm's windows, to tell which failures
-- ARGV[2]  max_window_ms    of a device bucket are in its current window
-- ARGV[3]  bucket_prefix    with KEYS[3]: portcullis:v2:{<digest>}:d: (a bucket's key
--                           is it and the tag: the same hash tag as KEYS[1], one slot)
--                           The bucket keys are built here, not declared: the one
--                           exception to declaring every key, for a read-only operator
--                           call (declaring them would take a second round trip to read
--                           the index first). They share KEYS[1]'s slot; while that slot
--                           is being migrated, a bucket already moved reads as absent.
--
-- Returns {exists, failures, window_start_ms, step, now_ms, repeats, consecutive,
-- locked_until_ms, shut_at_ms, networks, device_lanes, device_failures, then the
-- candidate record's exists, failures, window start, step, consecutive failures and
-- lockout end (all 0 without one)}; exists is 1 or
-- 0 (then the record fields are 0). networks is the set's size as stored (the daemon
-- reads it as 0 once the record's window is over); device_lanes counts the listed
-- buckets that hold a record, device_failures sums their failures in their current
-- windows (src/throttle/attempt_count.rs::window_failures).
--
-- Worked example, store time T = 1700000000000, ARGV 900000, 3600000, prefix P:
--   no record, no index                     -> {0, 0, 0, 0, T, 0, 0, 0, 0, 0, 0, 0}
--   {f=6, ws=T-1000, st=1, rp=2, c=11, sa=T-2000}, 3 networks, index {d1, d2},
--   P..d1 = {f=2, ws=T-5000, st=0}, P..d2 absent
--                                           -> {1, 6, T-1000, 1, T, 2, 11, 0, T-2000, 3, 1, 2}
--
-- A script so the records and Redis TIME are read at one instant.

assert(#KEYS >= 2 and #KEYS <= 4, 'inspect takes two to four keys')
local first_window, max_window, prefix = 0, 0, ''
if #KEYS >= 3 then
  first_window, max_window, prefix = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3] or ''
  assert(first_window and first_window >= 1000, 'first_window_ms must be >= 1000')
  assert(max_window and max_window >= first_window, 'max_window_ms must be >= first_window_ms')
  assert(string.find(prefix, ':d:$'), 'bucket_prefix must end with :d:')
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The device lanes: each bucket the index lists, read as admit.lua reads a record.
local lanes, device_failures = 0, 0
if #KEYS >= 3 then
  -- At most 32 listed (record_attempt.lua's max_devices): more is not a daemon's index.
  if redis.call('ZCARD', KEYS[3]) > 32 then error('corrupt device index') end
  for _, tag in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if #tag ~= 16 or string.find(tag, '[^0-9a-f]') then error('corrupt device index') end
    local b = redis.call('HMGET', prefix .. tag, 'f', 'ws', 'st', 'lu')
    if b[1] then
      lanes = lanes + 1
      local f = stored(b[1], MAX_COUNT, 'record')
      local ws = stored(b[2], MAX_TIME_MS, 'record')
      local st = stored(b[3], MAX_STEP, 'record')
      local lu = 0
      if b[4] then lu = stored(b[4], MAX_TIME_MS, 'record') end
      if now < math.max(ws + math.min(first_window * (2 ^ st), max_window), lu) then
        device_failures = device_failures + f
      end
    end
  end
end

-- The candidate record (KEYS[4], with the device index: only a login record has one).
local cand = {0, 0, 0, 0, 0, 0}
if KEYS[4] then
  local held = redis.call('GET', KEYS[4])
  if held then
    local f, ws, st, c, lu = candidate_record(held)
    cand = {1, f, ws, st, c, lu}
  end
end

local rec = redis.call('HMGET', KEYS[1], 'f', 'ws', 'st', 'rp', 'c', 'lu', 'sa')
if not rec[1] then
  return {0, 0, 0, 0, now, 0, 0, 0, 0, 0, lanes, device_failures, unpack(cand)}
end
local failures = stored(rec[1], MAX_COUNT, 'record')
local ws = stored(rec[2], MAX_TIME_MS, 'record')
local step = stored(rec[3], MAX_STEP, 'record')
local repeats = 0
if rec[4] then repeats = stored(rec[4], MAX_COUNT, 'record') end
local consecutive, locked_until, shut_at = 0, 0, 0
if rec[5] then consecutive = stored(rec[5], MAX_COUNT, 'record') end
if rec[6] then locked_until = stored(rec[6], MAX_TIME_MS, 'record') end
if rec[7] then shut_at = stored(rec[7], MAX_TIME_MS, 'record') end
-- At most 64 (record_attempt.lua's max_networks): more reads as 64, "64 or more".
local networks = math.min(redis.call('SCARD', KEYS[2]), 64)
return {1, failures, ws, step, now, repeats, consecutive, locked_until, shut_at, networks, lanes,
  device_failures, unpack(cand)}
