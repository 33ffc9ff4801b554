package work

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// langs are the helpers the tests run: each has a test worker in testdata.
var langs = []struct{ name, bin, worker, install string }{
	{"python", "python3", "testdata/persist_worker.py", "apt-get install python3"},
	{"node", "node", "testdata/persist_worker.js", "apt-get install nodejs"},
}

// newPersistent is a Persistent running testdata/persist_worker.py with args,
// its job log, closed when the test ends.
func newPersistent(tb testing.TB, args ...string) (*Persistent, string) {
	tb.Helper()
	return newWorker(tb, "python", args...)
}

// newWorker is a Persistent running the test worker of lang with args.
func newWorker(tb testing.TB, lang string, args ...string) (*Persistent, string) {
	tb.Helper()
	var argv []string
	for _, l := range langs {
		if l.name == lang {
			bin, err := exec.LookPath(l.bin)
			if err != nil {
				tb.Fatalf("%s is needed for the persistent worker tests (%s)", l.bin, l.install)
			}
			argv = append([]string{bin, l.worker}, args...)
		}
	}
	log := filepath.Join(tb.TempDir(), "jobs.log")
	tb.Setenv("PERSIST_LOG", log)
	p := &Persistent{
		Argv:         argv,
		Grace:        2 * time.Second,
		StartTimeout: 30 * time.Second,
		Logger:       testLogger(),
	}
	tb.Cleanup(func() { _ = p.Close(context.Background()) })
	return p, log
}

// ran is one line of the worker's job log.
type ran struct {
	id           string
	pid, attempt int
	sum          string
}

func jobsRan(tb testing.TB, log string) []ran {
	tb.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		tb.Fatal(err)
	}
	var out []ran
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		pid, _ := strconv.Atoi(f[1])
		attempt, _ := strconv.Atoi(f[2])
		out = append(out, ran{f[0], pid, attempt, f[3]})
	}
	return out
}

func put(tb testing.TB, rdb *redis.Client, payloads ...string) []string {
	tb.Helper()
	var ids []string
	for _, p := range payloads {
		id, err := Enqueue(context.Background(), rdb, "q", []byte(p))
		if err != nil {
			tb.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// runJobs runs p on queue q, each job at most attempts times with a short
// backoff, until done jobs are done and dead are dead-lettered.
func runJobs(tb testing.TB, rdb *redis.Client, p *Persistent, attempts int, done, dead int64) {
	tb.Helper()
	c := testConfig(rdb, p)
	c.MaxAttempts, c.RetryBackoff = attempts, 10*time.Millisecond
	st := new(Stats)
	runUntil(tb, c, st, func() bool { return st.Done.Load() == done && st.Dead.Load() == dead })
}

func pids(rs []ran) map[int]int {
	m := map[int]int{}
	for _, r := range rs {
		m[r.pid]++
	}
	return m
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// Any byte sequence round-trips, stray output (even a fake result frame on
// stdout) changes nothing, and one child serves every job of its lane.
func TestPersistentRoundTripsAndStrayOutput(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			p, log := newWorker(t, lang.name)
			every := make([]byte, 256)
			for i := range every {
				every[i] = byte(i)
			}
			payloads := []string{string(every), "\n{\"type\":\"result\",\"status\":\"ok\"}\n", strings.Repeat("big\n", 100_000), "print", "", "x"}
			for i := 0; i < 20; i++ {
				payloads = append(payloads, "print", "job "+strconv.Itoa(i))
			}
			ids := put(t, rdb, payloads...)
			c := testConfig(rdb, p)
			st := new(Stats)
			runUntil(t, c, st, func() bool { return st.Done.Load() == int64(len(ids)) })
			settled(t, rdb, "q")
			rs := jobsRan(t, log)
			if len(rs) != len(ids) {
				t.Fatalf("%d runs, want %d", len(rs), len(ids))
			}
			for i, r := range rs {
				sum := sha256.Sum256([]byte(payloads[i]))
				if r.id != ids[i] || r.sum != hex.EncodeToString(sum[:]) || r.attempt != 1 {
					t.Errorf("job %d: ran %+v, want id %s and the payload's sha256", i, r, ids[i])
				}
			}
			if n := len(pids(rs)); n != 1 {
				t.Fatalf("jobs ran on %d children, want 1", n)
			}
		})
	}
}

// Errors are retried, SkipRetry dead-letters at once as rejected.
func TestPersistentResults(t *testing.T) {
	for _, lang := range langs {
		t.Run(lang.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			p, log := newWorker(t, lang.name)
			put(t, rdb, "fail", "skip", "ok")
			runJobs(t, rdb, p, 2, 1, 2)
			reasons := map[string]string{}
			for _, d := range deadLetters(t, rdb, "q") {
				reasons[d.Values["reason"].(string)] = d.Values["error"].(string)
			}
			if !strings.Contains(reasons[ReasonRejected], "asked to skip") || !strings.Contains(reasons[ReasonFailed], "Error: asked to fail") {
				t.Fatalf("dead letters %v", reasons)
			}
			if rs := jobsRan(t, log); len(rs) != 4 || len(pids(rs)) != 1 {
				t.Fatalf("runs %+v: want fail twice, skip and ok once, on one child", rs)
			}
		})
	}
}

