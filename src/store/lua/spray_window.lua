-- spray_window.lua: count, or note, one password fingerprint's failed comparisons across
-- accounts (docs/spray.md). All keys share the fingerprint's hash tag, so the script
-- runs on one node; they hold no identifier, password or account key, only
-- HyperLogLog registers (PFADD hashes each element) and two period numbers.
--
-- contract: KEYS failed_even, failed_odd, periods | ARGV note, member, period_ms | REPLY count
-- KEYS[1]  portcullis:v2:{spray:<realm tag>:<fp>}:failed:0   HLL, even periods
-- KEYS[2]  portcullis:v2:{spray:<realm tag>:<fp>}:failed:1   HLL, odd periods
-- KEYS[3]  portcullis:v2:{spray:<realm tag>:<fp>}:periods    hash: parity -> period
-- ARGV[1]  note        'check' (read only) | 'failure'
-- ARGV[2]  member      the account key's digest (64 hex); not stored by 'check'
-- ARGV[3]  period_ms   (>= 1000)
--
-- Returns the distinct account keys that failed with the fingerprint in the current
-- period and the previous one (after the note, for 'failure').
--
-- Period p = floor(TIME / period_ms) lives in the keys of parity p % 2. The first
-- failure of a new period finds the parity holding p - 2 (or nothing), empties it and
-- records p; a parity counts only while it holds p or p - 1. Every key expires two
-- periods after its last note. 'check' writes nothing.
--
-- Worked example (period 3600000, store time T in period p, p even):
--   check                 -> returns 0
--   failure for account a -> PFADD failed:0 a; periods {0 = p}; returns 1
--   failure for account b -> returns 2; failure for a again -> returns 2
--   an hour later (p + 1) -> failure for c -> PFADD failed:1 c; returns |{a, b, c}| = 3

local note = ARGV[1]
local member = ARGV[2]
local period = tonumber(ARGV[3])
assert(note == 'check' or note == 'failure', 'note must be check or failure')
assert(member and #member > 0, 'member must not be empty')
assert(period and period >= 1000, 'period_ms must be >= 1000')

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = math.floor(now / period)
local cur = p % 2
local prev = 1 - cur

local held = redis.call('HMGET', KEYS[3], string.format('%d', cur), string.format('%d', prev))
local cur_live = held[1] == string.format('%d', p)
local prev_live = held[2] == string.format('%d', p - 1)

if note == 'failure' then
  if not cur_live then
    redis.call('DEL', KEYS[1 + cur])
    redis.call('HSET', KEYS[3], string.format('%d', cur), string.format('%d', p))
    cur_live = true
  end
  redis.call('PFADD', KEYS[1 + cur], member)
  redis.call('PEXPIRE', KEYS[1 + cur], 2 * period)
  redis.call('PEXPIRE', KEYS[3], 2 * period)
end

if cur_live and prev_live then
  return redis.call('PFCOUNT', KEYS[1], KEYS[2])
elseif cur_live then
  return redis.call('PFCOUNT', KEYS[1 + cur])
elseif prev_live then
  return redis.call('PFCOUNT', KEYS[1 + prev])
end
return 0
