package main

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// TestRedisDownTooLong: a holder whose Redis stays down past redis_down_exit
// stops, exits 1 with one clear line naming no password, and frees its slot.
func TestRedisDownTooLong(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := r.start("run", "--lifetime", "1m", "--redis-down-exit", "2s", "--", "/bin/true")
	eventually(t, 10*time.Second, "holder up", func() bool { return held(r.status().Run) == 1 })
	r.redis.Stop()
	stopped := time.Now()
	code := h.wait(t, 30*time.Second)
	took := time.Since(stopped)
	lines := strings.Split(strings.TrimSpace(h.log()), "\n")
	last := lines[len(lines)-1]
	t.Logf("exit %d %v after Redis went down: %s", code, took.Round(time.Millisecond), last)
	// The logs are JSON lines, and so is the error the holder exits with.
	var line struct{ Level, Message string }
	if code != 1 || json.Unmarshal([]byte(last), &line) != nil || line.Level != "error" ||
		!strings.HasPrefix(line.Message, "redis unavailable for 2s") {
		t.Fatalf("exit %d, last line %q", code, last)
	}
	if took > 15*time.Second {
		t.Fatalf("took %v to give up", took)
	}
	recs := r.records("default")
	if recs[0].Held {
		t.Fatal("slot still held")
	}
}

// TestRedisRestartCarriesOn: Redis restarted with appendonly mid-run: the
// holder carries on; every job runs, none twice, nothing left behind.
func TestRedisRestartCarriesOn(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.Appendonly)
	ran := filepath.Join(r.dir, "ran")
	job := r.script("job.sh", "cat >> "+ran+"; echo >> "+ran+"; sleep 0.01\n")
	args := []string{"enqueue", "-q"}
	for i := 0; i < 300; i++ {
		args = append(args, "job-"+strconv.Itoa(i))
	}
	r.baton(args...)
	h := r.start("run", "--lifetime", "2m", "--", job)
	eventually(t, 20*time.Second, "a third done", func() bool { return len(readLines(t, ran)) >= 100 })
	r.redis.Restart()
	eventually(t, 60*time.Second, "all done", func() bool {
		s := r.status()
		return s.Jobs.Done == 300 && s.Jobs.Waiting == 0 && s.Jobs.Pending == 0
	})
	counts := map[string]int{}
	for _, l := range readLines(t, ran) {
		counts[l]++
	}
	for i := 0; i < 300; i++ {
		if n := counts["job-"+strconv.Itoa(i)]; n != 1 {
			t.Errorf("job-%d ran %d times", i, n)
		}
	}
	if exited, _ := h.exited(); exited {
		t.Fatalf("the holder did not carry on: %s", h.log())
	}
}

// TestScriptingDisabled: with EVAL and EVALSHA renamed away a holder could
// never acknowledge a job: it refuses to start with one line naming the
// cause, runs nothing, and the job stays queued.
func TestScriptingDisabled(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.Option{"--rename-command", "EVALSHA", "", "--rename-command", "EVAL", ""})
	ran := filepath.Join(r.dir, "ran")
	r.baton("enqueue", "job-1")
	_, errOut, code := r.baton("run", "--lifetime", "10s", "--", r.script("job.sh", "cat >> "+ran+"\n"))
	if code != 1 || !strings.Contains(errOut, "does not run Lua scripts") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	if got := readLines(t, ran); len(got) != 0 {
		t.Fatalf("ran %q", got)
	}
	if s := r.status(); s.Jobs.Waiting != 1 || held(s.Run) != 0 {
		t.Fatalf("status %+v, want the job waiting and no holder", s)
	}
}

// TestStatusShowsOOM: at maxmemory status says so, with the hint; with an
// eviction policy it warns that jobs may be evicted.
func TestStatusShowsOOM(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.Option{"--maxmemory", "1", "--maxmemory-policy", "noeviction"})
	out, _, _ := r.baton("status")
	if !strings.Contains(out, "redis OUT OF MEMORY") || !strings.Contains(out, "hint: give Redis headroom") {
		t.Fatalf("status at maxmemory:\n%s", out)
	}
	r2 := newRig(t, redistest.Option{"--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"})
	out, _, _ = r2.baton("status")
	if !strings.Contains(out, "maxmemory-policy is allkeys-lru: at maxmemory Redis may evict queued jobs") {
		t.Fatalf("status with an eviction policy:\n%s", out)
	}
}
