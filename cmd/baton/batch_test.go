package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// batchJSON is `baton batch ID --json`.
type batchJSON struct {
	ID            string `json:"id"`
	Closed        bool   `json:"closed"`
	Complete      bool   `json:"complete"`
	Total         int64  `json:"total"`
	Done          int64  `json:"done"`
	Dead          int64  `json:"dead"`
	Running       int64  `json:"running"`
	Waiting       int64  `json:"waiting"`
	CallbackID    string `json:"callback_id"`
	CallbackState string `json:"callback_state"`
	Summary       *work.BatchSummary
}

func (r *rig) batch(q, id string) batchJSON {
	r.t.Helper()
	out, errOut, code := r.baton("batch", "--queue", q, id, "--json")
	if code != 0 {
		r.t.Fatalf("batch %s: exit %d: %s", id, code, errOut)
	}
	var b batchJSON
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		r.t.Fatalf("batch json: %v\n%s", err, out)
	}
	return b
}

// batchID reads the batch id enqueue printed on stderr.
func batchID(t *testing.T, stderr string) string {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if id, ok := strings.CutPrefix(l, "batch "); ok && work.ValidBatchID(id) {
			return id
		}
	}
	t.Fatalf("no batch id on stderr: %q", stderr)
	return ""
}

// Bad input to the batch commands: exit 2 with one line (and a hint), and
// nothing written to Redis.
func TestBatchBadInput(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	open, _, code := r.baton("batch", "open")
	if code != 0 {
		t.Fatal(code)
	}
	open = strings.TrimSpace(open)
	if _, _, code := r.baton("batch", "close", open); code != 0 {
		t.Fatal("close", code)
	}
	before := r.client().DBSize(ctx).Val()
	big := strings.Repeat("x", 200)
	for _, args := range [][]string{
		{"enqueue", "--batch", "bnosuchbatch", "a"},
		{"enqueue", "--batch", "17000-0", "a"},
		{"enqueue", "--batch", open, "a"}, // closed
		{"enqueue", "--max-payload", "100", "--batch-callback", big, "a"},
		{"enqueue", "--batch-callback-queue", "other", "a"},
		{"enqueue", "--on-success-only", "a"},
		{"enqueue", "--batch-callback", "cb", "--in", "1m", "a"},
		{"enqueue", "--batch-callback", "cb", "--unique-key", "k", "a"},
		{"enqueue", "--batch-callback", "cb", "--batch", open, "a"},
		{"enqueue", "--batch-callback", "cb", "--batch-callback-queue", "a{b}", "a"},
		{"batch", "close", "bnosuchbatch"},
		{"batch", "bnosuchbatch"},
		{"batch", "not-an-id"},
		{"batch"},
		{"batch", "open", "extra"},
		{"batch", "open", "--max-payload", "100", "--callback", big},
		{"batch", "close", open, "--callback", "x"},
	} {
		_, errOut, code := r.baton(args...)
		if code != 2 {
			t.Errorf("%v: exit %d, want 2: %s", args, code, errOut)
		}
		if first, _, _ := strings.Cut(errOut, "\n"); !strings.HasPrefix(first, "baton: ") {
			t.Errorf("%v: stderr %q, want one error line first", args, errOut)
		}
	}
	if after := r.client().DBSize(ctx).Val(); after != before {
		t.Fatalf("bad input wrote keys: %d before, %d after", before, after)
	}
}

