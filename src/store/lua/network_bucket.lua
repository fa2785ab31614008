-- network_bucket.lua: one operation on a client network's token bucket (docs/throttle.md,
-- "Per client network"; src/throttle/network_bucket.rs is the same rules in Rust, and the store
-- conformance tests hold the two together). GCRA: the key holds one number, the
-- bucket's theoretical arrival time (TAT, ms of Redis TIME); absent or past, the bucket
-- is full. The key expires at its TAT, when the bucket is full again, so a flood of
-- made-up client keys costs memory only while their buckets refill.
--
-- With the realm's candidate policy (ARGV[4]; docs/throttle.md, "Trying a policy in
-- shadow") the same operation runs again on the network's candidate bucket, in this
-- call: what it does there never changes the reply's first three values.
--
-- contract: KEYS bucket, held?, shadow?, shadow_held? | ARGV op, capacity, interval_ms, candidate | REPLY taken, tokens, full_in_ms, shadow
-- KEYS[1]  portcullis:v2:{n:<32 hex>}   (string: TAT ms) — its own hash tag, one slot
-- KEYS[2]  optional: portcullis:v2:{n:<32 hex>}:h:<account digest> (string: count), the
--          tokens RecordAttempts of one account hold. A take that takes one adds it;
--          a give gives one back only when the count holds one, and takes it off, so
--          ClearAttempts gives back only what an attempt took. Same hash tag as KEYS[1].
-- then, with a candidate (ARGV[4] not ''), the last one or two keys:
--          <KEYS[1]>:s   the network's bucket under the candidate (string: TAT ms)
--          <KEYS[2]>:s   with a held count: "<t>,<r>", the candidate's tokens the
--                        account's RecordAttempts hold, and how many of its attempts
--                        the enforced bucket took and the candidate's refused, not
--                        yet given back (a give meets those first: it answers
--                        shadow 1, the caller's cue that a verified password was one
--                        the candidate would have refused)
-- ARGV[1]  op           'take' | 'give' (one token back) | 'give_took' / 'give_refused'
--                       (with a held count: one token back for the attempt just
--                       taken, whose candidate bucket took a token / refused: the
--                       candidate's part gives back that token / forgets that
--                       refusal, not another attempt's) | 'give_shadow' (one token back
--                       to the candidate's bucket only, without a held count: the
--                       enforced bucket took none) | 'peek' (read only) | 'release'
--                       (empty the debt: the bucket is full; the candidate's too)
-- ARGV[2]  capacity     tokens a full bucket holds (1-1000000)
-- ARGV[3]  interval_ms  ms for one token to come back (>= 1)
-- ARGV[4]  candidate    the candidate's bucket: '<capacity>,<interval_ms>'; '' none
--
-- Returns {taken (1|0), tokens left after the operation, ms until full, shadow}: shadow
-- is -1 without a candidate; for a take, 1 when the candidate's bucket took a token
-- and 0 when it had none; for a give with a held count, 1 when it met an attempt the
-- candidate refused, else 0; 0 for every other operation.
--
-- Worked example (capacity 2, interval 1000, store time T, no key, no candidate):
--   take -> TAT T+1000, PTTL 1000, returns {1, 1, 1000, -1}
--   take -> TAT T+2000, returns {1, 0, 2000, -1}
--   take -> refused, nothing written, returns {0, 0, 2000, -1}
--   give -> TAT T+1000, returns {0, 1, 1000, -1}
-- With candidate '1,1000' and a held count, from no keys: take -> {1, 1, 1000, 1} (the
-- candidate's held "1,0"); take -> {1, 0, 2000, 0} (held "1,1"); give -> {0, 1, 1000, 1}
-- (held "1,0"); give -> {0, 2, 0, 0} (both buckets full, both held keys gone).

local op = ARGV[1]
local capacity = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
local own = op == 'give_took' or op == 'give_refused'
assert(op == 'take' or op == 'give' or own or op == 'give_shadow' or op == 'peek'
  or op == 'release', 'op must be take, give, give_took, give_refused, give_shadow, peek or release')
assert(capacity and capacity >= 1 and capacity <= 1000000 and capacity % 1 == 0,
  'capacity must be in 1..1000000')
assert(interval and interval >= 1 and interval % 1 == 0, 'interval_ms must be >= 1')

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The keys: the held count is KEYS[2] when there are two keys without a candidate, or
-- four with one; the candidate's keys come last.
local hold, shadow_key, shadow_hold
if ARGV[4] ~= '' then
  if #KEYS == 4 then
    hold, shadow_key, shadow_hold = KEYS[2], KEYS[3], KEYS[4]
  else
    assert(#KEYS == 2, 'a candidate needs its bucket key')
    shadow_key = KEYS[2]
  end
else
  hold = KEYS[2]
end
assert(op ~= 'give_shadow' or (shadow_key and not hold), 'give_shadow needs a candidate, no held count')
assert(not own or hold, 'give_took and give_refused need a held count')

-- A bucket's TAT (now when absent or past).
local function tat_of(key)
  local held = redis.call('GET', key)
  if held then return math.max(stored(held, MAX_TIME_MS, 'network bucket'), now) end
  return now
end

-- One bucket's operation: its new TAT and whether a take took a token.
local function step(op, tat, cap, int)
  if op == 'take' then
    if tat + int - now <= cap * int then return tat + int, 1 end
    return tat, 0
  elseif op == 'give' then
    return math.max(tat - int, now), 0
  elseif op == 'release' then
    return now, 0
  end
  return tat, 0
end

local function write(key, tat)
  if tat > now then
    redis.call('SET', key, string.format('%d', tat), 'PX', tat - now)
  else
    redis.call('DEL', key)
  end
end

-- The candidate's part is read (and checked) before anything is written: a corrupt
-- candidate key fails the call with nothing changed.
local ccap, cint, ctat, ct, cr
if shadow_key then
  local c, i = string.match(ARGV[4], '^(%d+),(%d+)$')
  ccap, cint = tonumber(c), tonumber(i)
  assert(ccap and ccap >= 1 and ccap <= 1000000 and cint and cint >= 1,
    'candidate must be capacity,interval_ms')
  ctat = tat_of(shadow_key)
  ct, cr = 0, 0
  if shadow_hold then
    local held = redis.call('GET', shadow_hold)
    if held then
      local a, b = string.match(held, '^(%d+),(%d+)$')
      if not a then error('corrupt candidate held count') end
      ct, cr = stored(a, MAX_COUNT, 'candidate held count'), stored(b, MAX_COUNT, 'candidate held count')
    end
  end
end

local tat = tat_of(KEYS[1])
local holds = 0
if hold then
  holds = tonumber(redis.call('GET', hold) or '0')
  assert(holds and holds >= 0 and holds % 1 == 0, 'held count must be a whole number')
end

local eop = op
if own then eop = 'give' end
if eop == 'give' and hold and holds == 0 then
  -- Nothing held for this account: nothing to give back, nothing written.
  eop = 'peek'
elseif op == 'give_shadow' then
  eop = 'peek'
end
local taken
tat, taken = step(eop, tat, capacity, interval)
if eop ~= 'peek' and (taken == 1 or eop ~= 'take') then
  write(KEYS[1], tat)
end
if hold and (taken == 1 or eop == 'give') then
  holds = holds + (taken == 1 and 1 or -1)
  if holds > 0 and tat > now then
    redis.call('SET', hold, string.format('%d', holds), 'PX', tat - now)
  else
    redis.call('DEL', hold)
  end
end

local shadow = -1
if shadow_key then
  shadow = 0
  local cop = op
  if op == 'give_shadow' then
    cop = 'give'
  elseif own and shadow_hold then
    -- This attempt's own part: its candidate token back, or its refusal forgotten.
    cop = 'peek'
    if op == 'give_took' and ct > 0 then
      ct, cop = ct - 1, 'give'
    elseif op == 'give_refused' and cr > 0 then
      cr = cr - 1
    end
  elseif op == 'give' and shadow_hold then
    -- A verified password's give meets an attempt the candidate refused first
    -- (nothing to give back to the candidate for it), else one of its held tokens.
    if cr > 0 then
      cr, shadow, cop = cr - 1, 1, 'peek'
    elseif ct > 0 then
      ct = ct - 1
    else
      cop = 'peek'
    end
  end
  local ctaken
  ctat, ctaken = step(cop, ctat, ccap, cint)
  if cop ~= 'peek' and (ctaken == 1 or cop ~= 'take') then
    write(shadow_key, ctat)
  end
  if op == 'take' then
    shadow = ctaken
    if shadow_hold and ctaken == 1 then
      ct = ct + 1
    elseif shadow_hold and taken == 1 then
      cr = cr + 1
    end
  end
  if shadow_hold and (op == 'take' or op == 'give' or own) then
    -- Kept while either bucket owes: the later of the two TATs.
    local until_ms = math.max(tat, ctat)
    if (ct > 0 or cr > 0) and until_ms > now then
      redis.call('SET', shadow_hold, string.format('%d,%d', ct, cr), 'PX', until_ms - now)
    else
      redis.call('DEL', shadow_hold)
    end
  end
end

local burst = capacity * interval
local tokens = math.max(0, math.min(math.floor((burst - (tat - now)) / interval), capacity))
return {taken, tokens, tat - now, shadow}
