-- wait: looks whether a job is settled and, when it is not, counts one
-- more waiter for it, in one step: a settle script that runs after it finds
-- the waiter and pushes the outcome on the job's list (work/wait.go,
-- waitScript). Go embeds this file; the Python and Node clients' wait runs
-- the same bytes.
--
-- KEYS[1] done, KEYS[2] results, KEYS[3] dead index, KEYS[4] dead,
-- KEYS[5] waiters; ARGV[1] job id, ARGV[2] how long registrations last
-- (ms), ARGV[3] "1" to register, "0" to refresh the registration only.
-- Returns {"done", result or ""}, {"dead", reason, error}, or {"wait"}.
local job = ARGV[1]
if redis.call('ZSCORE', KEYS[1], job) then
  return {'done', redis.call('HGET', KEYS[2], job) or ''}
end
local l = redis.call('HGET', KEYS[3], job)
if l then
  local e = redis.call('XRANGE', KEYS[4], l, l)
  if #e > 0 then
    local f, reason, err = e[1][2], '', ''
    for i = 1, #f, 2 do
      if f[i] == 'reason' then reason = f[i + 1] elseif f[i] == 'error' then err = f[i + 1] end
    end
    return {'dead', reason, err}
  end
end
if ARGV[3] == '1' then redis.call('HINCRBY', KEYS[5], job, 1) end
if redis.call('PTTL', KEYS[5]) < tonumber(ARGV[2]) then redis.call('PEXPIRE', KEYS[5], ARGV[2]) end
return {'wait'}
