-- read.lua: a realm's tally over each look-back, for Admin/RealmStatus (docs/observability.md,
-- "A realm's status"; note.lua writes it, src/throttle/realm_tally.rs is the same slot
-- arithmetic in Rust). Reads, never writes.
--
-- contract: KEYS labels, slots* | ARGV locked_slots, ceiling_slots, networks_slots, spray_slots, grace_slots, count_slots | REPLY now_ms, locked, ceiling, networks, spray, grace, challenges, confirmed, refused_2f, refused_rc, refused_pr, refused_vr
-- KEYS       as note.lua: labels, then six keys per slot (counters, then each distinct
--            tally's HyperLogLog)
-- ARGV[1]  locked_slots      look-back of each distinct tally, in minutes (1-60): the
-- ARGV[2]  ceiling_slots     current minute and the ones before it
-- ARGV[3]  networks_slots
-- ARGV[4]  spray_slots
-- ARGV[5]  grace_slots
-- ARGV[6]  count_slots       look-back of every counter, in minutes (1-60)
--
-- Returns {now_ms, then each distinct tally's estimate (PFCOUNT of the union of its
-- slots in the look-back: HyperLogLog, standard error 0.81%), then each counter's sum}.
-- A slot counts while it holds one of the look-back's minutes (labels); the work is
-- bounded whatever was noted: one HGETALL of at most 60 fields, five PFCOUNTs of at most
-- 60 keys, at most 60 HMGETs of six fields.
--
-- Worked example, after note.lua's first call in minute m, read at minute m + 5 with
-- ARGV 15, 60, 15, 60, 60, 60:
--   -> {T, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}
-- and at minute m + 15 the locked tally's 15 minutes no longer reach minute m: 0.

local SLOTS, PER_SLOT = 60, 6
local COUNTERS = {'challenges', 'confirmed', 'refused_2f', 'refused_rc', 'refused_pr', 'refused_vr'}
assert(#KEYS == 1 + SLOTS * PER_SLOT, 'realm_tally read: wrong number of keys')
local look = {}
for i = 1, PER_SLOT do
  local k = tonumber(ARGV[i])
  assert(k and k >= 1 and k <= SLOTS and k % 1 == 0, 'a look-back must be 1-60 minutes')
  look[i] = k
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local minute = math.floor(now / 60000)

local held = {}
local labels = redis.call('HGETALL', KEYS[1])
for i = 1, #labels, 2 do
  local slot = stored(labels[i], SLOTS - 1, 'tally labels')
  held[slot] = stored(labels[i + 1], MAX_TIME_MS, 'tally labels')
end
local function live(slot, k)
  local m = held[slot]
  return m ~= nil and m <= minute and minute - m < k
end

local reply = {now}
for d = 1, PER_SLOT - 1 do
  local keys = {}
  for slot = 0, SLOTS - 1 do
    if live(slot, look[d]) then keys[#keys + 1] = KEYS[1 + slot * PER_SLOT + 1 + d] end
  end
  if #keys > 0 then
    reply[#reply + 1] = redis.call('PFCOUNT', unpack(keys))
  else
    reply[#reply + 1] = 0
  end
end
local sums = {0, 0, 0, 0, 0, 0}
for slot = 0, SLOTS - 1 do
  if live(slot, look[PER_SLOT]) then
    local values = redis.call('HMGET', KEYS[1 + slot * PER_SLOT + 1], unpack(COUNTERS))
    for i = 1, #COUNTERS do
      if values[i] then sums[i] = sums[i] + stored(values[i], MAX_COUNT, 'tally count') end
    end
  end
end
for i = 1, #COUNTERS do reply[#reply + 1] = sums[i] end
return reply
