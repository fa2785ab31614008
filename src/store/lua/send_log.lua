-- send_log.lua: one request on a mail flow's send log (password_reset, verification_resend;
-- docs/flows.md), atomically on Redis TIME. src/throttle/send_log.rs is the same rules
-- in Rust, and the store conformance tests hold the two together.
--
-- contract: KEYS log, attempt?, candidate? | ARGV op, min_interval_ms, daily_cap, cap_window_ms, attempt_ttl_ms, binding, candidate | REPLY allowed, sends, next_in_ms, replays, shadow
-- KEYS[1]  send log   portcullis:v2:{<digest>}:f:pr (or :f:vr)
--                     string: send times in ms, newest first, comma-separated, at most
--                     50, all within the cap window of the newest
-- KEYS[2]  optional   portcullis:v2:{<digest>}:fa:<16 hex>, the request's attempt_id:
--                     "<allowed>:0:<replays>:<binding>" of its first call (the
--                     format of record_attempt.lua's answers, with no window)
-- then, when ARGV[7] names a candidate (the last key):
--                     portcullis:v2:{<digest>}:f:pr:s (or :f:vr:s), the account's send
--                     log under the realm's candidate policy (docs/throttle.md, "Trying
--                     a policy in shadow"): the same format and bounds as KEYS[1]
-- ARGV[1]  op              'send' | 'peek' (read only) | 'shadow' (the candidate's log
--                          alone, for a request the enforced network budget refused
--                          and the candidate's took: KEYS[1] and the attempt id are
--                          neither read nor written; returns {0, 0, 0, 0, shadow})
-- ARGV[2]  min_interval_ms least time between two sends (>= 1000)
-- ARGV[3]  daily_cap       most sends in the cap window (1-50)
-- ARGV[4]  cap_window_ms   the cap window (86400000)
-- ARGV[5]  attempt_ttl_ms  how long an attempt_id's answer is kept (>= 1000)
-- ARGV[6]  binding         the attempt_id's request binding (16 hex; '' none): a replay
--                          whose binding differs is answered {-1}, noting nothing
-- ARGV[7]  candidate       '' none, else the candidate's 'min_interval_ms,daily_cap'
--                          (ranges as ARGV[2] and ARGV[3]); only with op 'send' or
--                          'shadow' (which needs it)
--
-- Returns {allowed (1|0), sends in the window after the call, ms until a send would be
-- allowed, replays, shadow}. A send is allowed when the newest send is at least
-- min_interval_ms old (a newest send later than now, from a clock that went back,
-- refuses) and fewer than daily_cap sends are in the window; an allowed send goes first
-- and the key expires a cap window after it. A refused send writes nothing. A replayed
-- attempt_id answers its first call's allowed, notes nothing and counts its replays.
-- shadow is what the candidate answered for a send that was no replay (1 allowed, 0
-- refused), by the same rules on its own log, which a send it allows is noted in
-- whatever the enforced answer; -1: no candidate, or a replay. The candidate's log is
-- read and checked before anything is written: a corrupt one fails the call with
-- nothing noted (the daemon denies).
--
-- Worked example (60000, 5, 86400000, 300000), store time T, no key:
--   send at T        -> "T", PTTL 86400000, returns {1, 1, 60000, 0, -1}
--   send at T+1s     -> refused, returns {0, 1, 59000, 0, -1}
--   send at T+60s    -> "T+60000,T", returns {1, 2, 60000, 0, -1}
--   (five sent by T+4min) send at T+1h -> refused, returns {0, 5, 82800000, 0, -1}
-- With candidate '120000,5': the send at T+60s returns {1, 2, 60000, 0, 0} and leaves the
-- candidate's log "T".

local op = ARGV[1]
local min_interval = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local cap_window = tonumber(ARGV[4])
local attempt_ttl = tonumber(ARGV[5])
local binding = ARGV[6] or ''
local candidate = ARGV[7] or ''
assert(op == 'send' or op == 'peek' or op == 'shadow', 'op must be send, peek or shadow')
assert(op ~= 'shadow' or candidate ~= '', 'shadow needs a candidate')
assert(min_interval and min_interval >= 1000 and min_interval % 1 == 0, 'min_interval_ms must be >= 1000')
assert(cap and cap >= 1 and cap <= 50 and cap % 1 == 0, 'daily_cap must be in 1..50')
assert(cap_window and cap_window >= 1000 and cap_window % 1 == 0, 'cap_window_ms must be >= 1000')
assert(attempt_ttl and attempt_ttl >= 1000, 'attempt_ttl_ms must be >= 1000')
assert(binding == '' or (#binding == 16 and not string.find(binding, '[^0-9a-f]')),
  'binding must be 16 hex digits or empty')
local cand = nil
if candidate ~= '' then
  assert(op ~= 'peek', 'a candidate only with op send or shadow')
  local v = counts_of(candidate, 2)
  cand = {min_interval = v[1], cap = v[2]}
  assert(cand.min_interval >= 1000, 'candidate min_interval_ms must be >= 1000')
  assert(cand.cap >= 1 and cand.cap <= 50, 'candidate daily_cap must be in 1..50')
end
local optional = #KEYS - 1
if cand then optional = optional - 1 end
assert(optional == 0 or optional == 1, 'send takes the log, an attempt id and a candidate log')
local attempt_key, candidate_key = nil, nil
if optional == 1 then attempt_key = KEYS[2] end
assert(op ~= 'shadow' or not attempt_key, 'shadow takes no attempt id')
if cand then candidate_key = KEYS[#KEYS] end

if attempt_key and op == 'send' then
  local seen = redis.call('GET', attempt_key)
  if seen then
    local allowed, replays, bound = string.match(seen, '^([01]):0:(%d+):?([0-9a-f]*)$')
    if not allowed then error('corrupt attempt record') end
    replays = stored(replays, MAX_COUNT, 'attempt record') + 1
    if bound ~= '' and bound ~= binding then
      return {-1}
    end
    redis.call('SET', attempt_key, allowed .. ':0:' .. string.format('%d', replays) .. ':' .. bound,
      'KEEPTTL')
    return {tonumber(allowed), 0, 0, replays, -1}
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A log, read strictly (send_log::parse): anything else is a corrupt one (role).
local function read_log(key, role)
  local log = {}
  local held = redis.call('GET', key)
  if held then
    -- An empty log is never written (an allowed send writes its own time).
    if held == '' or string.find(held, '[^0-9,]') or string.find(held, ',,', 1, true)
        or string.sub(held, -1) == ',' or string.sub(held, 1, 1) == ',' then
      error('corrupt ' .. role)
    end
    for part in string.gmatch(held, '[^,]+') do
      if #part > 15 or #log >= 50 then error('corrupt ' .. role) end
      local at = stored(part, MAX_TIME_MS, role)
      if #log > 0 and at > log[#log] then error('corrupt ' .. role) end
      log[#log + 1] = at
    end
  end
  return log
end
local log = {}
if op ~= 'shadow' then log = read_log(KEYS[1], 'send log') end
-- The candidate's, before anything is written.
local cand_log = nil
if candidate_key then cand_log = read_log(candidate_key, 'candidate send log') end

-- The sends of a log still inside the cap window (send_log::live).
local function live_of(l)
  local out = {}
  for i = 1, #l do
    if l[i] + cap_window > now then out[#out + 1] = l[i] end
  end
  return out
end

-- Ms until a send would be allowed on l under interval and c (send_log::next_in_ms).
local function next_in(l, interval, c)
  local wait = 0
  if #l > 0 then wait = math.max(0, l[1] + interval - now) end
  if #l >= c then wait = math.max(wait, l[c] + cap_window - now, 1) end
  return wait
end

-- Notes a send at now first in l, keeping at most c, and writes it to key.
local function note(key, l, c)
  table.insert(l, 1, now)
  while #l > c do table.remove(l) end
  local out = {}
  for i = 1, #l do out[i] = string.format('%d', l[i]) end
  redis.call('SET', key, table.concat(out, ','), 'PX', cap_window)
end

local shadow = -1
if cand_log then
  local cand_live = live_of(cand_log)
  shadow = 0
  if next_in(cand_live, cand.min_interval, cand.cap) == 0 then
    shadow = 1
    note(candidate_key, cand_live, cand.cap)
  end
end
if op == 'shadow' then return {0, 0, 0, 0, shadow} end

local live = live_of(log)
local allowed = 0
if next_in(live, min_interval, cap) == 0 then allowed = 1 end
if op == 'send' and allowed == 1 then note(KEYS[1], live, cap) end
if op == 'send' and attempt_key then
  redis.call('SET', attempt_key, allowed .. ':0:0:' .. binding, 'PX', attempt_ttl)
end
return {allowed, #live, next_in(live, min_interval, cap), 0, shadow}
