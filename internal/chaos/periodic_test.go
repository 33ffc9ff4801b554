package chaos

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/periodic"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

var periodicForFlag = flag.Duration("chaos.periodic-for", 15*time.Second, "how long each periodic chaos run fires @every 1s (make chaos-periodic: 5m)")

const (
	asPeriodic     = "BATON_CHAOS_PERIODIC" // with asBaton: the periodic handler, which records each run
	periodicQueue  = "periodic"
	periodicRuns   = "chaos:periodic:runs" // list: "<BATON_TICK> <job id>" per run
	periodicSlots  = 2                     // run slots fleet-wide
	periodicConfig = `
[[periodic]]
name = "beat"
schedule = "@every 1s"
catch_up = "all"
`
)

// periodicHandler records each run of a periodic job: its tick and its id.
func periodicHandler() work.Handler {
	opt, _ := redis.ParseURL(os.Getenv("BATON_REDIS_URL"))
	rdb := redis.NewClient(opt)
	return work.HandlerFunc(func(ctx context.Context, j *work.Job) error {
		return rdb.RPush(ctx, periodicRuns, j.Tick.UTC().Format(time.RFC3339)+" "+j.ID).Err()
	})
}

// TestChaosPeriodic is periodic jobs under fire. fleet: 3 simulated hosts,
// each starting a candidate every second like cron, share 2 run slots
// (Redis leases, lease_ttl 1.5s, holders living 2-4s); flock: the same
// on one host, 2 flock slots. All holders enqueue an @every 1s entry with
// catch_up = "all", while a monkey kill -9s holders, stops some (SIGSTOP,
// then SIGCONT 2.5s later: past the lease in fleet mode), and Redis is
// restarted once (SIGKILL, AOF with fsync always). From the jobs' own runs
// it counts the ticks expected (every second from the first tick run to the
// entry's last claimed tick), enqueued (distinct job ids), duplicated (a
// tick with two job ids) and missing (none): it wants 0 duplicated and 0
// missing. make chaos-periodic runs each for 5 minutes.
func TestChaosPeriodic(t *testing.T) {
	for _, mode := range []string{"fleet", "flock"} {
		t.Run(mode, func(t *testing.T) { chaosPeriodic(t, mode == "fleet") })
	}
}

