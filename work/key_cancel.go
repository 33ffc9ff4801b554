package work

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyCancelScript cancels a job in its key's stream, in the state it is
// found in: an entry not pending (waiting) becomes a dead letter with
// reason "cancelled" and the job's own fields (buryLua, as cancelScript
// writes it), then the entry is deleted, the index entry dropped where it
// still names that entry, the unique key freed if it names the job, and
// the stream deleted (and taken out of the key streams) when that left it
// empty; a pending (running) entry gets a cancel request for its holder,
// as cancelScript writes it. The key stays in its ring: the turn that
// finds its stream empty or gone drops it.
//
// KEYS[1] the key stream, KEYS[2] key index, KEYS[3] key streams, KEYS[4]
// dead, KEYS[5] dead index, KEYS[6] stats, KEYS[7] cancel requests,
// KEYS[8] waiters;
// ARGV[1] group, ARGV[2] job id, ARGV[3] its entry id, ARGV[4] dead_max,
// ARGV[5] why, ARGV[6] how long cancel requests are kept (ms), ARGV[7] now
// (unix ms), ARGV[8] the prefix of the queue's unique keys.
// Returns {"waiting", letter id}, {"running", consumer}, or {"gone"} when
// the entry is not there or not the job's (settled meanwhile: the caller
// looks again).
const keyCancelLua = entryLua + notifyLua + chainAckLua + chainDeadLua + buryLua + keyStreamLua + `
local job, entry = ARGV[2], ARGV[3]
local f, runs, reply = cancelAt(KEYS[1], ARGV[1], job, entry, KEYS[7], ARGV[5], ARGV[6])
if reply then return reply end
local u = uniqueOf(f, ARGV[8])
local id = buryCancelled({dead = KEYS[4], index = KEYS[5], stats = KEYS[6], waiters = KEYS[8],
  why = ARGV[5], now = ARGV[7], max = ARGV[4]}, job, f, runs, entry)
redis.call('XDEL', KEYS[1], entry)
dropKeyIndex(KEYS[1], job, entry)
if u then release(u, job) end
chainDead(KEYS[6], job, tonumber(ARGV[4]))
dropEmptyKeyStream(KEYS[1])
return {'waiting', id}
`

var keyCancelScript = redis.NewScript(keyCancelLua)

// batchKeyCancelScript is keyCancelScript for a batch member (batchForm):
// counted dead in the same step when it was taken out of its key's stream
// (a running one is left to its holder, whose dead letter counts it).
var batchKeyCancelScript = redis.NewScript(batchForm(keyCancelLua, "res[1] == 'waiting'", "ARGV[2]"))

// cancelKeyed cancels a job Locate saw in its key's stream (loc.Key,
// loc.Entry): waiting, it is dead-lettered at once; running, its holder is
// asked to stop it. gone reports that it left the stream meanwhile (the
// caller locates it again).
func cancelKeyed(ctx context.Context, rdb redis.Cmdable, q string, k Keys, o CancelOptions, loc *Location, res *CancelResult) (gone bool, err error) {
	level, _ := ParsePriority(loc.Priority)
	stream := k.KeyStream(level, loc.Key)
	batch := ""
	if m, err := rdb.XRange(ctx, stream, loc.Entry, loc.Entry).Result(); err == nil && len(m) == 1 {
		batch, _ = m[0].Values[batchField].(string)
	}
	script := keyCancelScript
	keys := []string{stream, k.KeyJobs(), k.KeyStreams(), k.Dead, k.DeadIndex, k.Stats, k.Cancel, k.Waiters}
	args := []any{Group, res.ID, loc.Entry, o.DeadMax, o.Reason, cancelKeep.Milliseconds(), time.Now().UnixMilli(), k.Unique("")}
	if batch != "" { // a batch member: counted dead in the same step (batch_settle.go)
		script, keys, args = batchKeyCancelScript, append(keys, k.batchKeys(batch)...), append(args, q, batch)
	}
	v, err := runScript(ctx, rdb, script, keys, args...).StringSlice()
	if err != nil {
		return false, err
	}
	if batch != "" {
		_, _ = ForwardBatches(ctx, rdb, q) // a callback bound for another queue; else the next holder's
	}
	switch {
	case len(v) == 0:
		return false, errors.New("key cancel script replied nothing")
	case v[0] == "gone" || len(v) < 2:
		return true, nil
	case v[0] == StateRunning:
		res.State, res.Outcome, res.Slot = StateRunning, CancelRequested, v[1]
	default:
		res.State, res.Outcome, res.Letter = StateWaiting, CancelDone, v[1]
	}
	return false, nil
}
