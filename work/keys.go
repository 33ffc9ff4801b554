package work

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Group is the consumer group every holder reads through.
const Group = "baton"

// Stream entry fields. Producers set PayloadField; baton adds the others when
// it moves a retry back into the stream.
const (
	PayloadField  = "payload"
	attemptsField = "attempts" // runs already made
	origField     = "orig"     // id of the job's first entry
)

// Keys are the Redis keys of one queue, all under the hash tag {queue} so a
// cluster keeps them on one shard and scripts may touch them together.
type Keys struct {
	Stream string // baton:{q}: the jobs; group "baton"
	Retry  string // baton:{q}:retry: sorted set of retries, scored by due time (ms)
	Dead   string // baton:{q}:dead: dead letters
	Stats  string // baton:{q}:stats: totals that outlive short-lived holders
}

// KeysFor returns the keys of queue q.
func KeysFor(q string) Keys {
	base := "baton:{" + q + "}"
	return Keys{Stream: base, Retry: base + ":retry", Dead: base + ":dead", Stats: base + ":stats"}
}

// EnsureGroup creates the stream and its group when missing. The group starts
// at id 0 so jobs enqueued before any holder ran are delivered too.
func EnsureGroup(ctx context.Context, rdb redis.Cmdable, k Keys) error {
	err := rdb.XGroupCreateMkStream(ctx, k.Stream, Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return err
	}
	return nil
}

func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

func isRedisNil(err error) bool { return errors.Is(err, redis.Nil) }

// ackScript acknowledges and deletes entries in one step, so an entry is never
// deleted while still pending (a ghost) nor acked and left in the stream.
//
// KEYS[1] stream, KEYS[2] stats; ARGV[1] group, ARGV[2..] entry ids.
// Returns how many entries were pending and are now acknowledged.
var ackScript = redis.NewScript(`
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local n = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
if n > 0 then redis.call('HINCRBY', KEYS[2], 'done', n) end
return n
`)

// retryScript moves a failed entry to the retry schedule.
//
// KEYS[1] stream, KEYS[2] retry, KEYS[3] stats; ARGV[1] group, ARGV[2] entry
// id, ARGV[3] due (unix ms), ARGV[4] member (see retryMember).
// Returns 1 when scheduled, 0 when the entry was no longer pending.
var retryScript = redis.NewScript(`
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
redis.call('HINCRBY', KEYS[3], 'retried', 1)
return 1
`)

// dueScript moves due retries back into the stream as new entries that carry
// their attempt count and first id.
//
// KEYS[1] retry, KEYS[2] stream; ARGV[1] now (unix ms), ARGV[2] most to move.
// Members are "<entry id>|<attempts>|<orig id>|<payload>".
// Returns how many were moved.
var dueScript = redis.NewScript(`
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, m in ipairs(due) do
  local a = string.find(m, '|', 1, true)
  local b = string.find(m, '|', a + 1, true)
  local c = string.find(m, '|', b + 1, true)
  redis.call('XADD', KEYS[2], '*', 'payload', string.sub(m, c + 1),
    'attempts', string.sub(m, a + 1, b - 1), 'orig', string.sub(m, b + 1, c - 1))
  redis.call('ZREM', KEYS[1], m)
end
return #due
`)

// deadScript moves an entry to the dead-letter stream, bounded by dead_max.
//
// KEYS[1] stream, KEYS[2] dead, KEYS[3] stats; ARGV[1] group, ARGV[2] entry
// id, ARGV[3] dead_max, ARGV[4..] field/value pairs of the dead letter.
// Returns -1 when the entry was no longer pending, 1 when the oldest dead
// letter was dropped to make room, else 0.
var deadScript = redis.NewScript(`
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 0 then return -1 end
redis.call('XDEL', KEYS[1], ARGV[2])
local full = redis.call('XLEN', KEYS[2]) >= tonumber(ARGV[3])
local fields = {}
for i = 4, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[3], '*', unpack(fields))
redis.call('HINCRBY', KEYS[3], 'dead', 1)
if full then return 1 end
return 0
`)

// requeueScript puts a dead letter back as a new job (attempts start over)
// and removes it.
//
// KEYS[1] dead, KEYS[2] stream; ARGV[1] dead letter id.
// Returns the new entry id, 0 when there is no such dead letter, 1 when it
// has no payload (a malformed entry).
var requeueScript = redis.NewScript(`
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if #e == 0 then return 0 end
local f = e[1][2]
for i = 1, #f, 2 do
  if f[i] == 'payload' then
    local id = redis.call('XADD', KEYS[2], '*', 'payload', f[i + 1])
    redis.call('XDEL', KEYS[1], ARGV[1])
    return id
  end
end
return 1
`)

// backScript gives entries that were read but never started back to the
// stream, as new entries with the same payload, runs made and first id: any
// holder may take them at once, and no delivery is counted against them.
//
// KEYS[1] stream; ARGV[1] group, then per entry: id, payload, runs made, orig.
// Returns how many were given back.
var backScript = redis.NewScript(`
local n = 0
for i = 2, #ARGV, 4 do
  if redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
    redis.call('XDEL', KEYS[1], ARGV[i])
    redis.call('XADD', KEYS[1], '*', 'payload', ARGV[i + 1], 'attempts', ARGV[i + 2], 'orig', ARGV[i + 3])
    n = n + 1
  end
end
return n
`)
