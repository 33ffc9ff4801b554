package work

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Group is the consumer group every holder reads through.
const Group = "baton"

// PayloadField is the stream entry field that holds a job's payload.
const PayloadField = "payload"

// Keys are the Redis keys of one queue, all under the hash tag {queue} so a
// cluster keeps them on one shard and scripts may touch them together.
type Keys struct {
	Stream string // baton:{q}: the jobs; group "baton"
	Stats  string // baton:{q}:stats: totals that outlive short-lived holders
}

// KeysFor returns the keys of queue q.
func KeysFor(q string) Keys {
	base := "baton:{" + q + "}"
	return Keys{Stream: base, Stats: base + ":stats"}
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
// KEYS[1] stream, KEYS[2] stats hash; ARGV[1] group, ARGV[2..] entry ids.
// Returns the number of entries that were pending and are now acknowledged.
var ackScript = redis.NewScript(`
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local n = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
if n > 0 then redis.call('HINCRBY', KEYS[2], 'done', n) end
return n
`)
