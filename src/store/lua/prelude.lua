-- prelude.lua: prepended to every script of this directory when it is loaded
-- (src/store/redis/scripts.rs), so the checks of stored values are written once.
--
-- stored(value, max, role): a number this daemon stored, an integer in [0, max].
-- Anything else (negative, fractional, NaN, too large, not a number) was not written
-- by a daemon: the script fails naming the key's role ('corrupt record'), never the
-- key, and the daemon answers UNAVAILABLE (fail closed). A counter set to 2^63 - 1 by
-- hand would otherwise wrap negative and open the door.
local function stored(value, max, role)
  local n = tonumber(value)
  -- n % 1 is 0 only for an integer: NaN and infinities give NaN, which equals nothing.
  if not n or n < 0 or n > max or n % 1 ~= 0 then
    error('corrupt ' .. role)
  end
  return n
end
-- Bounds of stored values (src/throttle/mod.rs, MAX_STORED_*): failures and replays, a
-- time in ms (about the year 5138), a step.
local MAX_COUNT, MAX_TIME_MS, MAX_STEP = 1e12, 1e14, 63
-- counts_of(text, n): the n whole numbers (0 to MAX_COUNT) of a daemon's
-- comma-separated argument ('2,0,1'), or the script fails naming it.
local function counts_of(text, n)
  local counts = {}
  for v in string.gmatch(text, '[^,]+') do
    local c = tonumber(v)
    assert(c and c >= 0 and c % 1 == 0 and c <= MAX_COUNT, 'counts must be whole numbers')
    counts[#counts + 1] = c
  end
  assert(#counts == n, 'counts must hold ' .. n .. ' numbers')
  return counts
end
-- candidate_record(held): an account's record under its realm's candidate policy as
-- record_attempt.lua writes it (one string, so one GET reads it and one SET ... PX
-- writes it with its expiry): "<f>,<ws>,<st>,<c>,<lu>,<lr>", failures, window start,
-- step, consecutive failures, lockout end, and lr 1 when the last attempt counted was
-- one the enforced policy allowed and the candidate would have refused. Returns the six
-- numbers; anything else is 'corrupt candidate record'.
-- Example: "3,1800000000000,0,3,1800000900000,1" -> 3, 1800000000000, 0, 3, 1800000900000, 1
local function candidate_record(held)
  local f, ws, st, c, lu, lr = string.match(held, '^(%d+),(%d+),(%d+),(%d+),(%d+),([01])$')
  if not f then error('corrupt candidate record') end
  return stored(f, MAX_COUNT, 'candidate record'),
    stored(ws, MAX_TIME_MS, 'candidate record'), stored(st, MAX_STEP, 'candidate record'),
    stored(c, MAX_COUNT, 'candidate record'), stored(lu, MAX_TIME_MS, 'candidate record'),
    tonumber(lr)
end
-- repeat_list(held): a client's refused-password list as repeat_list.lua and
-- record_attempt.lua write it (src/throttle/repeat_list.rs is the same list in Rust):
-- "<window_start_ms>|,<entry>,<entry>," newest first, each entry a fingerprint of 4-16
-- lowercase hex digits followed by '*' when a match on it was already forgiven once
-- without a comparison, at most 16 entries. Returns the window start and two arrays:
-- fingerprints and marks (true: forgiven). Anything else is 'corrupt repeat list'.
-- Example: "1800000000000|,ab12*,cd34," -> 1800000000000, {'ab12', 'cd34'}, {true, false}
local function repeat_list(held)
  local list_ws, body = string.match(held, '^(%d+)|,(.*)$')
  if not list_ws or string.find(body, '[^0-9a-f*,]') or (body ~= '' and string.sub(body, -1) ~= ',') then
    error('corrupt repeat list')
  end
  local fps, marks = {}, {}
  for item in string.gmatch(body, '([^,]*),') do
    local fp, mark = string.match(item, '^([0-9a-f]+)(%*?)$')
    if not fp or #fp < 4 or #fp > 16 or #fps >= 16 then error('corrupt repeat list') end
    fps[#fps + 1] = fp
    marks[#marks + 1] = mark == '*'
  end
  return stored(list_ws, MAX_TIME_MS, 'repeat list'), fps, marks
end
-- The text of a list (the inverse of repeat_list).
local function repeat_text(ws, fps, marks)
  local out = {}
  for i = 1, #fps do
    if marks[i] then out[i] = fps[i] .. '*' else out[i] = fps[i] end
  end
  if #out == 0 then return string.format('%d', ws) .. '|,' end
  return string.format('%d', ws) .. '|,' .. table.concat(out, ',') .. ','
end
-- door_open(key, max_failures, first_window, max_window, max_consecutive, now): whether
-- the next attempt on the record at key would be allowed (src/throttle/attempt_count.rs::is_open):
-- no record; or the window, which lasts until max(ws + window(st), lu), is over or not
-- exhausted, and c is below the ceiling. admit.lua's rule, for scripts that read a door
-- beside their own work.
local function door_open(key, max_failures, first_window, max_window, max_consecutive, now)
  local rec = redis.call('HMGET', key, 'f', 'ws', 'st', 'c', 'lu')
  if not rec[1] then
    return true
  end
  local failures = stored(rec[1], MAX_COUNT, 'record')
  local ws = stored(rec[2], MAX_TIME_MS, 'record')
  local step = stored(rec[3], MAX_STEP, 'record')
  local consecutive, locked_until = 0, 0
  if rec[4] then consecutive = stored(rec[4], MAX_COUNT, 'record') end
  if rec[5] then locked_until = stored(rec[5], MAX_TIME_MS, 'record') end
  if consecutive >= max_consecutive then
    return false
  end
  local window_end = math.max(ws + math.min(first_window * (2 ^ step), max_window), locked_until)
  return now >= window_end or failures < max_failures
end