// One call makes a batch of its jobs; an empty one fires its callback at
// once. The callback gets BATON_BATCH and the summary; --json lines carry
// the batch; batch ID and batch list show it.
func TestBatchEnqueueAndCallback(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	out := filepath.Join(r.dir, "out")
	job := r.script("job.sh", `p=$(cat)
if [ -n "$BATON_BATCH" ]; then echo "$BATON_BATCH $BATON_BATCH_SUMMARY" >> `+out+`.cb; exit 0; fi
if [ "$p" = bad ]; then exit 3; fi
echo "$p" >> `+out+"\n")

	// Empty: the callback is queued at once, with zero counts.
	cmd := r.cmd("enqueue", "--batch-callback", "empty", "--batch-name", "none")
	cmd.Stdin = strings.NewReader("")
	errb := new(strings.Builder)
	cmd.Stderr = errb
	if err := cmd.Run(); err != nil {
		t.Fatal(err, errb)
	}
	empty := batchID(t, errb.String())
	if b := r.batch("default", empty); !b.Complete || b.Total != 0 || b.CallbackState != "enqueued" || b.CallbackID == "" {
		t.Fatalf("empty batch: %+v", b)
	}

	stdout, stderr, code := r.baton("enqueue", "--json", "--max-attempts", "1", "--batch-callback", "cb", "--batch-name", "three", "a", "bad", "c")
	if code != 0 {
		t.Fatal(stderr)
	}
	id := batchID(t, stderr)
	for _, l := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var j struct{ ID, Batch string }
		if err := json.Unmarshal([]byte(l), &j); err != nil || j.Batch != id || j.ID == "" {
			t.Fatalf("json line %q: %v", l, err)
		}
	}
	if b := r.batch("default", id); b.Total != 3 || !b.Closed || b.Complete || b.Waiting != 3 || b.CallbackState != "pending" {
		t.Fatalf("before running: %+v", b)
	}
	r.start("run", "--lifetime", "1m", "--standby-slots", "0", "--", job)
	eventually(t, 20*time.Second, "both callbacks ran", func() bool { return len(readLines(t, out+".cb")) == 2 })
	b := r.batch("default", id)
	if !b.Complete || b.Done != 2 || b.Dead != 1 || b.Summary == nil || len(b.Summary.DeadIDs) != 1 {
		t.Fatalf("after: %+v", b)
	}
	for _, l := range readLines(t, out+".cb") {
		bid, sum, _ := strings.Cut(l, " ")
		var s work.BatchSummary
		if err := json.Unmarshal([]byte(sum), &s); err != nil || s.ID != bid {
			t.Fatalf("callback saw %q: %v", l, err)
		}
		if bid == id && (s.Done != 2 || s.Dead != 1 || s.Name != "three" || s.Total != 3) {
			t.Fatalf("summary %+v", s)
		}
	}
	list, _, code := r.baton("batch", "list")
	if code != 0 || !strings.Contains(list, id) || !strings.Contains(list, empty) {
		t.Fatalf("batch list: %s", list)
	}
	show, _, _ := r.baton("batch", id)
	if !strings.Contains(show, "complete") || !strings.Contains(show, "enqueued, job "+b.CallbackID) {
		t.Fatalf("batch %s:\n%s", id, show)
	}
}

