package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/redis/go-redis/v9"
)

// TestCluster: baton on a real three-master Redis Cluster, configured with
// redis_cluster. Queues land on different masters and `baton queues` lists
// them all (it scans every master); a fleet holder drains a queue there
// (its scripts and its leases stay in the queue's hash slot); status reads
// the leases and the counts.
func TestCluster(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	r := rigOn(t, nodes[0])
	for _, n := range nodes { // the node that holds queue c's hash slot takes it
		_, _ = lock.MarkFresh(context.Background(), n.Client(), "c")
	}
	r.extraEnv = []string{"BATON_REDIS_URL=redis:///0"}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	topo := []string{"--redis-cluster", strings.Join(addrs, ",")}
	queues := []string{"a", "b", "c", "d", "e", "f"}
	for _, q := range queues {
		if _, errOut, code := r.baton(append(append([]string{"enqueue", "-q", "--queue", q}, topo...), "j1", "j2", "j3")...); code != 0 {
			t.Fatalf("enqueue on %s: exit %d: %s", q, code, errOut)
		}
	}
	holding := 0 // masters holding some of the queues
	for _, n := range nodes {
		if size, _ := n.Client().DBSize(context.Background()).Result(); size > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("the queues landed on %d master(s): pick other names", holding)
	}
	out, errOut, code := r.baton(append([]string{"queues", "--json"}, topo...)...)
	if code != 0 {
		t.Fatalf("queues: exit %d: %s", code, errOut)
	}
	var rows []struct {
		Queue   string `json:"queue"`
		Waiting int64  `json:"waiting"`
	}
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("queues json: %v\n%s", err, out)
	}
	if len(rows) != len(queues) {
		t.Fatalf("queues lists %d queues on a cluster of %d masters holding them, want %d: %s", len(rows), holding, len(queues), out)
	}
	for _, row := range rows {
		if row.Waiting != 3 {
			t.Errorf("queue %s: %d waiting, want 3", row.Queue, row.Waiting)
		}
	}

	done := r.dir + "/done"
	job := r.script("job.sh", `cat >> `+done+`; echo " $BATON_FENCE" >> `+done+"\n")
	args := r.fleetArgs("h1", append(topo, "--queue", "c", "--standby-slots", "0", "--lifetime", "4s", "--jitter", "0s", "--", job)...)
	p := r.start(args...)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("run on the cluster: exit %d: %s", code, p.log())
	}
	lines := readLines(t, done)
	if len(lines) != 3 {
		t.Fatalf("jobs run: %q, want j1..j3 each with a fencing token", lines)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 2 || !strings.HasPrefix(f[0], "j") {
			t.Errorf("job record %q: want the payload and BATON_FENCE", l)
		} else if tok, _ := strconv.ParseInt(f[1], 10, 64); tok < 1 {
			t.Errorf("job record %q: no fencing token", l)
		}
	}
	// 8 MB on queue c's master, in its hash slot: status shows that
	// master's memory, not some other node's.
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	const ballast = 8 << 20
	if err := cc.Set(context.Background(), "baton:{c}:ballast", strings.Repeat("x", ballast), 0).Err(); err != nil {
		t.Fatal(err)
	}
	owner, err := cc.MasterForKey(context.Background(), "baton:{c}")
	if err != nil {
		t.Fatal(err)
	}
	// The owner listed last: a keyless INFO would go to any master.
	var last []string
	for _, a := range addrs {
		if a != owner.Options().Addr {
			last = append(last, a)
		}
	}
	last = append(last, owner.Options().Addr)
	for range 3 {
		var s struct {
			statusJSON
			Memory *struct {
				Used int64 `json:"used_bytes"`
			} `json:"redis_memory"`
		}
		r.statusInto(&s, "--redis-cluster", strings.Join(last, ","), "--queue", "c", "--lock-backend", "redis")
		if s.Jobs == nil || s.Jobs.Done != 3 || s.Jobs.Waiting != 0 || s.Jobs.Pending != 0 {
			t.Fatalf("status on the cluster: %+v, want 3 done", s.Jobs)
		}
		if s.Memory == nil || s.Memory.Used < ballast {
			t.Fatalf("status on the cluster: redis memory %+v, want that of queue c's master (over %d bytes)", s.Memory, ballast)
		}
	}
}
