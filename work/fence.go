package work

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Fence is a holder's lease in fleet mode (lock_backend redis): the Redis
// key of its lease and the fencing token of its tenure. Every write the
// holder makes for a job (ack, retry, dead letter, keeping an entry fresh,
// giving an unstarted entry back) checks, in the same script, that the lease still carries Token and has not
// expired on Redis' clock; a fenced write does nothing, and the entry stays
// pending for the slot's next holder.
//
// Held, when set, is the lease as the holder's own clocks see it: the
// reader reads nothing once it is no longer surely held, nor hands on what
// a read brought back, and a worker starts no job then. Redis fences the
// writes; Held fences the reads and the starts, which no script can: a
// holder stopped (SIGSTOP) in its blocking read past its lease gets, once
// resumed, the entries Redis gave that read meanwhile, and would otherwise
// start them, and read more, before it notices it lost the slot.
type Fence struct {
	Key   string
	Token int64
	Held  Holding
}

// Holding tells, by the holder's own clocks, whether its lease is still
// surely its own (lock's lease slots implement it: lock.Holding).
type Holding interface {
	// HeldFor is how much longer the lease is surely held; 0 or less once
	// it may not be. Asked once per read.
	HeldFor() time.Duration
	// HeldAt reports whether it is still surely held at now (a time.Now()
	// the caller read already). Asked once per job started: it must cost
	// no more than a comparison.
	HeldAt(now time.Time) bool
}

// ErrFenced is a write refused because the holder's lease was lost or taken
// over (its token is no longer the lease's): it did nothing.
var ErrFenced = errors.New("fenced: this holder's lease was lost or taken over")

// ErrLeaseLapsed is Run stopped because its lease (Fence.Held) is no longer
// surely its own: it read nothing more and started nothing more; what it
// read and did not start stays pending for the slot's next holder.
var ErrLeaseLapsed = errors.New("lease lapsed: its renew deadline passed by this holder's own clock")

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
	keyAckScript:    redis.NewScript(fenceLua + keyAckLua),
	retryScript:     redis.NewScript(fenceLua + retryLua),
	deadScript:      redis.NewScript(fenceLua + deadLua),
	heartbeatScript: redis.NewScript(fenceLua + heartbeatLua),
	backScript:      redis.NewScript(fenceLua + backLua),
	keyTakeScript:   redis.NewScript(fenceLua + keyStreamLua + keyTakeLua),
	keyParkScript:   redis.NewScript(fenceLua + keyParkLua),
}

// dueScript is not fenced: it moves due retries and scheduled jobs, which
// any running holder may move (a stale one too: each member moves once),
// and touches no pending entry.

// write runs one of the holder's write scripts: as it is without a fence
// (one machine, flock slots), else its fenced form with the lease key and
// token added last.
func (r *runner) write(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	s, keys, args = r.fencedCall(s, keys, args)
	return runScript(ctx, r.c.Client, s, keys, args...)
}

// fencedCall is the script write runs, and its keys and arguments: s as it
// is without a fence, else its fenced form with the lease key and token.
func (r *runner) fencedCall(s *redis.Script, keys []string, args []any) (*redis.Script, []string, []any) {
	if r.c.Fence == nil {
		return s, keys, args
	}
	return fenced[s], append(keys, r.c.Fence.Key), append(args, r.c.Fence.Token)
}

// leaseHeld is the reader's check before each read and before it hands on
// what a read brought back: false, having stopped the runner, once the
// lease is no longer surely held. r.heldFor is then how long it still is,
// which bounds the read's block: an entry Redis gives the read is given
// while the lease is held, before the slot's next holder replays the
// slot's pending entries. Without Fence.Held: true, at no cost.
func (r *runner) leaseHeld() bool {
	if r.held == nil {
		return true
	}
	if r.heldFor = r.held.HeldFor(); r.heldFor > 0 {
		return true
	}
	r.lapsed()
	return false
}

// heldAt is a worker's check before it starts a job, at now.
func (r *runner) heldAt(now time.Time) bool {
	if r.held == nil || r.held.HeldAt(now) {
		return true
	}
	r.lapsed()
	return false
}

func (r *runner) lapsed() {
	r.lapseOnce.Do(func() {
		r.c.Logger.Error().Msg("lease no longer surely held (its renew deadline passed): reading and starting nothing more; what was read stays pending for the slot's next holder")
	})
	r.stop("lease", ErrLeaseLapsed)
}
