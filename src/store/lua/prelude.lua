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
-- Bounds of stored values (src/throttle.rs, MAX_STORED_*): failures and replays, a
-- time in ms (about the year 5138), a step.
local MAX_COUNT, MAX_TIME_MS, MAX_STEP = 1e12, 1e14, 63
