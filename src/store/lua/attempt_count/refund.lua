-- refund.lua: give back one attempt that never reached a comparison because the
-- CPU budget refused it (it was not a guess; docs/throttle.md, "The rules").
-- src/throttle/attempt_count.rs::refund is the same rule in Rust.
--
-- contract: KEYS record, attempt?, candidate? | ARGV window_start_ms, allowed, candidate | REPLY refunded
-- KEYS[1]  record key   portcullis:v2:{<digest>}:r (or a device bucket :d:<16 hex>)   (hash: f, ws, st, c; rp, lu)
-- KEYS[2]  optional     portcullis:v2:{<digest>}:a:<16 hex>
--                       deleted, so the gateway's retry with the same
--                       attempt_id is counted afresh
-- then, with ARGV[3], the last key: <KEYS[1]'s candidate record> (portcullis:v2:{<digest>}:s
--                       or <device bucket>:s; prelude.lua's candidate_record)
-- ARGV[1]  window_start_ms the attempt was counted in
-- ARGV[2]  allowed: 1 when the attempt added a consecutive failure, c (allowed, and no
--          stale repeat: record_attempt.lua's added), which goes back too; 0 when it
--          added none (giving one back would reopen a door at its ceiling)
-- ARGV[3]  candidate: '' none, else '<window_start_ms>,<added>' as record_attempt.lua
--          answered them for the candidate record (shadow_window_start_ms,
--          shadow_added): the attempt is given back there by the same rule, and its
--          last-refused mark cleared (docs/throttle.md, "Trying a policy in shadow")
--
-- Returns 1 when a failure was given back (the window's and the consecutive one, c), 0
-- when the window has moved on (its count is no longer the refunded attempt's) or the
-- record is gone.
--
-- Worked example: {f=3, ws=T, st=0, c=8}, ARGV={T, 1}  -> {f=2, ws=T, st=0, c=7}, returns 1
--                 {f=3, ws=T, st=0, c=8}, ARGV={T, 0}  -> {f=2, ws=T, st=0, c=8}, returns 1
--                 {f=1, ws=U, st=1}, ARGV[1]=T  -> unchanged, returns 0
--                 candidate "4,U,0,4,0,1", ARGV[3]='U,1' -> "3,U,0,3,0,0"
--
-- The expiry is left as it is: it was pushed by the attempt being refunded.

-- The candidate record, read and checked before anything is written.
local candidate_key, attempt_key = nil, KEYS[2]
local cand = nil
if ARGV[3] and ARGV[3] ~= '' then
  local cws, cadded = string.match(ARGV[3], '^(%d+),([01])$')
  assert(cws, 'candidate must be window_start_ms,added')
  candidate_key = KEYS[#KEYS]
  if #KEYS == 2 then attempt_key = nil end
  local text = redis.call('GET', candidate_key)
  if text then
    cand = {candidate_record(text)}
    cand.ws, cand.added = tonumber(cws), tonumber(cadded)
  end
end

local window_start = tonumber(ARGV[1])
local allowed = tonumber(ARGV[2])
assert(window_start and window_start >= 0, 'window_start_ms must be a number')
assert(allowed == 0 or allowed == 1, 'allowed must be 0 or 1')

-- The record, read and checked before anything is written too (the step only to check
-- it): a record with any field out of range fails the call with nothing changed.
local rec = redis.call('HMGET', KEYS[1], 'f', 'ws', 'st', 'c')
local failures, ws, consecutive = 0, -1, 0
if rec[1] then
  failures = stored(rec[1], MAX_COUNT, 'record')
  ws = stored(rec[2], MAX_TIME_MS, 'record')
  stored(rec[3], MAX_STEP, 'record')
  if rec[4] then consecutive = stored(rec[4], MAX_COUNT, 'record') end
end

if attempt_key then
  redis.call('DEL', attempt_key)
end
if cand and cand[2] == cand.ws and cand[1] >= 1 then
  local c = cand[4]
  if cand.added == 1 and c > 0 then c = c - 1 end
  redis.call('SET', candidate_key,
    string.format('%d,%d,%d,%d,%d,0', cand[1] - 1, cand[2], cand[3], c, cand[5]), 'KEEPTTL')
end

if not rec[1] or ws ~= window_start or failures < 1 then
  return 0
end
redis.call('HSET', KEYS[1], 'f', string.format('%d', failures - 1))
if allowed == 1 and consecutive > 0 then
  redis.call('HSET', KEYS[1], 'c', string.format('%d', consecutive - 1))
end
return 1
