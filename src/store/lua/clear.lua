-- clear.lua: forget one account key's record (a verified password, or a completed
-- password reset; docs/throttle.md). Stored attempt_id answers are kept, so a
-- retried call still gets its first answer.
--
-- KEYS[1]  record key   portcullis:v2:{<digest>}:r (or a device bucket :d:<16 hex>)
-- (no ARGV)
--
-- Returns 1 when a record was deleted, 0 when there was none.
-- Example: {f=6, ws=T, st=1} -> deleted, returns 1; the next attempt starts at step 0.

assert(#KEYS == 1, 'clear takes exactly one key')
return redis.call('DEL', KEYS[1])
