-- spray.lua: note one account key under one password fingerprint, and count
-- (docs/spray.md). All keys share the fingerprint's hash tag, so the script runs on
-- one node; they hold no identifier, password or account key, only HyperLogLog
-- registers (PFADD hashes each element) and two period numbers.
--
-- KEYS[1]  portcullis:v1:{spray:<realm tag>:<fp>}:attempted:0   HLL, even periods
-- KEYS[2]  portcullis:v1:{spray:<realm tag>:<fp>}:attempted:1   HLL, odd periods
-- KEYS[3]  portcullis:v1:{spray:<realm tag>:<fp>}:matched:0     HLL, even periods
-- KEYS[4]  portcullis:v1:{spray:<realm tag>:<fp>}:matched:1     HLL, odd periods
-- KEYS[5]  portcullis:v1:{spray:<realm tag>:<fp>}:periods       hash: parity -> period
-- ARGV[1]  note        'attempt' | 'match'
-- ARGV[2]  member      the account key's digest (64 hex)
-- ARGV[3]  period_ms   (>= 1000)
--
-- Returns, for 'attempt': the distinct account keys attempted and not matched in the
-- current period and the previous one, |attempted| - |matched| (never below 0); for
-- 'match': 0.
--
-- Period p = floor(TIME / period_ms) lives in the keys of parity p % 2. The first
-- note of a new period finds the parity holding p - 2 (or nothing), empties it and
-- records p; the other parity counts only if it holds p - 1. Every key expires two
-- periods after its last note.
--
-- Worked example (period 3600000, store time T in period p, p even):
--   attempt for account a -> PFADD attempted:0 a; periods {0 = p}; returns 1
--   attempt for account b -> returns 2; match for b -> PFADD matched:0 b
--   attempt for account c -> returns 3 - 1 = 2

local note = ARGV[1]
local member = ARGV[2]
local period = tonumber(ARGV[3])
assert(note == 'attempt' or note == 'match', 'note must be attempt or match')
assert(member and #member > 0, 'member must not be empty')
assert(period and period >= 1000, 'period_ms must be >= 1000')

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = math.floor(now / period)
local cur = p % 2
local prev = 1 - cur

local held = redis.call('HMGET', KEYS[5], string.format('%d', cur), string.format('%d', prev))
if held[1] ~= string.format('%d', p) then
  redis.call('DEL', KEYS[1 + cur], KEYS[3 + cur])
  redis.call('HSET', KEYS[5], string.format('%d', cur), string.format('%d', p))
end

local target = KEYS[1 + cur]
if note == 'match' then target = KEYS[3 + cur] end
redis.call('PFADD', target, member)
redis.call('PEXPIRE', target, 2 * period)
redis.call('PEXPIRE', KEYS[5], 2 * period)
if note == 'match' then return 0 end

local attempted, matched
if held[2] == string.format('%d', p - 1) then
  attempted = redis.call('PFCOUNT', KEYS[1], KEYS[2])
  matched = redis.call('PFCOUNT', KEYS[3], KEYS[4])
else
  attempted = redis.call('PFCOUNT', KEYS[1 + cur])
  matched = redis.call('PFCOUNT', KEYS[3 + cur])
end
return math.max(attempted - matched, 0)
