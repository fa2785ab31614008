-- candidate_report.lua: add to, or read, one candidate policy's report in one realm
-- (docs/throttle.md, "Trying a policy in shadow"; src/throttle/candidate_report.rs names
-- what is counted). One key, its own hash tag; no identifier, only counts. One call
-- adds to, or reads, one defence's line of the report.
--
-- contract: KEYS report | ARGV op, defence, counts, ttl_ms | REPLY since_ms, would_refuse, would_allow, user_locked_out, step_up_added, step_up_dropped
-- KEYS[1]  portcullis:v2:{c:<16 hex>}   hash: since, and a count per defence and outcome
--          (the login's fields unprefixed, `would_refuse`; another defence's prefixed
--          by its name, `network.would_refuse`)
-- ARGV[1]  op        'add' | 'read' (read only)
-- ARGV[2]  defence   'login' | 'network' | a flow's name ('second_factor', ...)
-- ARGV[3]  counts    five whole numbers 'n,n,n,n,n' to add ('add'; '' for 'read'), in the
--                    order of the reply's counts
-- ARGV[4]  ttl_ms    how long the report is kept after an 'add' (>= 1000)
--
-- Returns {since_ms, the defence's five counts} after the call; since_ms is when the
-- report was first written (Redis TIME), 0 when it never was.
--
-- Worked example, store time T:
--   read  login                  -> {0, 0, 0, 0, 0, 0}
--   add   login '2,0,1,0,0'      -> since = T; returns {T, 2, 0, 1, 0, 0}
--   add   network '1,1,0,0,0'    -> returns {T, 1, 1, 0, 0, 0}
--   read  login                  -> {T, 2, 0, 1, 0, 0}

local DEFENCES = {login = '', network = 'network.', second_factor = 'second_factor.',
  recovery_code = 'recovery_code.', password_reset = 'password_reset.',
  verification_resend = 'verification_resend.'}
local op = ARGV[1]
assert(op == 'add' or op == 'read', 'op must be add or read')
local prefix = DEFENCES[ARGV[2]]
assert(prefix, 'defence must be login, network or a flow')
local FIELDS = {}
for i, name in ipairs({'would_refuse', 'would_allow', 'user_locked_out', 'step_up_added',
    'step_up_dropped'}) do
  FIELDS[i] = prefix .. name
end
local ttl = tonumber(ARGV[4])
assert(ttl and ttl >= 1000, 'ttl_ms must be >= 1000')
if op == 'add' then
  local counts = counts_of(ARGV[3], #FIELDS)
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