// A batch built over several calls: open, enqueue --batch twice, close; the
// callback in another queue. Holders are killed with SIGKILL mid-batch, and
// one is stopped (SIGSTOP) past the visibility timeout so that another
// claims its job and runs it again: every member is counted once, the
// callback fires once, after the close.
func TestBatchExactlyOnceUnderKills(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.fresh("cbq")
	out := filepath.Join(r.dir, "runs")
	cb := filepath.Join(r.dir, "cb")
	job := r.script("job.sh", `p=$(cat)
if [ -n "$BATON_BATCH" ]; then echo "$BATON_BATCH_SUMMARY" >> `+cb+`; exit 0; fi
echo "$p" >> `+out+`
sleep 0.05
`)
	id, _, code := r.baton("batch", "open", "--callback", "fan-in", "--callback-queue", "cbq")
	if code != 0 {
		t.Fatal(code)
	}
	id = strings.TrimSpace(id)
	const n = 120
	var first, second []string
	for i := range n {
		if i < n/2 {
			first = append(first, strconv.Itoa(i))
		} else {
			second = append(second, strconv.Itoa(i))
		}
	}
	if _, errOut, code := r.baton(append([]string{"enqueue", "--quiet", "--batch", id}, first...)...); code != 0 {
		t.Fatal(errOut)
	}
	args := []string{"run", "--lifetime", "1m", "--standby-slots", "0", "--slots", "3", "--concurrency", "2",
		"--visibility-timeout", "2s", "--job-timeout", "500ms", "--shutdown-grace", "500ms", "--", job}
	a := r.start(args...)
	eventually(t, 20*time.Second, "a third of the jobs ran", func() bool { return len(readLines(t, out)) >= n/6 })
	_ = syscall.Kill(a.cmd.Process.Pid, syscall.SIGKILL) // mid-batch: its running jobs are replayed by the slot's next holder
	a.wait(t, 10*time.Second)
	if _, errOut, code := r.baton(append([]string{"enqueue", "--quiet", "--batch", id}, second...)...); code != 0 {
		t.Fatal(errOut)
	}
	b := r.start(args...)
	eventually(t, 20*time.Second, "b runs jobs", func() bool { return len(readLines(t, out)) >= n/3 })
	_ = syscall.Kill(b.cmd.Process.Pid, syscall.SIGSTOP) // its jobs are claimed after 2s by c, and run again
	r.start(args...)
	eventually(t, 60*time.Second, "every job ran", func() bool {
		seen := map[string]bool{}
		for _, l := range readLines(t, out) {
			seen[l] = true
		}
		return len(seen) == n
	})
	_ = syscall.Kill(b.cmd.Process.Pid, syscall.SIGCONT) // its late acks count nothing
	if got := r.batch("default", id); got.Complete || len(readLines(t, cb)) != 0 {
		t.Fatalf("complete before the close: %+v", got)
	}
	if _, errOut, code := r.baton("batch", "close", id); code != 0 {
		t.Fatal(errOut)
	}
	r.start("run", "--queue", "cbq", "--lifetime", "1m", "--standby-slots", "0", "--", job)
	eventually(t, 30*time.Second, "the callback ran", func() bool { return len(readLines(t, cb)) >= 1 })
	time.Sleep(500 * time.Millisecond) // a second callback would have run by now
	lines := readLines(t, cb)
	if len(lines) != 1 {
		t.Fatalf("callback ran %d times", len(lines))
	}
	var s work.BatchSummary
	if err := json.Unmarshal([]byte(lines[0]), &s); err != nil || s.Total != n || s.Done != n || s.Dead != 0 {
		t.Fatalf("summary %q: %v", lines[0], err)
	}
	t.Logf("%d runs for %d jobs", len(readLines(t, out)), n)
}

