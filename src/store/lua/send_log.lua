-- send_log.lua: one request on a mail flow's send log (password_reset, verification_resend;
-- docs/flows.md), atomically on Redis TIME. src/throttle/send_log.rs is the same rules
-- in Rust, and the store conformance tests hold the two together.
--
-- contract: KEYS log, attempt? | ARGV op, min_interval_ms, daily_cap, cap_window_ms, attempt_ttl_ms, binding | REPLY allowed, sends, next_in_ms, replays
-- KEYS[1]  send log   portcullis:v2:{<digest>}:f:pr (or :f:vr)
--                     string: send times in ms, newest first, comma-separated, at most
--                     50, all within the cap window of the newest
-- KEYS[2]  optional   portcullis:v2:{<digest>}:fa:<16 hex>, the request's attempt_id:
--                     "<allowed>:0:<replays>:<binding>" of its first call (the
--                     format of record_attempt.lua's answers, with no window)
-- ARGV[1]  op              'send' | 'peek' (read only)
-- ARGV[2]  min_interval_ms least time between two sends (>= 1000)
-- ARGV[3]  daily_cap       most sends in the cap window (1-50)
-- ARGV[4]  cap_window_ms   the cap window (86400000)
-- ARGV[5]  attempt_ttl_ms  how long an attempt_id's answer is kept (>= 1000)
-- ARGV[6]  binding         the attempt_id's request binding (16 hex; '' none): a replay
--                          whose binding differs is answered {-1}, noting nothing
--
-- Returns {allowed (1|0), sends in the window after the call, ms until a send would be
-- allowed, replays}. A send is allowed when the newest send is at least min_interval_ms
-- old (a newest send later than now, from a clock that went back, refuses) and fewer
-- than daily_cap sends are in the window; an allowed send goes first and the key
-- expires a cap window after it. A refused send writes nothing. A replayed attempt_id
-- answers its first call's allowed, notes nothing and counts its replays.
--
-- Worked example (60000, 5, 86400000, 300000), store time T, no key:
--   send at T        -> "T", PTTL 86400000, returns {1, 1, 60000, 0}
--   send at T+1s     -> refused, returns {0, 1, 59000, 0}
--   send at T+60s    -> "T+60000,T", returns {1, 2, 60000, 0}
--   (five sent by T+4min) send at T+1h -> refused, returns {0, 5, 82800000, 0}

assert(#KEYS == 1 or #KEYS == 2, 'send takes one or two keys')
local op = ARGV[1]
local min_interval = tonumber(ARGV[2])
local cap = tonumber(ARGV[3])
local cap_window = tonumber(ARGV[4])
local attempt_ttl = tonumber(ARGV[5])
local binding = ARGV[6] or ''
assert(op == 'send' or op == 'peek', 'op must be send or peek')
assert(min_interval and min_interval >= 1000 and min_interval % 1 == 0, 'min_interval_ms must be >= 1000')
assert(cap and cap >= 1 and cap <= 50 and cap % 1 == 0, 'daily_cap must be in 1..50')
assert(cap_window and cap_window >= 1000 and cap_window % 1 == 0, 'cap_window_ms must be >= 1000')
assert(attempt_ttl and attempt_ttl >= 1000, 'attempt_ttl_ms must be >= 1000')
assert(binding == '' or (#binding == 16 and not string.find(binding, '[^0-9a-f]')),
  'binding must be 16 hex digits or empty')

if KEYS[2] and op == 'send' then
  local seen = redis.call('GET', KEYS[2])
  if seen then
    local allowed, replays, bound = string.match(seen, '^([01]):0:(%d+):?([0-9a-f]*)$')
    if not allowed then error('corrupt attempt record') end
    replays = stored(replays, MAX_COUNT, 'attempt record') + 1
    if bound ~= '' and bound ~= binding then
      return {-1}
    end
    redis.call('SET', KEYS[2], allowed .. ':0:' .. string.format('%d', replays) .. ':' .. bound,
      'KEEPTTL')
    return {tonumber(allowed), 0, 0, replays}
  end
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The log, read strictly (send_log::parse): anything else is a corrupt send log.
local log = {}
local held = redis.call('GET', KEYS[1])
if held then
  -- An empty log is never written (an allowed send writes its own time).
  if held == '' or string.find(held, '[^0-9,]') or string.find(held, ',,', 1, true)
      or string.sub(held, -1) == ',' or string.sub(held, 1, 1) == ',' then
    error('corrupt send log')
  end
  for part in string.gmatch(held, '[^,]+') do
    if #part > 15 or #log >= 50 then error('corrupt send log') end
    local at = stored(part, MAX_TIME_MS, 'send log')
    if #log > 0 and at > log[#log] then error('corrupt send log') end
    log[#log + 1] = at
  end
end

-- The sends still inside the cap window (send_log::live).
local live = {}
for i = 1, #log do
  if log[i] + cap_window > now then live[#live + 1] = log[i] end
end

-- Ms until a send would be allowed (send_log::next_in_ms).
local function next_in(l)
  local wait = 0
  if #l > 0 then wait = math.max(0, l[1] + min_interval - now) end
  if #l >= cap then wait = math.max(wait, l[cap] + cap_window - now, 1) end
  return wait
end

local allowed = 0
if next_in(live) == 0 then allowed = 1 end
if op == 'send' and allowed == 1 then
  table.insert(live, 1, now)
  while #live > cap do table.remove(live) end
  local out = {}
  for i = 1, #live do out[i] = string.format('%d', live[i]) end
  redis.call('SET', KEYS[1], table.concat(out, ','), 'PX', cap_window)
end
if op == 'send' and KEYS[2] then
  redis.call('SET', KEYS[2], allowed .. ':0:0:' .. binding, 'PX', attempt_ttl)
end
return {allowed, #live, next_in(live), 0}
