-- record_attempt.lua: count one attempt for one account key, atomically
-- (docs/throttle.md, "The rules", steps 1-4; src/throttle.rs::attempt is the same
-- rule in Rust, and the store conformance tests hold the two together).
--
-- KEYS[1]  record key   portcullis:v1:{<digest>}:record   (hash: f, ws, st)
-- KEYS[2]  optional     portcullis:v1:{<digest>}:attempt:<id digest>
--                       present when the gateway sent an attempt_id; holds
--                       "<allowed>:<window_start_ms>:<replays>" of the first call
-- ARGV[1]  max_failures       (1-100)
-- ARGV[2]  first_window_ms
-- ARGV[3]  max_window_ms
-- ARGV[4]  retention_ms       (expiry pushed on every attempt)
-- ARGV[5]  escalate           1: an exhausted window raises the step; 0: 2FA realm
-- ARGV[6]  max_step           step cap, where window(step) reaches max_window
--
-- Returns {allowed (1|0), failures, step, window_start_ms, replays}.
-- replays is 0 for a first call. A replayed attempt_id returns its first answer,
-- counts nothing (failures and step are then -1) and bumps its replay count,
-- which Verify uses to bound re-comparisons under one id.
--
-- Worked example (defaults: 5, 900000, 3600000, 86400000, 1, 2), store time T:
--   no record          -> record {f=1, ws=T, st=0}, returns {1, 1, 0, T, 0}
--   6th call at T+1s   -> {f=6}, returns {0, 6, 0, T, 0}           (door closed)
--   call at T+900s     -> window over and exhausted: {f=1, ws=T+900000, st=1}
--
-- Time comes from Redis TIME, never from a daemon: replicas' clocks disagree.
-- A script and not MULTI/EXEC: a key can expire between the commands of a
-- transaction, never in the middle of a script, and the read-modify-write needs
-- the read's result.

local max_failures = tonumber(ARGV[1])
local first_window = tonumber(ARGV[2])
local max_window = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])
local escalate = tonumber(ARGV[5])
local max_step = tonumber(ARGV[6])
assert(max_failures and max_failures >= 1, 'max_failures must be >= 1')
assert(first_window and first_window >= 1000, 'first_window_ms must be >= 1000')
assert(max_window and max_window >= first_window, 'max_window_ms must be >= first_window_ms')
assert(retention and retention > max_window, 'retention_ms must be > max_window_ms')
assert(escalate == 0 or escalate == 1, 'escalate must be 0 or 1')
assert(max_step and max_step >= 0 and max_step < 64, 'max_step must be in 0..63')

if KEYS[2] then
  local seen = redis.call('GET', KEYS[2])
  if seen then
    local allowed, ws, replays = string.match(seen, '^([01]):(%d+):(%d+)$')
    if not allowed then error('corrupt attempt record') end
    ws = stored(ws, MAX_TIME_MS, 'attempt record')
    replays = stored(replays, MAX_COUNT, 'attempt record') + 1
    redis.call('SET', KEYS[2], allowed .. ':' .. string.format('%d', ws) .. ':'
      .. string.format('%d', replays), 'KEEPTTL')
    return {tonumber(allowed), -1, -1, ws, replays}
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local rec = redis.call('HMGET', KEYS[1], 'f', 'ws', 'st')
local failures, ws, step = 0, now, 0
if rec[1] then
  failures = stored(rec[1], MAX_COUNT, 'record')
  ws = stored(rec[2], MAX_TIME_MS, 'record')
  step = stored(rec[3], MAX_STEP, 'record')
end

local window = math.min(first_window * (2 ^ step), max_window)
if now - ws >= window then
  if failures >= max_failures and escalate == 1 then
    step = math.min(step + 1, max_step)
  end
  failures = 0
  ws = now
end
failures = failures + 1

-- %d: Lua's default number format keeps only 14 significant digits.
redis.call('HSET', KEYS[1], 'f', string.format('%d', failures),
  'ws', string.format('%d', ws), 'st', string.format('%d', step))
redis.call('PEXPIRE', KEYS[1], retention)

local allowed = 0
if failures <= max_failures then allowed = 1 end
if KEYS[2] then
  redis.call('SET', KEYS[2], allowed .. ':' .. string.format('%d', ws) .. ':0', 'PX', retention)
end
return {allowed, failures, step, ws, 0}
