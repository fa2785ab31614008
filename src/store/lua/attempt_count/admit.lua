-- admit.lua: is this account key's door open? Reads, never writes
-- (src/throttle/attempt_count.rs::is_open is the same rule in Rust).
--
-- contract: KEYS record | ARGV max_failures, first_window_ms, max_window_ms, max_consecutive | REPLY open
-- KEYS[1]  record key   portcullis:v2:{<digest>}:r (or a device bucket :d:<16 hex>)   (hash: f, ws, st, c; rp, lu)
-- ARGV[1]  max_failures
-- ARGV[2]  first_window_ms
-- ARGV[3]  max_window_ms
-- ARGV[4]  max_consecutive  the ceiling (record_attempt.lua)
--
-- Returns 1 when the next attempt would be allowed, else 0: the window (which lasts
-- until max(ws + window(st), lu)) is over or not exhausted, and c is below the ceiling.
--
-- Worked example (defaults 5, 900000, 3600000, 100), store time T:
--   no record                       -> 1
--   {f=5, ws=T-1000, st=0}          -> 0   (5 used, window runs to T-1000+900000)
--   {f=9, ws=T-900000, st=0}        -> 1   (window over)
--   {f=5, ws=T-900000, st=0, lu=T+5000} -> 0   (the lockout runs 5 s more)
--   {f=1, ws=T, st=2, c=100}        -> 0   (at the ceiling)

local max_failures = tonumber(ARGV[1])
local first_window = tonumber(ARGV[2])
local max_window = tonumber(ARGV[3])
local max_consecutive = tonumber(ARGV[4])
assert(max_failures and max_failures >= 1, 'max_failures must be >= 1')
assert(max_consecutive and max_consecutive >= 1, 'max_consecutive must be >= 1')
assert(first_window and first_window >= 1000, 'first_window_ms must be >= 1000')
assert(max_window and max_window >= first_window, 'max_window_ms must be >= first_window_ms')

-- The prelude's door_open: the record and Redis TIME read at one instant.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if door_open(KEYS[1], max_failures, first_window, max_window, max_consecutive, now) then
  return 1
end
return 0
