package work

import (
	"context"
	"sort"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Queues lists the queues that exist in rdb's database: every baton job
// stream (baton:{name}) and every queue with delayed or retrying jobs or dead
// letters, sorted. It reads with SCAN, in pages, never KEYS; on a Cluster it
// scans every master, since each holds the queues of its hash slots.
func Queues(ctx context.Context, rdb redis.Cmdable) ([]string, error) {
	seen := map[string]bool{}
	var mu sync.Mutex
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.Scan(ctx, cursor, "baton:{*}*", 1000).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				if q, ok := queueOf(k); ok {
					seen[q] = true
				}
			}
			mu.Unlock()
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	var err error
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return scan(ctx, c) })
	} else {
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(seen))
	for q := range seen {
		out = append(out, q)
	}
	sort.Strings(out)
	return out, nil
}

// queueOf names the queue of one of its keys: baton:{q} or baton:{q}:<part>
// for the parts baton keeps (not unique keys, which may hold anything).
func queueOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, "baton:{")
	i := strings.LastIndex(rest, "}")
	if !ok || i < 0 {
		return "", false
	}
	q, part := rest[:i], rest[i+1:]
	switch part {
	case "", ":high", ":low", ":retry", ":scheduled", ":dead", ":stats", ":paused":
		return q, q != ""
	case ":periodic", ":periodic:hosts", ":cron": // a queue of periodic entries before its first job, a fleet's losers
		return q, q != ""
	}
	return "", false
}
