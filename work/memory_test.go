package work

import (
	"context"
	"strings"
	"testing"
)

// TestReadMemoryOnCluster: on a Cluster, ReadMemory reads the master that
// holds the queue's hash slot, every time; a keyless INFO goes to any
// master, whose memory says nothing of whether the queue's writes are
// refused.
func TestReadMemoryOnCluster(t *testing.T) {
	cc := clusterClient(t, 3)
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
