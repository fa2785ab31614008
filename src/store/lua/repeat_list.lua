-- repeat_list.lua: after a failed comparison, put the password's fingerprint first on its
-- client's refused-password list for the bucket it was counted in (docs/throttle.md,
-- "Repeated passwords"), not forgiven (re-armed, if it was listed and marked). The list
-- is bound to the record's current window and expires with the record: a clear, an
-- expiry or a new window leaves it unread (record_attempt.lua honours it only while its
-- window start is the record's). src/throttle/repeat_list.rs::RepeatList::note is the same
-- rule in Rust.
--
-- contract: KEYS record, list | ARGV fingerprint, max_len | REPLY noted
-- KEYS[1]  the counted bucket's record   portcullis:v2:{<digest>}:r or :d:<16 hex>
-- KEYS[2]  the client's list             portcullis:v2:{<digest>}:p:<16 hex>
--          "<window_start_ms>|,<fp>[*],<fp>[*]," newest first; '*' after a fingerprint:
--          a match on it was already forgiven once without a comparison (record_attempt.lua
--          sets it), so the next match is compared (prelude.lua, repeat_list)
-- ARGV[1]  fingerprint   4-16 hex digits
-- ARGV[2]  max_len       fingerprints kept (1-16)
--
-- Returns 1 when noted, 0 when the bucket has no record (nothing is written). A list
-- that is not in this format is an error (the daemon answers UNAVAILABLE), never
-- overwritten as if empty.
--
-- Worked example (max_len 3, record {ws=T} with PTTL P):
--   no list         -> "T|,aa11,"              PTTL P
--   bb22            -> "T|,bb22,aa11,"
--   aa11 again      -> "T|,aa11,bb22,"          (moved first, not twice)
--   (record_attempt.lua forgives a match on bb22: "T|,bb22*,aa11,")
--   cc33            -> "T|,cc33,bb22*,aa11,"    (marks of the others kept)
--   bb22 again      -> "T|,bb22,cc33,aa11,"     (the compared match failed: re-armed)
--   dd44            -> "T|,dd44,bb22,cc33,"     (aa11, the oldest, dropped)
--   a list of an older window start is replaced: "T2|,ee55,"

local fingerprint = ARGV[1]
local max_len = tonumber(ARGV[2])
assert(#KEYS == 2, 'repeat takes two keys')
assert(fingerprint and #fingerprint >= 4 and #fingerprint <= 16
  and not string.find(fingerprint, '[^0-9a-f]'), 'fingerprint must be 4-16 hex digits')
assert(max_len and max_len >= 1 and max_len <= 16 and max_len % 1 == 0,
  'max_len must be in 1..16')

-- PTTL -1: a record at its ceiling, kept until cleared, its door shut: nothing to note.
local ttl = redis.call('PTTL', KEYS[1])
local ws = redis.call('HGET', KEYS[1], 'ws')
if ttl <= 0 or not ws then
  return 0
end
ws = stored(ws, MAX_TIME_MS, 'record')

local kept, marks = {fingerprint}, {false}
local held = redis.call('GET', KEYS[2])
if held then
  local list_ws, fps, held_marks = repeat_list(held)
  if list_ws == ws then
    for i = 1, #fps do
      if #kept >= max_len then break end
      if fps[i] ~= fingerprint then
        kept[#kept + 1] = fps[i]
        marks[#marks + 1] = held_marks[i]
      end
    end
  end
end
redis.call('SET', KEYS[2], repeat_text(ws, kept, marks), 'PX', ttl)
return 1
