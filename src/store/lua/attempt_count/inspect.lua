-- inspect.lua: an account key's record and the store's clock, read at one instant, for
-- the operator's Inspect (src/rpc/admin.rs derives door state and time to reopen from
-- them with src/throttle/attempt_count.rs). Reads, never writes.
--
-- contract: KEYS record | ARGV (none) | REPLY exists, failures, window_start_ms, step, now_ms, repeats, consecutive, locked_until
-- KEYS[1]  record key   portcullis:v2:{<digest>}:r   (hash: f, ws, st, c; rp, lu)
--
-- Returns {exists, failures, window_start_ms, step, now_ms, repeats, consecutive,
-- locked_until_ms}; exists is 1 or 0 (then the record fields are 0).
--
-- Worked example, store time T = 1700000000000:
--   no record                             -> {0, 0, 0, 0, T, 0, 0, 0}
--   {f=6, ws=T-1000, st=1, rp=2, c=11}    -> {1, 6, T-1000, 1, T, 2, 11, 0}
--
-- A script so the record and Redis TIME are read at one instant.

assert(#KEYS == 1, 'inspect takes one key')

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rec = redis.call('HMGET', KEYS[1], 'f', 'ws', 'st', 'rp', 'c', 'lu')
if not rec[1] then
  return {0, 0, 0, 0, now, 0, 0, 0}
end
local failures = stored(rec[1], MAX_COUNT, 'record')
local ws = stored(rec[2], MAX_TIME_MS, 'record')
local step = stored(rec[3], MAX_STEP, 'record')
local repeats = 0
if rec[4] then repeats = stored(rec[4], MAX_COUNT, 'record') end
local consecutive, locked_until = 0, 0
if rec[5] then consecutive = stored(rec[5], MAX_COUNT, 'record') end
if rec[6] then locked_until = stored(rec[6], MAX_TIME_MS, 'record') end
return {1, failures, ws, step, now, repeats, consecutive, locked_until}
