package work

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// keyCancelScript cancels a job waiting in its key's list: its record
// becomes a dead letter with reason "cancelled" (the letter and its index
// entry first, written as cancelScript writes them: buryLua), then the
// record is removed and the unique key freed if it names the job. Its id
// stays in the key's list, skipped when its turn comes (no record).
//
// KEYS[1] key jobs, KEYS[2] dead, KEYS[3] dead index, KEYS[4] stats,
// KEYS[5] waiters;
// ARGV[1] job id, ARGV[2] dead_max, ARGV[3] why, ARGV[4] now (unix ms),
// ARGV[5] the prefix of the queue's unique keys.
// Returns {"waiting", letter id}, or {"gone"} when no record (it was taken
// meanwhile: the caller looks again).
const keyCancelLua = entryLua + notifyLua + chainAckLua + chainDeadLua + buryLua + `
local job = ARGV[1]
local packed = redis.call('HGET', KEYS[1], job)
if not packed then return {'gone'} end
local all, f, runs, u = cmsgpack.unpack(packed), {}, '0', nil
for i = 1, #all, 2 do
  if all[i] == 'attempts' then runs = all[i + 1]
  elseif not letter[all[i]] then
    put(f, all[i], all[i + 1])
    if all[i] == 'unique' then u = ARGV[5] .. all[i + 1] end
  end
end
local id = buryCancelled({dead = KEYS[2], index = KEYS[3], stats = KEYS[4], waiters = KEYS[5],
  why = ARGV[3], now = ARGV[4], max = ARGV[2]}, job, f, runs, job)
redis.call('HDEL', KEYS[1], job)
if u then release(u, job) end
chainDead(KEYS[4], job, tonumber(ARGV[2]))
return {'waiting', id}
`

var keyCancelScript = redis.NewScript(keyCancelLua)

// batchKeyCancelScript is keyCancelScript for a batch member (batchForm):
// counted dead in the same step when it was taken out of its key's list.
var batchKeyCancelScript = redis.NewScript(batchForm(keyCancelLua, "res[1] == 'waiting'", "ARGV[1]"))

// cancelKeyed cancels a job waiting in its key's list; gone reports that
// it left the list meanwhile (the caller locates it again).
func cancelKeyed(ctx context.Context, rdb redis.Cmdable, q string, k Keys, o CancelOptions, res *CancelResult) (gone bool, err error) {
	script, keys := keyCancelScript, []string{k.KeyJobs(), k.Dead, k.DeadIndex, k.Stats, k.Waiters}
	args := []any{res.ID, o.DeadMax, o.Reason, time.Now().UnixMilli(), k.Unique("")}
	batch := recordBatch(ctx, rdb, k.KeyJobs(), res.ID)
	if batch != "" {
		script, keys, args = batchKeyCancelScript, append(keys, k.batchKeys(batch)...), append(args, q, batch)
	}
	v, err := runScript(ctx, rdb, script, keys, args...).StringSlice()
	if err != nil {
		return false, err
	}
	if len(v) < 2 {
		return true, nil
	}
	res.State, res.Outcome, res.Letter = StateWaiting, CancelDone, v[1]
	return false, nil
}