// A lost reply: the holder's ack of a member reaches Redis while the way
// back is cut (a partition), so the holder sends it again; the replay, run
// after the first, finds the entry acknowledged and counts nothing. The
// batch stays incomplete until its other member is done (a member counted
// twice would complete it early), and the callback fires once.
func TestBatchLostReply(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	px := r.proxy()
	started, cb := filepath.Join(r.dir, "started"), filepath.Join(r.dir, "cb")
	job := r.script("job.sh", `p=$(cat)
if [ -n "$BATON_BATCH" ]; then echo "$BATON_BATCH_SUMMARY" >> `+cb+`; exit 0; fi
echo "$p" >> `+started+`
while [ ! -e `+r.dir+`/go-$p ]; do sleep 0.02; done
`)
	// w, done first, has the holder load the script: a's ack then runs
	// as soon as it reaches Redis.
	if err := os.WriteFile(filepath.Join(r.dir, "go-w"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := r.baton("enqueue", "--batch-callback", "cb", "w", "a", "last")
	if code != 0 {
		t.Fatal(stderr)
	}
	id, a := batchID(t, stderr), strings.Fields(stdout)[1]
	r.start("run", "--redis-url", "redis://"+px.Addr+"/0?read_timeout=300ms", "--redis-down-exit", "1m",
		"--lifetime", "1m", "--standby-slots", "0", "--concurrency", "2", "--", job)
	eventually(t, 20*time.Second, "w is done, a and last run", func() bool {
		return len(readLines(t, started)) == 3 && r.batch("default", id).Done == 1
	})
	mon := monitor(t, r.redis.Addr)
	px.Partition(true)
	if err := os.WriteFile(filepath.Join(r.dir, "go-a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // a's ack is sent, times out, and is sent again: all held
	px.Partition(false)
	acks := func() int {
		n := 0
		for _, l := range mon.lines() {
			if strings.Contains(l, `"evalsha"`) && strings.Contains(l, `"`+a+`"`) && strings.Contains(l, ":batch:"+id) {
				n++
			}
		}
		return n
	}
	eventually(t, 20*time.Second, "a's ack reaches Redis twice", func() bool { return acks() >= 2 })
	if b := r.batch("default", id); b.Done != 2 || b.Complete || len(readLines(t, cb)) != 0 {
		t.Fatalf("after a's replayed ack: %+v, want a counted once and the batch waiting for last", b)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "go-last"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "the callback ran", func() bool { return len(readLines(t, cb)) >= 1 })
	time.Sleep(500 * time.Millisecond) // a second callback would have run by now
	lines := readLines(t, cb)
	var s work.BatchSummary
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &s) != nil || s.Done != 3 || s.Total != 3 {
		t.Fatalf("callbacks %q", lines)
	}
	t.Logf("a's ack reached Redis %d times; counted once", acks())
}

// A batch's callback in a queue on another node of a Redis Cluster: the
// holder of the batch's queue forwards it from the outbox, once; a holder
// of the callback's queue runs it with the summary.
func TestBatchCallbackOnClusterNode(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartCluster(t, 3)
	r := rigOn(t, nodes[0])
	r.extraEnv = []string{"BATON_REDIS_URL=redis:///0"}
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	ctx := context.Background()
	node := func(q string) int64 { return cc.ClusterKeySlot(ctx, work.KeysFor(q).Stream).Val() * 3 / 16384 }
	src, dst := "a", "b"
	for i := 0; node(src) == node(dst); i++ {
		dst = "b" + strconv.Itoa(i)
	}
	topo := []string{"--redis-cluster", strings.Join(addrs, ",")}
	cb := filepath.Join(r.dir, "cb")
	job := r.script("job.sh", `p=$(cat)
if [ -n "$BATON_BATCH" ]; then echo "$p $BATON_BATCH_SUMMARY" >> `+cb+`; fi
`)
	_, stderr, code := r.baton(append([]string{"enqueue", "-q", "--queue", src, "--batch-callback", "fan-in", "--batch-callback-queue", dst, "j1", "j2", "j3"}, topo...)...)
	if code != 0 {
		t.Fatal(stderr)
	}
	id := batchID(t, stderr)
	for _, q := range []string{src, dst} {
		r.start(append([]string{"run", "--queue", q, "--standby-slots", "0", "--lifetime", "1m", "--lock-dir", filepath.Join(r.dir, "locks-"+q)}, append(topo, "--", job)...)...)
	}
	eventually(t, 30*time.Second, "the callback ran in queue "+dst, func() bool { return len(readLines(t, cb)) >= 1 })
	time.Sleep(500 * time.Millisecond) // a second one would have run by now
	lines := readLines(t, cb)
	var s work.BatchSummary
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "fan-in ") || json.Unmarshal([]byte(strings.TrimPrefix(lines[0], "fan-in ")), &s) != nil || s.ID != id || s.Done != 3 {
		t.Fatalf("callbacks %q", lines)
	}
	out, _, code := r.baton(append([]string{"batch", "--queue", src, id}, topo...)...)
	if code != 0 || !strings.Contains(out, "enqueued, job ") || !strings.Contains(out, "in queue "+dst) {
		t.Fatalf("batch %s: %s", id, out)
	}
}
