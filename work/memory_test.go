package work

import (
	"context"
	"strings"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestReadMemoryOnCluster: on a Cluster, ReadMemory reads the master that
// holds the queue's hash slot, every time; a keyless INFO goes to any
// master, whose memory says nothing of whether the queue's writes are
// refused.
func TestReadMemoryOnCluster(t *testing.T) {
	nodes := redistest.StartCluster(t, 3)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	ctx := context.Background()
	const ballast = 8 << 20
	if err := cc.Set(ctx, "baton:{q}:ballast", strings.Repeat("x", ballast), 0).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		m, err := ReadMemory(ctx, cc, "q")
		if err != nil {
			t.Fatal(err)
		}
		if m.Used < ballast {
			t.Fatalf("read %d: used %d bytes, want queue q's master's (over %d)", i, m.Used, ballast)
		}
	}
}
