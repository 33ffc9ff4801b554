package chaos

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

var (
	workflowBatches = flag.Int("chaos.batches", 20, "batches of the workflows chaos run (make chaos-workflows: 200)")
	workflowSize    = flag.Int("chaos.batch-size", 100, "jobs per batch of the workflows chaos run")
)

const (
	asWorkflows    = "BATON_CHAOS_WORKFLOWS" // with asBaton: the batch handler, which records each callback
	workflowQueue  = "workflows"
	workflowCalls  = "chaos:workflows:callbacks" // list: "<batch id> <summary>" per callback run
	workflowSlots  = 3
	workflowDieOne = "die" // a member with this payload prefix is rejected: dead at its first run
)

// workflowsHandler records each callback run and rejects the members meant
// to die; the others succeed after 0 to 20 ms.
func workflowsHandler() work.Handler {
	opt, _ := redis.ParseURL(os.Getenv("BATON_REDIS_URL"))
	rdb := redis.NewClient(opt)
	return work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		if j.Batch != nil {
			s, _ := json.Marshal(j.Batch)
			return rdb.RPush(ctx, workflowCalls, j.Batch.ID+" "+string(s)).Err()
		}
		if strings.HasPrefix(string(j.Payload), workflowDieOne) {
			return fmt.Errorf("meant to die: %w", work.ErrSkipRetry)
		}
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		return nil
	})
}

// TestChaosWorkflows is batches under fire: one host whose cron starts a
// candidate three times a second for 3 flock run slots (holders living
// 2-4s), while the test enqueues batches of -chaos.batch-size jobs, a few
// of which are meant to die, each batch closed after its jobs; a monkey
// kill -9s holders and stops some (SIGSTOP, 2.5s), and Redis is restarted
// once (SIGKILL, AOF with fsync always). It wants one callback per batch,
// none twice, none missing, and each summary's counts equal to the jobs'
// real outcomes: its dead members are the batch's dead letters.
// make chaos-workflows runs 200 batches of 100.
func TestChaosWorkflows(t *testing.T) {
	srv := redistest.Start(t, redistest.Appendonly)
	rdb := srv.Client()
	ctx := context.Background()
	dir := t.TempDir()
	logf := runLog(t, dir)
	mark := runMark + "=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	hf := &hostFleet{t: t, log: logf, procs: map[int]*hostProc{}}
	common := []string{"run", "--queue", workflowQueue, "--lock-dir", filepath.Join(dir, "locks"),
		"--slots", strconv.Itoa(workflowSlots), "--standby-slots", "1",
		"--lifetime", "2s", "--jitter", "2s", "--standby-wait", "20s", "--poll-interval", "100ms", "--concurrency", "4",
		"--shutdown-grace", "1s", "--max-attempts", "1000", "--job-timeout", "2s", "--visibility-timeout", "10s",
		"--redis-down-exit", "5s", "--log-format", "json"}
	env := append(os.Environ(), asBaton+"=1", asWorkflows+"=1", "BATON_REDIS_URL="+srv.URL(), mark)
	slots, err := lock.NewFileSet(filepath.Join(dir, "locks"), workflowQueue, lock.RoleRun, workflowSlots)
	if err != nil {
		t.Fatal(err)
	}
	defer hf.killAll()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kills, pauses atomic.Int64
	wg.Add(2)
	go func() {
		defer wg.Done()
		hf.fire(env, common)
		every(stop, 330*time.Millisecond, func() { hf.fire(env, common) })
	}()
	go func() { // the monkey: every 700ms, one time in four kill -9 a holder, one in ten stop one
		defer wg.Done()
		every(stop, 700*time.Millisecond, func() {
			switch roll := rand.IntN(20); {
			case roll < 5 && hf.strike(slots, false):
				kills.Add(1)
			case roll >= 18 && hf.strike(slots, true):
				pauses.Add(1)
			}
		})
	}()

	// The producer: batches one after another, each closed after its jobs;
	// Redis restarts half way.
	type made struct {
		id  string
		die int
	}
	var batches []made
	start := time.Now()
	var restarted time.Duration
	for i := 0; i < *workflowBatches; i++ {
		if i == *workflowBatches/2 {
			srv.Restart() // the AOF keeps the batches, their counts and the jobs
			restarted = time.Since(start)
		}
		var b *work.Batch
		for try := 0; ; try++ { // Redis may be restarting
			if b, err = work.NewBatch(ctx, rdb, workflowQueue, work.BatchCallback([]byte("cb"), ""), work.BatchName(strconv.Itoa(i))); err == nil {
				break
			}
			if try == 100 {
				t.Fatalf("open batch %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		die := rand.IntN(4)
		msgs := make([]work.Message, *workflowSize)
		for j := range msgs {
			p := "ok-" + strconv.Itoa(j)
			if j < die {
				p = workflowDieOne + "-" + strconv.Itoa(j)
			}
			msgs[j] = work.Message{Payload: []byte(p)}
		}
		for try := 0; ; try++ { // one script call per 1,000 jobs: all or nothing
			if _, err = b.AddAndClose(ctx, msgs...); err == nil {
				break
			}
			if try == 100 {
				t.Fatalf("add to batch %d: %v", i, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		batches = append(batches, made{b.ID(), die})
		time.Sleep(20 * time.Millisecond)
	}
	// Every callback has run, or time is up: no more candidates then.
	for end := time.Now().Add(3 * time.Minute); rdb.LLen(ctx, workflowCalls).Val() < int64(len(batches)) && time.Now().Before(end); {
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a second callback of any batch would run by now
	close(stop)
	wg.Wait()
	hf.killAll()
	if escaped := leftOver(mark); len(escaped) > 0 {
		t.Errorf("%d processes left running after the run: %v", len(escaped), escaped)
	}

	calls := map[string][]work.BatchSummary{}
	for _, l := range rdb.LRange(ctx, workflowCalls, 0, -1).Val() {
		id, js, _ := strings.Cut(l, " ")
		var s work.BatchSummary
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			t.Fatalf("callback record %q: %v", l, err)
		}
		calls[id] = append(calls[id], s)
	}
	letters := map[string]int{} // batch id → its dead letters
	for _, m := range rdb.XRange(ctx, work.KeysFor(workflowQueue).Dead, "-", "+").Val() {
		if b, ok := m.Values["batch"].(string); ok {
			letters[b]++
		}
	}
	var twice, missing, wrong int
	for _, b := range batches {
		c := calls[b.id]
		switch {
		case len(c) == 0:
			missing++
			t.Errorf("batch %s: no callback", b.id)
			continue
		case len(c) > 1:
			twice++
			t.Errorf("batch %s: %d callbacks", b.id, len(c))
		}
		s := c[0]
		if s.Total != int64(*workflowSize) || s.Dead != int64(b.die) || s.Dead != int64(letters[b.id]) || s.Done != s.Total-s.Dead {
			wrong++
			t.Errorf("batch %s: summary total %d done %d dead %d, want %d jobs, %d dead (dead letters: %d)", b.id, s.Total, s.Done, s.Dead, *workflowSize, b.die, letters[b.id])
		}
	}
	t.Logf("workflows chaos: %d batches of %d jobs, %d candidates, %d holders kill -9'd, %d stopped for %v, Redis restarted at +%v: "+
		"callbacks %d, fired twice %d, missing %d, summaries wrong %d (log %s)",
		len(batches), *workflowSize, len(hf.procs), kills.Load(), pauses.Load(), fleetPause, restarted.Round(time.Second),
		len(calls), twice, missing, wrong, logf.Name())
}