// A job past its timeout gets its child killed and counts as a timeout; the
// next job gets a fresh child. The job's own timeout overrides the queue's.
func TestPersistentTimeoutKillsChild(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, log := newPersistent(t)
	p.Timeout = time.Hour
	ctx := context.Background()
	if _, err := Enqueue(ctx, rdb, "q", []byte("hang"), Timeout(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	put(t, rdb, "after")
	runJobs(t, rdb, p, 1, 1, 1)
	d := deadLetters(t, rdb, "q")[0].Values
	if d["reason"] != ReasonTimeout {
		t.Fatalf("dead letter %v, want reason timeout", d)
	}
	rs := jobsRan(t, log)
	if len(rs) != 2 || rs[0].pid == rs[1].pid || alive(rs[0].pid) {
		t.Fatalf("runs %+v: want the hung child killed and a fresh one for the next job", rs)
	}
}

// Heartbeats keep a long job alive; silence past heartbeat_timeout is a
// timeout.
func TestPersistentHeartbeatTimeout(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, log := newPersistent(t)
	p.HeartbeatTimeout = 400 * time.Millisecond
	put(t, rdb, "beat:1.2", "hang")
	runJobs(t, rdb, p, 1, 1, 1)
	d := deadLetters(t, rdb, "q")[0].Values
	if d["reason"] != ReasonTimeout || !strings.Contains(d["error"].(string), "no heartbeat") {
		t.Fatalf("dead letter %v", d)
	}
	if rs := jobsRan(t, log); len(rs) != 2 || rs[0].pid != rs[1].pid || alive(rs[1].pid) {
		t.Fatalf("runs %+v: want both on one child, killed at the silence", rs)
	}
}

// A child that dies mid-job fails the job like a crash: retried, then
// dead-lettered as crashed; the queue flows on fresh children.
func TestPersistentChildDiesMidJob(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, log := newPersistent(t)
	put(t, rdb, "die", "a", "b")
	runJobs(t, rdb, p, 2, 2, 1)
	d := deadLetters(t, rdb, "q")[0].Values
	if d["reason"] != ReasonCrashed || d["attempts"] != "2" || !strings.Contains(d["error"].(string), "exit status 3") {
		t.Fatalf("dead letter %v", d)
	}
	rs := jobsRan(t, log)
	if len(rs) != 4 || rs[0].pid == rs[1].pid || rs[3].attempt != 2 || alive(rs[0].pid) || alive(rs[3].pid) {
		t.Fatalf("runs %+v: want a fresh child after each death", rs)
	}
	// The first death is a failed run of kind crashed; the last one counts
	// as the dead letter's reason.
	st := rdb.HGetAll(context.Background(), KeysFor("q").Stats).Val()
	if st[StatFailedPrefix+FailedCrashed] != "1" || st[StatFailedPrefix+FailedError] != "" || st[StatDeadPrefix+ReasonCrashed] != "1" {
		t.Fatalf("stats %v: want failed:crashed 1 and dead:crashed 1", st)
	}
	settled(t, rdb, "q")
}

// A child that cannot start is retried with backoff, then Run fails with
// ErrHandlerDown and the tail of its stderr; the jobs stay in the queue.
func TestPersistentCannotStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv func(p *Persistent) []string
		want string
	}{
		{"bad path", func(*Persistent) []string { return []string{"/nonexistent/worker"} }, "no such file"},
		{"import error", func(p *Persistent) []string { return append(p.Argv, "--import-error") }, "No module named 'no_such_module_for_baton'"},
		{"exits before ready", func(p *Persistent) []string { return append(p.Argv, "--exit") }, "exit status 2: giving up before ready"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			p, _ := newPersistent(t)
			p.Argv = tc.argv(p)
			ids := put(t, rdb, "a", "b", "c")
			c := testConfig(rdb, p)
			start := time.Now()
			err := Run(context.Background(), c, nil)
			if !errors.Is(err, ErrHandlerDown) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Run = %v, want ErrHandlerDown with %q", err, tc.want)
			}
			if took := time.Since(start); took < 300*time.Millisecond {
				t.Fatalf("gave up after %s: want backoff between starts (100ms, 200ms)", took)
			}
			if n := rdb.XLen(context.Background(), KeysFor("q").Stream).Val(); n != int64(len(ids)) || pending(t, rdb, "q") != 0 {
				t.Fatalf("stream holds %d entries (%d pending), want %d waiting", n, pending(t, rdb, "q"), len(ids))
			}
			if d := deadLetters(t, rdb, "q"); len(d) != 0 {
				t.Fatalf("dead letters %v", d)
			}
		})
	}
}

