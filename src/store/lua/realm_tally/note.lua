-- note.lua: add one daemon's notes to a realm's tally, in the current minute's slot
-- (docs/observability.md, "A realm's status"; src/throttle/realm_tally.rs is the same
-- slot arithmetic in Rust, and the store conformance tests hold the two together).
--
-- contract: KEYS labels, slots* | ARGV counts, locked, ceiling, networks, spray, grace, ttl_ms | REPLY noted
-- KEYS[1]    portcullis:v2:{t:<realm tag>}:labels        hash: slot -> the minute it holds
-- KEYS[2..]  for each slot s = 0..59, in order, six keys:
--            portcullis:v2:{t:<realm tag>}:c:<s>          hash: counter -> notes in the minute
--            portcullis:v2:{t:<realm tag>}:<tally>:<s>    HyperLogLog of each distinct tally:
--                                                          locked, ceiling, networks, spray, grace
-- ARGV[1]  counts     six whole numbers 'n,n,n,n,n,n' to add: challenges, confirmed,
--                     refused_2f, refused_rc, refused_pr, refused_vr
-- ARGV[2]  locked     members noted in each distinct tally: lowercase hex digests (4-32
-- ARGV[3]  ceiling    digits; keyed digests, never an identifier or an address) joined
-- ARGV[4]  networks   by ','; '' for none
-- ARGV[5]  spray
-- ARGV[6]  grace
-- ARGV[7]  ttl_ms     how long a slot's keys live after its last note (>= 60000; the
--                     daemon sends 3660000: the hour, and one minute more)
--
-- Returns how many members and counts were noted.
--
-- The minute m = floor(TIME / 60000) lives in slot m % 60. The first note of a minute
-- finds its slot holding an older minute (or nothing): the slot's six keys are emptied
-- and labels[slot] = m. A slot is only ever read while it holds one of the last 60
-- minutes (read.lua), so one that no note reached for an hour counts nothing, whether
-- or not its keys have expired yet.
--
-- Worked example, store time T in minute m = 29000000 (slot 20):
--   counts '1,0,0,0,0,0', locked 'a1b2c3d4e5f60718'
--     -> labels {20 = 29000000}; c:20 {challenges = 1}; PFADD locked:20 a1b2…; returns 2
--   an hour later (minute m + 60, slot 20 again), counts '0,1,0,0,0,0'
--     -> c:20 and locked:20 emptied first; c:20 {confirmed = 1}; returns 1
--
-- Time comes from Redis TIME, never from a daemon: replicas' clocks disagree.

local SLOTS, PER_SLOT = 60, 6
local COUNTERS = {'challenges', 'confirmed', 'refused_2f', 'refused_rc', 'refused_pr', 'refused_vr'}
assert(#KEYS == 1 + SLOTS * PER_SLOT, 'realm_tally note: wrong number of keys')
local ttl = tonumber(ARGV[7])
assert(ttl and ttl >= 60000, 'ttl_ms must be >= 60000')
local counts = counts_of(ARGV[1], #COUNTERS)
local members = {}
for d = 1, PER_SLOT - 1 do
  local list = {}
  for m in string.gmatch(ARGV[1 + d], '[^,]+') do
    assert(#m >= 4 and #m <= 32 and not string.find(m, '[^0-9a-f]'),
      'a member must be 4-32 lowercase hex digits')
    list[#list + 1] = m
  end
  members[d] = list
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)
local slot = minute % SLOTS
-- KEYS[base + 1] is the slot's counters, KEYS[base + 1 + d] its d-th distinct tally.
local base = 1 + slot * PER_SLOT
local label = string.format('%d', minute)
-- The labels a daemon writes are 60 slots (0-59) naming their minute: any other field
-- or value (edited in by hand) is dropped here, so the next read answers again.
local labels = redis.call('HGETALL', KEYS[1])
for i = 1, #labels, 2 do
  local s, m = tonumber(labels[i]), tonumber(labels[i + 1])
  local fine = s and m and s % 1 == 0 and s >= 0 and s < SLOTS and tostring(s) == labels[i]
    and m % 1 == 0 and m >= 0 and m <= MAX_TIME_MS
  if not fine then redis.call('HDEL', KEYS[1], labels[i]) end
end
if redis.call('HGET', KEYS[1], tostring(slot)) ~= label then
  for i = 1, PER_SLOT do redis.call('DEL', KEYS[base + i]) end
  redis.call('HSET', KEYS[1], tostring(slot), label)
end
redis.call('PEXPIRE', KEYS[1], ttl)

local noted = 0
for i = 1, #COUNTERS do
  if counts[i] > 0 then
    redis.call('HINCRBY', KEYS[base + 1], COUNTERS[i], string.format('%d', counts[i]))
    redis.call('PEXPIRE', KEYS[base + 1], ttl)
    noted = noted + counts[i]
  end
end
for d = 1, PER_SLOT - 1 do
  local list = members[d]
  if #list > 0 then
    local key = KEYS[base + 1 + d]
    -- In steps, within Lua's limit on unpacked arguments.
    for i = 1, #list, 500 do
      redis.call('PFADD', key, unpack(list, i, math.min(i + 499, #list)))
    end
    redis.call('PEXPIRE', key, ttl)
    noted = noted + #list
  end
end
return noted
