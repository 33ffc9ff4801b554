package work

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// clusterClient starts a Redis Cluster of n masters and returns a client
// of it, closed when the test ends.
func clusterClient(t *testing.T, n int) *redis.ClusterClient {
	t.Helper()
	var addrs []string
	for _, s := range redistest.StartCluster(t, n) {
		addrs = append(addrs, s.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// queueOnOtherNode is name, or name with a number, chosen so that its
// queue's keys live on another node than src's, in a cluster of 3 masters
// (their slots split in three equal ranges).
func queueOnOtherNode(ctx context.Context, cc *redis.ClusterClient, src, name string) string {
	slot := func(q string) int64 { return cc.ClusterKeySlot(ctx, KeysFor(q).Stream).Val() }
	dst := name
	for i := 0; slot(src)*3/16384 == slot(dst)*3/16384; i++ {
		dst = fmt.Sprintf("%s%d", name, i)
	}
	return dst
}
