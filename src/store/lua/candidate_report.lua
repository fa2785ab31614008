-- candidate_report.lua: add to, or read, one candidate policy's report in one realm
-- (docs/throttle.md, "Trying a policy in shadow"; src/throttle/candidate_report.rs names
-- what is counted). One key, its own hash tag; no identifier, only counts.
--
-- contract: KEYS report | ARGV op, counts, ttl_ms | REPLY since_ms, would_refuse, would_allow, user_locked_out, step_up_added, step_up_dropped
-- KEYS[1]  portcullis:v2:{c:<16 hex>}   hash: since, and a count per outcome
-- ARGV[1]  op        'add' | 'read' (read only)
-- ARGV[2]  counts    five whole numbers 'n,n,n,n,n' to add ('add'; '' for 'read'), in the
--                    order of the reply's counts
-- ARGV[3]  ttl_ms    how long the report is kept after an 'add' (>= 1000)
--
-- Returns {since_ms, the five counts} after the call; since_ms is when the report was
-- first written (Redis TIME), 0 when it never was.
--
-- Worked example, store time T:
--   read                  -> {0, 0, 0, 0, 0, 0}
--   add '2,0,1,0,0'       -> since = T; returns {T, 2, 0, 1, 0, 0}
--   add '1,1,0,0,0' later -> returns {T, 3, 1, 1, 0, 0}

local FIELDS = {'would_refuse', 'would_allow', 'user_locked_out', 'step_up_added', 'step_up_dropped'}
local op = ARGV[1]
assert(op == 'add' or op == 'read', 'op must be add or read')
local ttl = tonumber(ARGV[3])
assert(ttl and ttl >= 1000, 'ttl_ms must be >= 1000')
if op == 'add' then
  local counts = counts_of(ARGV[2], #FIELDS)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSETNX', KEYS[1], 'since', string.format('%d', now))
  for i = 1, #FIELDS do
    if counts[i] > 0 then
      redis.call('HINCRBY', KEYS[1], FIELDS[i], string.format('%d', counts[i]))
    end
  end
  redis.call('PEXPIRE', KEYS[1], ttl)
end
local held = redis.call('HMGET', KEYS[1], 'since', unpack(FIELDS))
local reply = {}
for i = 1, #held do
  if held[i] then
    local max = MAX_COUNT
    if i == 1 then max = MAX_TIME_MS end
    reply[i] = stored(held[i], max, 'candidate report')
  else
    reply[i] = 0
  end
end
return reply