func chaosPeriodic(t *testing.T, fleet bool) {
	srv := redistest.Start(t, redistest.Appendonly)
	rdb := srv.Client()
	ctx := context.Background()
	dir := t.TempDir()
	logf := runLog(t, dir)
	cfg := filepath.Join(dir, "periodic.toml")
	if err := os.WriteFile(cfg, []byte(periodicConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	mark := runMark + "=" + strconv.FormatInt(time.Now().UnixNano(), 36)
	hf := &hostFleet{t: t, log: logf, procs: map[int]*hostProc{}}
	backend, hosts := "file", []string{"h1", "h1", "h1"} // one host, its cron firing three times a second
	if fleet {
		backend, hosts = "redis", fleetHosts
	}
	common := []string{"run", "--config", cfg, "--queue", periodicQueue, "--lock-backend", backend,
		"--slots", strconv.Itoa(periodicSlots), "--standby-slots", strconv.Itoa(periodicSlots),
		"--lease-ttl", "1500ms", "--lease-renew", "250ms",
		"--lifetime", "2s", "--jitter", "2s", "--standby-wait", "20s", "--poll-interval", "100ms",
		"--shutdown-grace", "1s", "--max-attempts", "1000", "--job-timeout", "2s", "--visibility-timeout", "10s",
		"--redis-down-exit", "5s", "--log-format", "json"}
	var slots lock.Set
	var err error
	if fleet {
		slots, err = lock.NewLeaseSet(rdb, periodicQueue, lock.RoleRun, periodicSlots, lock.LeaseOptions{})
	} else {
		slots, err = lock.NewFileSet(filepath.Join(dir, "locks-h1"), periodicQueue, lock.RoleRun, periodicSlots)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer hf.killAll()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var kills, pauses atomic.Int64
	for _, h := range hosts {
		env := append(os.Environ(), asBaton+"=1", asPeriodic+"=1", "BATON_REDIS_URL="+srv.URL(), "BATON_HOST="+h, mark)
		args := append([]string{common[0], "--lock-dir", filepath.Join(dir, "locks-"+h), "--host", h}, common[1:]...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.IntN(1000)) * time.Millisecond)
			hf.fire(env, args)
			every(stop, time.Second, func() { hf.fire(env, args) })
		}()
	}
	wg.Add(1)
	go func() { // the monkey: every 700ms, one time in four kill -9 a run-lease holder, one in ten stop one
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
	start := time.Now()
	time.Sleep(*periodicForFlag / 2)
	srv.Restart() // the AOF keeps the records and the jobs
	restarted := time.Now()
	time.Sleep(*periodicForFlag / 2)
	// The window ends: no more candidates. Wait for every job to have run.
	close(stop)
	wg.Wait()
	k := work.KeysFor(periodicQueue)
	for end := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("jobs not drained (log %s)", logf.Name())
		}
		stream := rdb.XLen(ctx, k.Stream).Val()
		var pending int64
		if p := rdb.XPending(ctx, k.Stream, work.Group).Val(); p != nil {
			pending = p.Count
		}
		if stream == 0 && pending == 0 && rdb.ZCard(ctx, k.Retry).Val() == 0 {
			break
		}
		// The last holders may have left with jobs queued: start one to run them.
		env := append(os.Environ(), asBaton+"=1", asPeriodic+"=1", "BATON_REDIS_URL="+srv.URL(), "BATON_HOST=drain", mark)
		hf.fire(env, append([]string{common[0], "--lock-dir", filepath.Join(dir, "locks-drain"), "--host", "drain"}, common[1:]...))
		time.Sleep(time.Second)
	}
	hf.killAll()
	if escaped := leftOver(mark); len(escaped) > 0 {
		t.Errorf("%d processes left running after the run: %v", len(escaped), escaped)
	}

	last, err := rdb.HGet(ctx, periodic.RecordsKey(periodicQueue), "beat").Int64()
	if err != nil {
		t.Fatalf("the entry's record: %v", err)
	}
	ids := map[int64]map[string]bool{} // tick (unix s) → job ids that ran for it
	for _, l := range rdb.LRange(ctx, periodicRuns, 0, -1).Val() {
		tick, id, _ := strings.Cut(l, " ")
		at, err := time.Parse(time.RFC3339, tick)
		if err != nil {
			t.Fatalf("run record %q: %v", l, err)
		}
		if ids[at.Unix()] == nil {
			ids[at.Unix()] = map[string]bool{}
		}
		ids[at.Unix()][id] = true
	}
	var ticks []int64
	for s := range ids {
		ticks = append(ticks, s)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i] < ticks[j] })
	if len(ticks) == 0 {
		t.Fatalf("no periodic job ran (log %s)", logf.Name())
	}
	first, lastS := ticks[0], last/1000
	expected := lastS - first + 1
	var enqueued, duplicated, missing int64
	var dups, holes []string
	for s := first; s <= lastS; s++ {
		n := int64(len(ids[s]))
		enqueued += n
		switch {
		case n == 0:
			missing++
			holes = append(holes, time.Unix(s, 0).UTC().Format(time.TimeOnly))
		case n > 1:
			duplicated++
			dups = append(dups, time.Unix(s, 0).UTC().Format(time.TimeOnly))
		}
	}
	where := fmt.Sprintf("%d hosts, %d run leases", len(fleetHosts), periodicSlots)
	if !fleet {
		where = fmt.Sprintf("1 host, %d flock slots", periodicSlots)
	}
	msg := fmt.Sprintf("periodic chaos: @every 1s for %v on %s; %d candidates, %d holders kill -9'd, %d stopped for %v, Redis restarted at +%v: "+
		"ticks expected %d, enqueued %d, duplicated %d, missing %d",
		*periodicForFlag, where, len(hf.procs), kills.Load(), pauses.Load(), fleetPause, restarted.Sub(start).Round(time.Second),
		expected, enqueued, duplicated, missing)
	t.Log(msg)
	if duplicated > 0 || missing > 0 {
		t.Errorf("ticks duplicated %v, missing %v (log %s)", dups, holes, logf.Name())
	}
}