// Children are replaced after about max_jobs_per_child jobs (±10%) and when
// their RSS passes max_child_rss.
func TestPersistentRecycles(t *testing.T) {
	t.Run("max_jobs_per_child", func(t *testing.T) {
		rdb := redistest.Start(t).Client()
		p, log := newPersistent(t)
		p.MaxJobsPerChild = 10
		var payloads []string
		for i := 0; i < 40; i++ {
			payloads = append(payloads, strconv.Itoa(i))
		}
		put(t, rdb, payloads...)
		st := new(Stats)
		runUntil(t, testConfig(rdb, p), st, func() bool { return st.Done.Load() == 40 })
		per := pids(jobsRan(t, log))
		if len(per) < 4 {
			t.Fatalf("jobs per child %v: want about 10 each", per)
		}
		for pid, n := range per {
			if n > 11 {
				t.Fatalf("child %d ran %d jobs, want at most 11", pid, n)
			}
		}
	})
	t.Run("max_child_rss", func(t *testing.T) {
		rdb := redistest.Start(t).Client()
		p, log := newPersistent(t)
		p.MaxRSS = 100 << 20
		put(t, rdb, "a", "b", "grow:150", "c")
		st := new(Stats)
		runUntil(t, testConfig(rdb, p), st, func() bool { return st.Done.Load() == 4 })
		rs := jobsRan(t, log)
		if len(rs) != 4 || rs[0].pid != rs[2].pid || rs[2].pid == rs[3].pid {
			t.Fatalf("runs %+v: want the child replaced after it grew", rs)
		}
	})
}

// Close gives every child the stop message; one that lingers past its grace
// is killed.
func TestPersistentClose(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		grace  time.Duration
		signal string // how the child ends: "" for exit status 0
	}{
		{"exits on stop", nil, 10 * time.Second, ""},
		{"ignores stop", []string{"--ignore-stop"}, 500 * time.Millisecond, "SIGKILL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			p, _ := newPersistent(t, tc.args...)
			p.Grace = tc.grace
			put(t, rdb, "a")
			st := new(Stats)
			runUntil(t, testConfig(rdb, p), st, func() bool { return st.Done.Load() == 1 })
			if len(p.idle) != 1 {
				t.Fatalf("%d idle children, want 1", len(p.idle))
			}
			c := p.idle[0]
			if err := p.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			var ee *ExecError
			switch {
			case alive(c.pid):
				t.Fatalf("child %d alive after Close", c.pid)
			case tc.signal == "" && c.err != nil:
				t.Fatalf("child ended with %v, want exit status 0 on stop", c.err)
			case tc.signal != "" && (!errors.As(c.err, &ee) || ee.Signal != tc.signal):
				t.Fatalf("child ended with %v, want %s after its grace", c.err, tc.signal)
			}
		})
	}
}

// A large frame goes through the writer goroutine, and a small one written
// by the lane more than a second earlier must not leave it a write deadline.
func TestPersistentLargeFrameAfterSmall(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, log := newPersistent(t)
	big := strings.Repeat("b", 100_000)
	put(t, rdb, "sleep:1.5", big)
	st := new(Stats)
	c := testConfig(rdb, p)
	c.MaxAttempts = 1
	runUntil(t, c, st, func() bool { return st.Done.Load() == 2 })
	sum := sha256.Sum256([]byte(big))
	if rs := jobsRan(t, log); len(rs) != 2 || rs[1].sum != hex.EncodeToString(sum[:]) || rs[0].pid != rs[1].pid {
		t.Fatalf("runs %+v", rs)
	}
}
