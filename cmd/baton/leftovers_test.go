package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
)

// queue is the queue these tests use: its own name, so that the leftover
// sweep of an older baton on this host (which matched BATON_QUEUE and
// BATON_SLOT alone) cannot kill their jobs.
var queue = "trust-" + strconv.Itoa(os.Getpid())

// q inserts --queue after the subcommand: q("run", "--lifetime", "1m").
func q(cmd string, args ...string) []string {
	return append([]string{cmd, "--queue", queue}, args...)
}

// pidsIn reads the pids a job script wrote to path, one per line, and kills
// them when the test ends, so a failing test leaves no sleeps behind.
func pidsIn(t *testing.T, path string, want int) []int {
	t.Helper()
	var pids []int
	eventually(t, 10*time.Second, "pids in "+filepath.Base(path), func() bool {
		pids = pids[:0]
		for _, l := range readLines(t, path) {
			if p, err := strconv.Atoi(strings.TrimSpace(l)); err == nil {
				pids = append(pids, p)
			}
		}
		return len(pids) >= want
	})
	for _, p := range pids {
		if s, err := proc.ReadStat(p); err == nil {
			t.Cleanup(func() {
				if proc.Alive(p, s.Start) {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			})
		}
	}
	return pids
}

// gone reports whether pid has exited (a zombie counts as gone).
func gone(pid int) bool {
	_, err := proc.ReadStat(pid)
	return err != nil
}

// TestSweepKeepsToItsDeployment: two deployments on one host use the same
// queue name and the same Redis server (two databases), each with its own
// lock dir. One's holder is killed mid-job; its next holder kills what that
// job left running, and never the other deployment's job, although both
// carry the same BATON_QUEUE and BATON_SLOT.
func TestSweepKeepsToItsDeployment(t *testing.T) {
	t.Parallel()
	prod := newRig(t)
	staging := &rig{t: t, redis: prod.redis, dir: prod.dir, locks: filepath.Join(prod.dir, "staging-locks"),
		extraEnv: []string{"BATON_REDIS_URL=redis://" + prod.redis.Addr + "/1"}}
	t.Cleanup(func() {
		for _, p := range staging.procs {
			_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	})
	// Attempt 1 leaves a grandchild and waits; a replay returns at once.
	job := func(name string) string {
		pids := filepath.Join(prod.dir, name+".pids")
		return prod.script(name+".sh", `cat >/dev/null
[ "$BATON_ATTEMPT" = 1 ] || exit 0
echo $$ >> `+pids+`
sh -c 'sleep 60 & echo $! >> `+pids+`; wait' &
wait
`)
	}
	args := func(j string) []string {
		return q("run", "--lifetime", "1m", "--poll-interval", "100ms", "--", j)
	}
	stagingJob, prodJob := job("staging"), job("prod")
	staging.start(args(stagingJob)...)
	staging.baton(q("enqueue", "s")...)
	stagingPids := pidsIn(t, filepath.Join(prod.dir, "staging.pids"), 2)

	holder := prod.start(args(prodJob)...)
	prod.baton(q("enqueue", "p")...)
	prodPids := pidsIn(t, filepath.Join(prod.dir, "prod.pids"), 2)
	_ = holder.cmd.Process.Signal(syscall.SIGKILL)
	holder.wait(t, 5*time.Second)

	next := prod.start(args(prodJob)...)
	eventually(t, 10*time.Second, "the prod job replayed and acked", func() bool {
		s := prod.status("--queue", queue)
		return s.Jobs.Done == 1 && s.Jobs.Pending == 0
	})
	for _, p := range prodPids {
		eventually(t, 5*time.Second, "prod leftover "+strconv.Itoa(p)+" killed", func() bool { return gone(p) })
	}
	if !strings.Contains(next.log(), "killed processes left running") {
		t.Errorf("the next prod holder did not say it killed leftovers: %s", next.log())
	}
	for _, p := range stagingPids {
		if gone(p) {
			t.Fatalf("staging job process %d was killed by prod's sweep", p)
		}
	}
}

// TestEscapedJobProcessesAreKilled: processes a job daemonized (a new
// session, a double fork) are killed when the job ends, while the holder goes
// on; one that also scrubbed its environment is killed when the holder exits.
func TestEscapedJobProcessesAreKilled(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pids, d := filepath.Join(r.dir, "pids"), filepath.Join(r.dir, "daemon")
	job := r.script("job.sh", `p=$(cat)
case "$p" in
setsid) setsid sleep 300 & echo $! >> `+pids+` ;;
double) # the daemon must be on its own before the job exits and its group is killed
  (setsid sh -c 'sleep 300 & echo $! > `+d+`.tmp; mv `+d+`.tmp `+d+`' &)
  while [ ! -e `+d+` ]; do sleep 0.01; done; cat `+d+` >> `+pids+` ;;
scrubbed) (env -i setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >> `+pids+`) ;;
esac
`)
	h := r.start(q("run", "--lifetime", "1m", "--", job)...)
	r.baton(q("enqueue", "setsid", "double")...)
	escaped := pidsIn(t, pids, 2)
	eventually(t, 10*time.Second, "both jobs acked", func() bool { return r.status("--queue", queue).Jobs.Done == 2 })
	for _, p := range escaped {
		eventually(t, 5*time.Second, "escaped process "+strconv.Itoa(p)+" killed after its job", func() bool { return gone(p) })
	}
	if done, _ := h.exited(); done {
		t.Fatalf("the holder left: %s", h.log())
	}

	r.baton(q("enqueue", "scrubbed")...)
	scrubbed := pidsIn(t, pids, 3)[2]
	eventually(t, 10*time.Second, "third job acked", func() bool { return r.status("--queue", queue).Jobs.Done == 3 })
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, h.log())
	}
	eventually(t, 5*time.Second, "escaped process with a scrubbed environment killed at holder exit", func() bool { return gone(scrubbed) })
}

