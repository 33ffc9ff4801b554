package work

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fence is a holder's lease in fleet mode (lock_backend redis): the Redis
// key of its lease and the fencing token of its tenure. Every write the
// holder makes for a job (ack, retry, dead letter, keeping an entry fresh,
// giving an unstarted entry back) checks, in the same script, that the lease still carries Token and has not
// expired on Redis' clock; a fenced write does nothing, and the entry stays
// pending for the slot's next holder.
type Fence struct {
	Key   string
	Token int64
}

// ErrFenced is a write refused because the holder's lease was lost or taken
// over (its token is no longer the lease's): it did nothing.
var ErrFenced = errors.New("fenced: this holder's lease was lost or taken over")

// IsFenced reports whether err is a write refused by the fence.
func IsFenced(err error) bool {
	return errors.Is(err, ErrFenced) || err != nil && strings.HasPrefix(err.Error(), "FENCED")
}

// fenceLua checks the fence before a script writes anything: the last key
// is the holder's lease, the last argument its token; both are taken off
// KEYS and ARGV, so the script that follows reads them as unfenced.
const fenceLua = `
local fkey, ftoken = table.remove(KEYS), table.remove(ARGV)
local ft = redis.call('TIME')
local fnow = tonumber(ft[1]) * 1000 + math.floor(tonumber(ft[2]) / 1000)
local fl = redis.call('HMGET', fkey, 'token', 'expires')
if fl[1] ~= ftoken or not fl[2] or tonumber(fl[2]) <= fnow then
  return redis.error_reply('FENCED lease ' .. fkey .. ' no longer carries token ' .. ftoken)
end
`

// fenced are the fenced forms of the holder's write scripts.
var fenced = map[*redis.Script]*redis.Script{
	ackScript:       redis.NewScript(fenceLua + ackLua),
	retryScript:     redis.NewScript(fenceLua + retryLua),
	deadScript:      redis.NewScript(fenceLua + deadLua),
	heartbeatScript: redis.NewScript(fenceLua + heartbeatLua),
	backScript:      redis.NewScript(fenceLua + backLua),
}

// dueScript is not fenced: it moves due retries and scheduled jobs, which
// any running holder may move (a stale one too: each member moves once),
// and touches no pending entry.

// write runs one of the holder's write scripts: as it is without a fence
// (one machine, flock slots), else its fenced form with the lease key and
// token added last.
func (r *runner) write(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if r.c.Fence == nil {
		return runScript(ctx, r.c.Client, s, keys, args...)
	}
	return runScript(ctx, r.c.Client, fenced[s], append(keys, r.c.Fence.Key), append(args, r.c.Fence.Token)...)
}
