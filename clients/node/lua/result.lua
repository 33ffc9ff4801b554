-- result: reads a done job's result (work/result.go, resultScript; the
-- Python and Node clients' result runs the same bytes).
--
-- KEYS[1] done, KEYS[2] results; ARGV[1] job id.
-- Returns {1, result or false} when the job is done, {0} when not.
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {0} end
return {1, redis.call('HGET', KEYS[2], ARGV[1])}
