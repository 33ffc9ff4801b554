package work

import (
	"context"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Memory is what Redis says of its memory: enough to tell whether it
// refuses writes (at maxmemory) or may evict jobs (an eviction policy).
type Memory struct {
	Used   int64  `json:"used_bytes"`
	Max    int64  `json:"maxmemory_bytes"` // 0: no limit
	Policy string `json:"maxmemory_policy"`
}

// AtLimit reports whether Redis is at maxmemory: with noeviction it refuses
// new jobs, retries and dead letters, while holders go on acknowledging.
func (m Memory) AtLimit() bool { return m.Max > 0 && m.Used >= m.Max }

// Evicts reports whether Redis may drop keys at maxmemory, jobs included:
// only noeviction keeps invariant 3 (never nowhere).
func (m Memory) Evicts() bool { return m.Max > 0 && m.Policy != "" && m.Policy != "noeviction" }

// ReadMemory reads INFO memory of the server that holds queue's keys: on a
// Cluster, the master of their hash slot (any other node's memory says
// nothing of whether this queue's writes are refused).
func ReadMemory(ctx context.Context, rdb redis.Cmdable, queue string) (Memory, error) {
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, KeysFor(queue).Stream)
		if err != nil {
			return Memory{}, err
		}
		rdb = node
	}
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		return Memory{}, err
	}
	f := info["Memory"]
	m := Memory{Policy: f["maxmemory_policy"]}
	m.Used, _ = strconv.ParseInt(f["used_memory"], 10, 64)
	m.Max, _ = strconv.ParseInt(f["maxmemory"], 10, 64)
	return m, nil
}