// TestExitZeroWithBackgroundChild: a job that exits 0 while a child it put in
// the background still holds its stdout (and stdin, with a payload larger
// than a pipe holds) is done: acked once, never retried; the child is gone.
func TestExitZeroWithBackgroundChild(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pids := filepath.Join(r.dir, "pids")
	runs := filepath.Join(r.dir, "runs")
	job := r.script("job.sh", `echo run >> `+runs+`
exec 3<&0 # an asynchronous command's stdin is /dev/null unless redirected
sleep 30 <&3 &
echo $! >> `+pids+`
echo done
`)
	big := strings.Repeat("x", 256<<10)
	h := r.start(q("run", "--lifetime", "1m", "--shutdown-grace", "2s", "--retry-backoff", "100ms", "--", job)...)
	r.baton(q("enqueue", "small")...)
	enq := r.cmd(q("enqueue")...)
	enq.Stdin = strings.NewReader(big + "\n")
	if out, err := enq.CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v %s", err, out)
	}
	bg := pidsIn(t, pids, 2)
	eventually(t, 15*time.Second, "both jobs acked", func() bool { return r.status("--queue", queue).Jobs.Done == 2 })
	time.Sleep(500 * time.Millisecond) // a retry would be due by now
	if n := len(readLines(t, runs)); n != 2 {
		t.Fatalf("%d runs for 2 jobs that exited 0: %s", n, h.log())
	}
	if out, errOut, code := r.baton(q("dead", "list", "--json")...); code != 0 || strings.Contains(out, `"id"`) {
		t.Fatalf("dead letters (exit %d): %s %s", code, out, errOut)
	}
	if strings.Contains(h.log(), `"level":"warn"`) || strings.Contains(h.log(), `"level":"error"`) {
		t.Errorf("warnings for jobs that succeeded: %s", h.log())
	}
	for _, p := range bg {
		eventually(t, 5*time.Second, "background child "+strconv.Itoa(p)+" gone", func() bool { return gone(p) })
	}
}

// TestJobEnvironmentHasNoSecrets: a job sees its own BATON_* variables and
// never baton's: not the Redis URL (nor its password), not BATON_SPAWNED.
func TestJobEnvironmentHasNoSecrets(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const password = "s3cret-pw-4711"
	if err := r.redis.Client().ConfigSet(t.Context(), "requirepass", password).Err(); err != nil {
		t.Fatal(err)
	}
	r.extraEnv = []string{"BATON_REDIS_URL=redis://:" + password + "@" + r.redis.Addr + "/0", "BATON_SPAWNED=1"}
	envFile := filepath.Join(r.dir, "env")
	job := r.script("job.sh", "cat >/dev/null; env > "+envFile+"\n")
	r.baton(q("enqueue", "x")...)
	h := r.start(q("run", "--lifetime", "1m", "--", job)...)
	eventually(t, 10*time.Second, "job ran", func() bool {
		b, _ := os.ReadFile(envFile)
		return bytes.Contains(b, []byte("BATON_JOB_ID="))
	})
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 10*time.Second)
	b, _ := os.ReadFile(envFile)
	for _, bad := range []string{password, "BATON_REDIS_URL=", "BATON_SPAWNED="} {
		if bytes.Contains(b, []byte(bad)) {
			t.Errorf("job environment holds %q:\n%s", bad, b)
		}
	}
	for _, good := range []string{"BATON_QUEUE=", "BATON_SLOT=", "BATON_ATTEMPT=", "BATON_HOLDER=", "PATH="} {
		if !bytes.Contains(b, []byte(good)) {
			t.Errorf("job environment lacks %q:\n%s", good, b)
		}
	}
}

// TestRunningJobKeepsItsDaemon: with two jobs at once, the end of one kills
// only its own orphans: a daemon the other, still running, job started (and
// that the holder adopted) lives until that job ends.
func TestRunningJobKeepsItsDaemon(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pids, release := filepath.Join(r.dir, "pids"), filepath.Join(r.dir, "release")
	ran := filepath.Join(r.dir, "ran")
	job := r.script("job.sh", `p=$(cat)
case "$p" in
daemon)
  (setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $! >> `+pids+`)
  while [ ! -e `+release+` ]; do sleep 0.01; done ;;
*) echo "$p" >> `+ran+` ;;
esac
`)
	h := r.start(q("run", "--lifetime", "1m", "--concurrency", "2", "--", job)...)
	r.baton(q("enqueue", "daemon")...)
	daemon := pidsIn(t, pids, 1)[0]
	eventually(t, 5*time.Second, "the daemon adopted by the holder", func() bool {
		s, err := proc.ReadStat(daemon)
		return err == nil && s.PPID == h.cmd.Process.Pid
	})
	r.baton(q("enqueue", "a", "b", "c")...)
	eventually(t, 10*time.Second, "three quick jobs done", func() bool { return len(readLines(t, ran)) == 3 })
	time.Sleep(100 * time.Millisecond)
	if gone(daemon) {
		t.Fatal("the running job's daemon was killed when another job ended")
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "its daemon killed once the job ended", func() bool { return gone(daemon) })
	if done, _ := h.exited(); done {
		t.Fatalf("the holder left: %s", h.log())
	}
}
