-- unwait: counts one waiter less for a job, a wait that ended without an
-- outcome (work/wait.go, unwaitScript; the Python and Node clients' wait
-- runs the same bytes).
--
-- KEYS[1] waiters; ARGV[1] job id. Returns 0.
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
