-- record_attempt.lua: count one attempt for one account key, atomically
-- (docs/throttle.md, "The rules", steps 1-4, and "How long a record lives";
-- src/throttle/attempt_count.rs::attempt and ::expiry_ms are the same rules in Rust, and the store
-- conformance tests hold the two together).
--
-- contract: KEYS record, device_bucket?, device_epoch?, device_index?, attempt?, repeat_list?, networks?, device_networks?, candidate?, device_candidate? | ARGV max_failures, first_window_ms, max_window_ms, retention_ms, escalate, max_step, device_epoch, epoch_ttl_ms, attempt_ttl_ms, fingerprint, max_consecutive, lockout_ms, binding, network, max_networks, device_tag, max_devices, candidate | REPLY allowed, failures, step, window_start_ms, replays, trusted, repeat, consecutive, epoch, added, shadow, shadow_failures, shadow_window_start_ms, shadow_added
-- KEYS[1]  account record  portcullis:v2:{<digest>}:r          (hash: f, ws, st, c; rp, lu, sa)
-- and only for an attempt that carries a device token (ARGV[7] >= 0):
-- KEYS[2]  device bucket   portcullis:v2:{<digest>}:d:<16 hex>  (hash: f, ws, st, c; rp, lu, sa)
-- KEYS[3]  device epoch    portcullis:v2:{<digest>}:e          (string; absent: 0)
-- KEYS[4]  device index    portcullis:v2:{<digest>}:dx         (sorted set: device tag ->
--                          store time of the latest attempt counted in its bucket)
-- or, for an attempt without a device token that asks for the epoch (ARGV[7] = -2: a
-- step-up realm's Verify, whose challenge carries it):
-- KEYS[2]  device epoch    portcullis:v2:{<digest>}:e
-- then, when the gateway sent an attempt_id:
-- KEYS[2..5]               portcullis:v2:{<digest>}:a:<16 hex>
--                          "<allowed>:<window_start_ms>:<replays>:<binding>" of the
--                          first call (an answer stored before bindings has no
--                          ":<binding>" and answers any request)
-- then, when ARGV[10] names a fingerprint (the last key):
--                          portcullis:v2:{<digest>}:p:<16 hex>   the client's refused
--                          passwords on the counted bucket: "<ws>|,<fp>[*],<fp>[*],"
--                          newest first, '*': already forgiven once without a
--                          comparison (repeat_list.lua writes it, this script marks it;
--                          prelude.lua, repeat_list)
-- then, when ARGV[14] names a network (the last one or two keys):
--                          <KEYS[1]>:n   the account record's window's networks (set of
--                                        integers, ARGV[14])
--                          <KEYS[2]>:n   the device bucket's, with a device token
-- ARGV[1]  max_failures       (1-100)
-- ARGV[2]  first_window_ms
-- ARGV[3]  max_window_ms
-- ARGV[4]  retention_ms       how long a record that must be remembered lives after
--                             its last attempt
-- ARGV[5]  escalate           1: an exhausted window raises the step; 0: 2FA realm
-- ARGV[6]  max_step           step cap, where window(step) reaches max_window
-- ARGV[7]  device_epoch       the epoch the device token was issued under; -1: no token;
--                             -2: no token, answer the account's epoch
-- ARGV[8]  epoch_ttl_ms       an existing device epoch is kept at least this long
--                             (device_token_ttl + clock skew)
-- ARGV[9]  attempt_ttl_ms     how long an attempt_id's answer is kept (the retry horizon,
--                             store.attempt_id_horizon)
-- ARGV[10] fingerprint        the password's repeat fingerprint (4-16 hex); '' none
-- ARGV[11] max_consecutive    the ceiling (1-100): attempts allowed on the record across
--                             windows until it is cleared
-- ARGV[12] lockout_ms         how long a door shut by an attempt stays shut at least,
--                             from that attempt (lockout_duration)
-- ARGV[13] binding            the attempt_id's request binding (16 hex; '' none): a
--                             replay whose binding differs from the first call's is
--                             answered -1 alone (packed) and counts nothing (the
--                             daemon answers INVALID_ARGUMENT naming attempt_id)
-- ARGV[14] network            the client network: the first 15 hex digits of its tag as
--                             a decimal integer (below 2^60; an intset member); '' none:
--                             no set is read or written
-- ARGV[15] max_networks       most tags a window's set holds (1-1000)
-- ARGV[16] device_tag         the device bucket's tag (16 hex) with a device token; ''
-- ARGV[17] max_devices        most devices the index lists (1-1000); the least
--                             recently counted leaves first
-- ARGV[18] candidate          the realm's candidate policy (docs/throttle.md, "Trying a
--                             policy in shadow"), '' for none, else seven whole numbers
--                             'max_failures,first_window_ms,max_window_ms,retention_ms,
--                             max_step,max_consecutive,lockout_ms' (escalate as ARGV[5]);
--                             its record is the last key, portcullis:v2:{<digest>}:s
--                             (a string, prelude.lua's candidate_record: one GET and one
--                             SET ... PX a count); with a device token the last two, the
--                             account's and the device bucket's <KEYS[2]>:s, and the one
--                             of the record the attempt is counted on is used
--
-- Record fields: f failures in the window, ws window start, st step, rp repeats
-- forgiven in the window, c consecutive failures (attempts allowed since the record was
-- last cleared), lu the time before which the door stays shut (absent: none), sa the
-- time of the latest attempt that shut the door (absent: none; written only then). The
-- window lasts until max(ws + window(st), lu) (src/throttle/attempt_count.rs::window_end_ms).
--
-- Why a door is shut (docs/throttle.md; src/throttle/attempt_count.rs::takes_network and
-- ::note_device): the attempt that exhausts its window or brings the record to its
-- ceiling sets sa = now. A counted attempt with a network (not a replay, not a
-- forgiven repeat) adds its tag to the counted record's set, which a restarted window
-- (or a new record) empties first, which takes no tag past max_networks, and which
-- expires when the window ends. An attempt counted in a device's bucket lists the
-- device in the account's index, kept as long as the device epoch (epoch_ttl_ms).
--
-- Returns {allowed (1|0), failures, step, window_start_ms, replays, trusted (1|0),
-- repeat (0|1|2), consecutive, epoch, added (1|0), shadow, shadow_failures,
-- shadow_window_start_ms, shadow_added} as one string of fourteen little-endian 64-bit
-- integers (packed(): one RESP bulk string for the daemon to decode, not an array of
-- fourteen values, each a RESP value of its own); epoch is the account's device epoch
-- as read (0 when it has none, or when it was not read: ARGV[7] = -1); added is 1 when
-- this call added a consecutive failure (a refund gives one back only then); shadow is
-- what the candidate answered when the attempt was counted (1 allowed, 0 refused; -1: no
-- candidate, or not counted: a replay, a forgiven repeat), shadow_failures its
-- window's count after it, shadow_window_start_ms that window's start and shadow_added
-- 1 when it added a consecutive failure to the candidate record (all 0 with -1: what a
-- refund of the attempt gives back there, refund.lua).
-- A repeat (docs/throttle.md, "Repeated passwords"; src/throttle/attempt_count.rs::forgive and
-- src/throttle/repeat_list.rs::RepeatList::claim): the fingerprint is on the client's list
-- for the counted record's current window. It is not counted: allowed while failures <
-- max_failures, the record's repeat count 'rp' goes up. An entry without a mark
-- forgives it (repeat = 1: not compared) and is marked and moved first; a marked entry
-- (already forgiven once) leaves the list as it is and answers repeat = 2: the daemon
-- compares it (a truncated fingerprint may be the right password's), and a failed
-- comparison re-arms the entry (repeat_list.lua). A window that is over, or no record,
-- counts it as any attempt.
-- A device's attempt is counted in its bucket (trusted = 1) only while its token's
-- epoch is the account's epoch; after an operator revoked the account's devices (a
-- higher epoch) it is counted on the account's own record, as any untrusted attempt.
-- An attempt without a device token reads no epoch (RecordAttempt never has one),
-- unless it asks (ARGV[7] = -2); an epoch read is only read here, never extended.
-- replays is 0 for a first call. A replayed attempt_id returns its first answer,
-- counts nothing (failures, step and consecutive are then -1, trusted 0) and bumps its
-- replay count,
-- which Verify uses to bound re-comparisons under one id.
--
-- The ceiling (docs/throttle.md, "The ceiling"): an allowed attempt adds one to c; once
-- c holds max_consecutive no attempt is allowed, whatever the window, until the record
-- is cleared. The attempt that exhausts its window (f reaches max_failures) sets
-- lu = now + lockout_ms, so the door stays shut that long at least.
--
-- How long the counted record lives follows what it holds: at its ceiling it is kept
-- until it is cleared (no expiry), a device's bucket as long as a device token that
-- reaches it may live (epoch_ttl_ms); holding consecutive failures, it is kept for
-- retention_ms after this attempt; holding none (every attempt refused or refunded) at
-- step 0 with its window not exhausted (or in a realm that never escalates), it
-- expires when its window ends.
--
-- Worked example (defaults: 5, 900000, 3600000, 86400000, 1, 2, -1, 7776300000, 300000,
-- '', 100, 900000), store time T, no device, one key:
--   no record          -> record {f=1, ws=T, st=0, c=1}, PTTL 86400000,
--                         returns 1, 1, 0, T, 0, 0, 0, 1, 0, 1, -1, 0, 0, 0
--   5th call at T+1s   -> {f=5, c=5, lu=T+901000, sa=T+1000}: exhausted, the door shut
--                         till T+901s
--   6th call at T+2s   -> {f=6}, returns 0, 6, 0, T, 0, 0, 0, 5, 0, 0, -1, 0, 0, 0
--   call at T+900s     -> still shut (lu): {f=7}, refused
--   call at T+901s     -> window over and exhausted: {f=1, ws=T+901000, st=1, c=6}
--   the 100th allowed  -> {c=100, sa=now}: no expiry, refused from then on until cleared
-- With network '770441458375262483' (ARGV[14]) each counted call above also adds it
-- to KEYS[1]:n (SCARD 1), which expires at the window's end; the call at T+901s
-- empties it first.
-- A device token with epoch 0 while the account's epoch is 1: counted on KEYS[1],
-- trusted 0. With fingerprint 'ab12cd34' and the list "T|,ee55,ab12cd34," at T+3s and
-- {f=4}: not counted, {rp=1}, the list "T|,ab12cd34*,ee55,", returns
-- 1, 4, 0, T, 0, 0, 1, ...; the same again: not counted, {rp=2}, the list unchanged,
-- returns 1, 4, 0, T, 0, 0, 2, ... (compare it).
--
-- Time comes from Redis TIME, never from a daemon: replicas' clocks disagree.
-- A script and not MULTI/EXEC: a key can expire between the commands of a
-- transaction, never in the middle of a script, and the read-modify-write needs
-- the read's result.

-- The reply as one string: each value a little-endian 64-bit integer, written by Redis's
-- struct library (C code: Redis spends about what it spends on an array of integers,
-- where decimal text from Lua cost it a microsecond more a call).
local REPLY = '<i8i8i8i8i8i8i8i8i8i8i8i8i8i8'
local function packed(values)
  return struct.pack(REPLY, unpack(values, 1, 14))
end

local max_failures = tonumber(ARGV[1])
local first_window = tonumber(ARGV[2])
local max_window = tonumber(ARGV[3])
local retention = tonumber(ARGV[4])
local escalate = tonumber(ARGV[5])
local max_step = tonumber(ARGV[6])
local token_epoch = tonumber(ARGV[7])
local epoch_ttl = tonumber(ARGV[8])
local attempt_ttl = tonumber(ARGV[9])
local fingerprint = ARGV[10] or ''
local max_consecutive = tonumber(ARGV[11])
local lockout = tonumber(ARGV[12])
local binding = ARGV[13] or ''
local network = ARGV[14] or ''
local max_networks = tonumber(ARGV[15])
local device_tag = ARGV[16] or ''
local max_devices = tonumber(ARGV[17])
local candidate = ARGV[18] or ''
assert(max_failures and max_failures >= 1, 'max_failures must be >= 1')
assert(first_window and first_window >= 1000, 'first_window_ms must be >= 1000')
assert(max_window and max_window >= first_window, 'max_window_ms must be >= first_window_ms')
assert(retention and retention > max_window, 'retention_ms must be > max_window_ms')
assert(escalate == 0 or escalate == 1, 'escalate must be 0 or 1')
assert(max_step and max_step >= 0 and max_step < 64, 'max_step must be in 0..63')
assert(token_epoch and token_epoch >= -2, 'device_epoch must be a number, -1 or -2')
assert(epoch_ttl and epoch_ttl >= 1000, 'epoch_ttl_ms must be >= 1000')
assert(attempt_ttl and attempt_ttl >= 1000, 'attempt_ttl_ms must be >= 1000')
assert(fingerprint == '' or (#fingerprint >= 4 and #fingerprint <= 16
  and not string.find(fingerprint, '[^0-9a-f]')), 'fingerprint must be 4-16 hex digits or empty')
assert(max_consecutive and max_consecutive >= 1 and max_consecutive <= 100,
  'max_consecutive must be in 1..100')
assert(lockout and lockout >= 1000 and lockout < retention, 'lockout_ms must be in 1000..retention_ms')
assert(binding == '' or (#binding == 16 and not string.find(binding, '[^0-9a-f]')),
  'binding must be 16 hex digits or empty')
-- Kept as text (a Lua number would lose its low bits): digits, no leading zero.
assert(network == '' or (#network <= 19 and not string.find(network, '[^0-9]')
  and not string.find(network, '^0.')), 'network must be an integer below 2^60 or empty')
assert(max_networks and max_networks >= 1 and max_networks <= 1000, 'max_networks must be in 1..1000')
assert(max_devices and max_devices >= 1 and max_devices <= 1000, 'max_devices must be in 1..1000')
-- The candidate's rules, checked as the enforced ones.
local cand = nil
if candidate ~= '' then
  local v = {}
  for n in string.gmatch(candidate, '[^,]+') do v[#v + 1] = tonumber(n) end
  assert(#v == 7, 'candidate must hold seven numbers')
  cand = {max = v[1], first = v[2], max_window = v[3], retention = v[4], max_step = v[5],
    max_c = v[6], lockout = v[7]}
  assert(cand.max and cand.max >= 1 and cand.max <= 100, 'candidate max_failures must be in 1..100')
  assert(cand.first and cand.first >= 1000, 'candidate first_window_ms must be >= 1000')
  assert(cand.max_window and cand.max_window >= cand.first, 'candidate max_window_ms must be >= first_window_ms')
  assert(cand.retention and cand.retention > cand.max_window, 'candidate retention_ms must be > max_window_ms')
  assert(cand.max_step and cand.max_step >= 0 and cand.max_step < 64, 'candidate max_step must be in 0..63')
  assert(cand.max_c and cand.max_c >= 1 and cand.max_c <= 100, 'candidate max_consecutive must be in 1..100')
  assert(cand.lockout and cand.lockout >= 1000 and cand.lockout < cand.retention,
    'candidate lockout_ms must be in 1000..retention_ms')
end
local device = token_epoch >= 0
assert(device == (#device_tag == 16 and not string.find(device_tag, '[^0-9a-f]')),
  'device_tag must be 16 hex digits with a device token, else empty')
-- The keys: the fixed ones, then the optional attempt id, the repeat list and the
-- network sets, in that order.
local fixed = 1
if device then fixed = 4 elseif token_epoch == -2 then fixed = 2 end
local tail = 0
if fingerprint ~= '' then tail = tail + 1 end
if network ~= '' then
  tail = tail + 1
  if device then tail = tail + 1 end
end
if cand then
  tail = tail + 1
  if device then tail = tail + 1 end
end
assert(#KEYS == fixed + tail or #KEYS == fixed + tail + 1, 'record_attempt: wrong number of keys')
local at = fixed + 1
local attempt_key, list_key, networks_key, device_networks_key = nil, nil, nil, nil
-- The candidate records: the account's, and with a device token the device bucket's;
-- the one of the record the attempt is counted on is used.
local candidate_key, device_candidate_key = nil, nil
if cand and device then
  candidate_key, device_candidate_key = KEYS[#KEYS - 1], KEYS[#KEYS]
elseif cand then
  candidate_key = KEYS[#KEYS]
end
if #KEYS == fixed + tail + 1 then attempt_key, at = KEYS[at], at + 1 end
if fingerprint ~= '' then list_key, at = KEYS[at], at + 1 end
if network ~= '' then
  networks_key = KEYS[at]
  if device then device_networks_key = KEYS[at + 1] end
end

-- Where the attempt is counted: a device's bucket only under the account's current
-- device epoch, which is then kept (it must outlive every token issued under it).
local record, trusted, epoch = KEYS[1], 0, 0
if device then
  local held = redis.call('GET', KEYS[3])
  if held then
    epoch = stored(held, MAX_COUNT, 'device epoch')
    redis.call('PEXPIRE', KEYS[3], epoch_ttl)
  end
  if token_epoch == epoch then
    record, trusted = KEYS[2], 1
    networks_key = device_networks_key
  end
elseif token_epoch == -2 then
  local held = redis.call('GET', KEYS[2])
  if held then epoch = stored(held, MAX_COUNT, 'device epoch') end
end

if attempt_key then
  local seen = redis.call('GET', attempt_key)
  if seen then
    local allowed, ws, replays, bound = string.match(seen, '^([01]):(%d+):(%d+):?([0-9a-f]*)$')
    if not allowed then error('corrupt attempt record') end
    ws = stored(ws, MAX_TIME_MS, 'attempt record')
    replays = stored(replays, MAX_COUNT, 'attempt record') + 1
    if bound ~= '' and bound ~= binding then
      return struct.pack('<i8', -1)
    end
    redis.call('SET', attempt_key, allowed .. ':' .. string.format('%d', ws) .. ':'
      .. string.format('%d', replays) .. ':' .. bound, 'KEEPTTL')
    return packed({tonumber(allowed), -1, -1, ws, replays, 0, 0, -1, epoch, 0, -1, 0, 0, 0})
  end
end

-- shadow(key, now, held, listed, enforced): the attempt counted on the candidate's
-- record (held: its fields as read before anything was written, nil for none) under the
-- candidate's rules, as the enforced rules count it below (no repeat list: a listed
-- stale repeat adds no consecutive failure here either). Returns allowed (1|0)
-- and the window's count after it.
local function shadow(key, now, held, listed, enforced)
  local f, ws, st, c, lu = 0, now, 0, 0, 0
  if held then f, ws, st, c, lu = held[1], held[2], held[3], held[4], held[5] end
  local ends = math.max(ws + math.min(cand.first * (2 ^ st), cand.max_window), lu)
  if now >= ends then
    if f >= cand.max and escalate == 1 then st = math.min(st + 1, cand.max_step) end
    f, ws = 0, now
  end
  f = f + 1
  local ok, added_c = 0, 0
  if f <= cand.max and c < cand.max_c then
    ok = 1
    if not listed then c, added_c = c + 1, 1 end
    if f == cand.max then lu = math.max(lu, now + cand.lockout) end
  end
  local lr = 0
  if enforced == 1 and ok == 0 then lr = 1 end
  local text = string.format('%d,%d,%d,%d,%d,%d', f, ws, st, c, lu, lr)
  if c == 0 and st == 0 and (f < cand.max or escalate == 0) then
    redis.call('SET', key, text, 'PX', math.max(ws + cand.first, lu) - now)
  else
    -- At its ceiling too: a candidate record decides nothing, so it is never kept
    -- until cleared, only for the candidate's retention after its last attempt.
    redis.call('SET', key, text, 'PX', cand.retention)
  end
  return ok, f, ws, added_c
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- The candidate's record of the counted record, read and checked before anything is
-- written: a corrupt one fails the call with nothing counted (and a clear deletes it).
if trusted == 1 then candidate_key = device_candidate_key end
local shadow_held = nil
if candidate_key then
  local text = redis.call('GET', candidate_key)
  if text then shadow_held = {candidate_record(text)} end
end

local rec = redis.call('HMGET', record, 'f', 'ws', 'st', 'rp', 'c', 'lu')
local failures, ws, step, repeats, consecutive, locked_until = 0, now, 0, 0, 0, 0
if rec[1] then
  failures = stored(rec[1], MAX_COUNT, 'record')
  ws = stored(rec[2], MAX_TIME_MS, 'record')
  step = stored(rec[3], MAX_STEP, 'record')
  if rec[4] then repeats = stored(rec[4], MAX_COUNT, 'record') end
  if rec[5] then consecutive = stored(rec[5], MAX_COUNT, 'record') end
  if rec[6] then locked_until = stored(rec[6], MAX_TIME_MS, 'record') end
end

local window_end = math.max(ws + math.min(first_window * (2 ^ step), max_window), locked_until)
-- listed: the fingerprint is on the client's list of an earlier window (its window is
-- over): counted in the new window as any attempt, but no consecutive failure (a stale
-- password retried by a phone never reaches the ceiling; it is no new guess).
local listed = false
if rec[1] and list_key then
  local held = redis.call('GET', list_key)
  if held then
    local list_ws, fps, marks = repeat_list(held)
    local at = nil
    for i = 1, #fps do
      if fps[i] == fingerprint then at = i break end
    end
    if at and (list_ws ~= ws or now >= window_end) then
      listed, at = true, nil
    end
    if at then
      local kind = 2
      if not marks[at] then
        -- Forgiven once without a comparison: marked, and first.
        kind = 1
        table.remove(fps, at)
        table.remove(marks, at)
        table.insert(fps, 1, fingerprint)
        table.insert(marks, 1, true)
        redis.call('SET', list_key, repeat_text(ws, fps, marks), 'KEEPTTL')
      end
      redis.call('HSET', record, 'rp', string.format('%d', repeats + 1))
      local allowed = 0
      if failures < max_failures and consecutive < max_consecutive then allowed = 1 end
      if attempt_key then
        redis.call('SET', attempt_key, allowed .. ':' .. string.format('%d', ws) .. ':0:'
          .. binding, 'PX', attempt_ttl)
      end
      return packed({allowed, failures, step, ws, 0, trusted, kind, consecutive, epoch, 0, -1, 0,
        0, 0})
    end
  end
end
-- A new record or a new window: the networks of the one before are not this one's.
local restarted = not rec[1] or now >= window_end
if now >= window_end then
  if rec[4] then redis.call('HDEL', record, 'rp') end
  if failures >= max_failures and escalate == 1 then
    step = math.min(step + 1, max_step)
  end
  failures = 0
  ws = now
end
failures = failures + 1
local allowed = 0
local added = 0
if failures <= max_failures and consecutive < max_consecutive then
  allowed = 1
  if not listed then
    consecutive = consecutive + 1
    added = 1
  end
  if failures == max_failures then
    locked_until = math.max(locked_until, now + lockout)
    redis.call('HSET', record, 'sa', string.format('%d', now))
  end
  if added == 1 and consecutive >= max_consecutive then
    redis.call('HSET', record, 'sa', string.format('%d', now))
  end
end

-- %d: Lua's default number format keeps only 14 significant digits.
redis.call('HSET', record, 'f', string.format('%d', failures),
  'ws', string.format('%d', ws), 'st', string.format('%d', step),
  'c', string.format('%d', consecutive))
if locked_until > 0 then
  redis.call('HSET', record, 'lu', string.format('%d', locked_until))
end
if consecutive >= max_consecutive and trusted == 1 then
  -- A device's bucket at its ceiling: kept as long as a token that reaches it may live
  -- (nothing else reaches it, and nothing clears it once they are gone).
  redis.call('PEXPIRE', record, epoch_ttl)
elseif consecutive >= max_consecutive then
  -- At the ceiling: kept until it is cleared.
  redis.call('PERSIST', record)
elseif consecutive == 0 and step == 0 and (failures < max_failures or escalate == 0) then
  -- The window's end is after now (the window was not over, or just restarted at now).
  local ends = math.max(ws + first_window, locked_until)
  redis.call('PEXPIRE', record, ends - now)
else
  redis.call('PEXPIRE', record, retention)
end

if networks_key then
  if restarted then redis.call('DEL', networks_key) end
  -- SADD of a listed tag adds nothing; a full set takes no new one.
  if redis.call('SCARD', networks_key) < max_networks then
    redis.call('SADD', networks_key, network)
  end
  local ends = math.max(ws + math.min(first_window * (2 ^ step), max_window), locked_until)
  redis.call('PEXPIRE', networks_key, math.max(ends - now, 1))
end
if trusted == 1 then
  redis.call('ZADD', KEYS[4], now, device_tag)
  local devices = redis.call('ZCARD', KEYS[4])
  if devices > max_devices then
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, devices - max_devices - 1)
  end
  redis.call('PEXPIRE', KEYS[4], epoch_ttl)
end

local shadowed, shadow_failures, shadow_ws, shadow_added = -1, 0, 0, 0
if candidate_key then
  shadowed, shadow_failures, shadow_ws, shadow_added =
    shadow(candidate_key, now, shadow_held, listed, allowed)
end

if attempt_key then
  redis.call('SET', attempt_key, allowed .. ':' .. string.format('%d', ws) .. ':0:' .. binding,
    'PX', attempt_ttl)
end
return packed({allowed, failures, step, ws, 0, trusted, 0, consecutive, epoch, added, shadowed,
  shadow_failures, shadow_ws, shadow_added})
