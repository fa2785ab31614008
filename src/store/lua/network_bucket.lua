-- network_bucket.lua: one operation on a client network's token bucket (docs/throttle.md,
-- "Per client network"; src/throttle/network_bucket.rs is the same rules in Rust, and the store
-- conformance tests hold the two together). GCRA: the key holds one number, the
-- bucket's theoretical arrival time (TAT, ms of Redis TIME); absent or past, the bucket
-- is full. The key expires at its TAT, when the bucket is full again, so a flood of
-- made-up client keys costs memory only while their buckets refill.
--
-- contract: KEYS bucket, held? | ARGV op, capacity, interval_ms | REPLY taken, tokens, full_in_ms
-- KEYS[1]  portcullis:v2:{n:<32 hex>}   (string: TAT ms) — its own hash tag, one slot
-- KEYS[2]  optional: portcullis:v2:{n:<32 hex>}:h:<account digest> (string: count), the
--          tokens RecordAttempts of one account hold. A take that takes one adds it;
--          a give gives one back only when the count holds one, and takes it off, so
--          ClearAttempts gives back only what an attempt took. Same hash tag as KEYS[1].
-- ARGV[1]  op           'take' | 'give' (one token back) | 'peek' (read only) |
--                       'release' (empty the debt: the bucket is full)
-- ARGV[2]  capacity     tokens a full bucket holds (1-1000000)
-- ARGV[3]  interval_ms  ms for one token to come back (>= 1)
--
-- Returns {taken (1|0), tokens left after the operation, ms until full}.
--
-- Worked example (capacity 2, interval 1000, store time T, no key):
--   take -> TAT T+1000, PTTL 1000, returns {1, 1, 1000}
--   take -> TAT T+2000, returns {1, 0, 2000}
--   take -> refused, nothing written, returns {0, 0, 2000}
--   give -> TAT T+1000, returns {0, 1, 1000}

local op = ARGV[1]
local capacity = tonumber(ARGV[2])
local interval = tonumber(ARGV[3])
assert(op == 'take' or op == 'give' or op == 'peek' or op == 'release',
  'op must be take, give, peek or release')
assert(capacity and capacity >= 1 and capacity <= 1000000 and capacity % 1 == 0,
  'capacity must be in 1..1000000')
assert(interval and interval >= 1 and interval % 1 == 0, 'interval_ms must be >= 1')

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local burst = capacity * interval

local tat = now
local held = redis.call('GET', KEYS[1])
if held then
  tat = math.max(stored(held, MAX_TIME_MS, 'network bucket'), now)
end

local hold = KEYS[2]
local holds = 0
if hold then
  holds = tonumber(redis.call('GET', hold) or '0')
  assert(holds and holds >= 0 and holds % 1 == 0, 'held count must be a whole number')
end

local taken = 0
if op == 'give' and hold and holds == 0 then
  -- Nothing held for this account: nothing to give back, nothing written.
  op = 'peek'
end
if op == 'take' then
  if tat + interval - now <= burst then
    tat = tat + interval
    taken = 1
  end
elseif op == 'give' then
  tat = math.max(tat - interval, now)
elseif op == 'release' then
  tat = now
end

if op ~= 'peek' and (taken == 1 or op ~= 'take') then
  if tat > now then
    redis.call('SET', KEYS[1], string.format('%d', tat), 'PX', tat - now)
  else
    redis.call('DEL', KEYS[1])
  end
end

if hold and (taken == 1 or op == 'give') then
  holds = holds + (taken == 1 and 1 or -1)
  if holds > 0 and tat > now then
    redis.call('SET', hold, string.format('%d', holds), 'PX', tat - now)
  else
    redis.call('DEL', hold)
  end
end

local tokens = math.max(0, math.min(math.floor((burst - (tat - now)) / interval), capacity))
return {taken, tokens, tat - now}
