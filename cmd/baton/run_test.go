package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/lock"
)

// records reads queue q's run slot records directly (status needs Redis).
func (r *rig) records(q string) []lock.Record {
	return r.recordsOf(lock.NewFileSet(r.locks, q, lock.RoleRun, 1))
}

// recordsOf reads every slot record of a set just made.
func (r *rig) recordsOf(s lock.Set, err error) []lock.Record {
	r.t.Helper()
	if err != nil {
		r.t.Fatal(err)
	}
	recs, err := s.Records()
	if err != nil {
		r.t.Fatal(err)
	}
	return recs
}

// killHolders SIGKILLs every process that holds a slot of queue q, spawned
// ones included (they are not our children).
func (r *rig) killHolders(q string) {
	for _, role := range []string{lock.RoleRun, lock.RoleStandby} {
		s, _ := lock.NewFileSet(r.locks, q, role, 64)
		recs, _ := s.Records()
		for _, rec := range recs {
			if rec.Held {
				_ = syscall.Kill(rec.PID, syscall.SIGKILL)
			}
		}
	}
}

// TestCandidatesAtOnce: 3N+5 candidates started at once against N run and N
// standby slots: N consume, N stand by, the rest exit 0 at once.
func TestCandidatesAtOnce(t *testing.T) {
	t.Parallel()
	const n = 3
	r := newRig(t)
	slots := filepath.Join(r.dir, "slots")
	job := r.script("job.sh", "cat >/dev/null; echo \"$BATON_SLOT\" >> "+slots+"; sleep 0.05\n")
	var ps []*process
	for i := 0; i < 3*n+5; i++ {
		ps = append(ps, r.start("run", "--slots", strconv.Itoa(n), "--lifetime", "1m", "--poll-interval", "50ms", "--", job))
	}
	var losers []*process
	eventually(t, 20*time.Second, "n+5 candidates exit", func() bool {
		losers = losers[:0]
		for _, p := range ps {
			if done, _ := p.exited(); done {
				losers = append(losers, p)
			}
		}
		return len(losers) >= n+5
	})
	var slowest time.Duration
	for _, p := range losers {
		if _, code := p.exited(); code != 0 {
			t.Fatalf("a losing candidate exited %d: %s", code, p.log())
		}
		if p.log() != "" {
			t.Errorf("a losing candidate wrote to stderr (cron would mail it): %s", p.log())
		}
		slowest = max(slowest, p.end.Sub(p.start))
	}
	t.Logf("slowest losing candidate: %v (bound here is generous; see make bench for loser_wall_ms)", slowest)
	if slowest > 5*time.Second {
		t.Fatalf("a losing candidate took %v", slowest)
	}
	var st statusJSON
	eventually(t, 10*time.Second, "N holders and N standbys", func() bool {
		st = r.status("--slots", strconv.Itoa(n))
		return held(st.Run) == n && held(st.Standby) == n
	})
	if len(losers) != n+5 {
		t.Fatalf("%d candidates exited, want %d", len(losers), n+5)
	}
	for _, s := range st.Run {
		if name, _ := proc.Name(s.PID); name != "baton:run:"+strconv.Itoa(s.Slot) {
			t.Errorf("holder of run-%d is named %q in ps", s.Slot, name)
		}
	}
	for _, s := range st.Standby {
		if name, _ := proc.Name(s.PID); name != "baton:standby" {
			t.Errorf("standby is named %q in ps", name)
		}
	}

	// Exactly the N holders consume.
	payloads := make([]string, 30)
	for i := range payloads {
		payloads[i] = "p" + strconv.Itoa(i)
	}
	if _, errOut, code := r.baton(append([]string{"enqueue", "-q"}, payloads...)...); code != 0 {
		t.Fatalf("enqueue: %s", errOut)
	}
	eventually(t, 30*time.Second, "30 jobs done", func() bool { return r.status("--slots", strconv.Itoa(n)).Jobs.Done == 30 })
	seen := map[string]bool{}
	for _, s := range readLines(t, slots) {
		seen[s] = true
		if !strings.Contains(s, "/run-") {
			t.Errorf("job ran in %q, not a run slot", s)
		}
	}
	if len(seen) != n {
		t.Errorf("jobs ran in %d slots %v, want %d", len(seen), seen, n)
	}
	// SIGTERM drains everyone, standbys included, with exit 0.
	for _, p := range ps {
		if done, _ := p.exited(); !done {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	for _, p := range ps {
		if code := p.wait(t, 20*time.Second); code != 0 {
			t.Errorf("exit %d after SIGTERM: %s", code, p.log())
		}
	}
}

// TestKill9HolderMidJob: a standby is consuming within a second, the killed
// job runs again in the slot's next holder without waiting for a timeout, and
// the killed holder's child does not outlive it (Pdeathsig), nor what that
// child started (the slot's next holder kills it).
func TestKill9HolderMidJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", `p=$(cat)
echo "start $BATON_JOB_ID $BATON_ATTEMPT $BATON_SLOT $$" >> `+events+`
if [ "$p" = slow ] && [ "$BATON_ATTEMPT" = 1 ]; then sleep 60 & echo "grandchild $!" >> `+events+`; wait; fi
echo "end $BATON_JOB_ID" >> `+events+"\n")
	args := []string{"run", "--lifetime", "1m", "--poll-interval", "100ms", "--", job}
	holder := r.start(args...)
	eventually(t, 10*time.Second, "holder up", func() bool { return held(r.status().Run) == 1 })
	sb := r.start(args...)
	eventually(t, 10*time.Second, "standby up", func() bool { return held(r.status().Standby) == 1 })

	out, _, _ := r.baton("enqueue", "slow")
	id := strings.TrimSpace(out)
	var childPID, grandchildPID int
	eventually(t, 10*time.Second, "job started", func() bool {
		lines := readLines(t, events)
		if len(lines) < 2 {
			return false
		}
		f := strings.Fields(lines[0])
		childPID, _ = strconv.Atoi(f[4])
		grandchildPID, _ = strconv.Atoi(strings.Fields(lines[1])[1])
		return f[1] == id && f[2] == "1"
	})
	killed := time.Now()
	_ = holder.cmd.Process.Signal(syscall.SIGKILL)
	holder.wait(t, 5*time.Second)

	var again []string
	eventually(t, 10*time.Second, "killed job runs again", func() bool {
		lines := readLines(t, events)
		if len(lines) < 3 {
			return false
		}
		again = strings.Fields(lines[2])
		return true
	})
	took := time.Since(killed)
	t.Logf("kill -9 to the job running again: %v", took)
	if again[1] != id || again[2] != "2" || !strings.HasSuffix(again[3], "/run-0") {
		t.Fatalf("second start %v, want job %s attempt 2 in run-0", again, id)
	}
	if took > 3*time.Second {
		t.Fatalf("replay took %v; the standby polls every 100ms", took)
	}
	eventually(t, 5*time.Second, "the killed holder's child is gone", func() bool {
		return gone(childPID)
	})
	eventually(t, 5*time.Second, "the child's own child is gone", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", grandchildPID))
		return err != nil || strings.Contains(string(b), ") Z ")
	})
	eventually(t, 10*time.Second, "job acked", func() bool {
		s := r.status()
		return s.Jobs.Done == 1 && s.Jobs.Pending == 0 && s.Jobs.Waiting == 0
	})
	_ = sb.cmd.Process.Signal(syscall.SIGTERM)
	if code := sb.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("promoted standby exit %d: %s", code, sb.log())
	}
	// The replay is news at info level, with its count: it is what a kill
	// leaves behind, and the one line an operator reads after one.
	replayLines := 0
	for _, l := range strings.Split(sb.log(), "\n") {
		if strings.Contains(l, "left pending by this slot's previous holder") &&
			strings.Contains(l, `"level":"info"`) && strings.Contains(l, `"entries":1,`) {
			replayLines++
		}
	}
	if replayLines != 1 {
		t.Fatalf("%d info lines about the replay, want 1:\n%s", replayLines, sb.log())
	}
}

// TestQuietAtWarn: at --log-level warn, a lifetime that goes to plan (a job
// done, the lifetime over) prints nothing, so cron sends no mail.
func TestQuietAtWarn(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", "cat >/dev/null\n")
	if _, errOut, code := r.baton("enqueue", "a"); code != 0 {
		t.Fatalf("enqueue exit %d: %s", code, errOut)
	}
	out, errOut, code := r.baton("run", "--log-level", "warn", "--lifetime", "1s", "--jitter", "0", "--", job)
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("run at warn: exit %d, stdout %q, stderr %q; want 0 and nothing", code, out, errOut)
	}
	if s := r.status(); s.Jobs.Done != 1 {
		t.Fatalf("jobs done %d, want 1", s.Jobs.Done)
	}
}

// TestSigtermMidJob: the job finishes, is acked once, the holder exits 0.
func TestSigtermMidJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := r.script("job.sh", "cat >/dev/null; echo start >> "+events+"; sleep 1; echo end >> "+events+"\n")
	r.baton("enqueue", "a", "b", "c")
	h := r.start("run", "--standby-slots", "0", "--lifetime", "1m", "--", job)
	eventually(t, 10*time.Second, "job started", func() bool { return len(readLines(t, events)) > 0 })
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, h.log())
	}
	if got := readLines(t, events); strings.Join(got, " ") != "start end" {
		t.Fatalf("events %v, want the in-flight job to finish and no new one to start", got)
	}
	s := r.status()
	if s.Jobs.Done != 1 || s.Jobs.Pending != 0 || s.Jobs.Waiting != 2 {
		t.Fatalf("jobs %+v, want 1 done, 0 pending, 2 waiting", *s.Jobs)
	}
}

// TestTenThousandExecJobs: 10,000 jobs through 4 slots fed by one spawn=4
// candidate; all done, stream empty, nothing pending.
func TestTenThousandExecJobs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: 10,000 exec jobs")
	}
	const jobs = 10000
	r := newRig(t)
	t.Cleanup(func() { r.killHolders("default") })
	var in strings.Builder
	for i := 0; i < jobs; i++ {
		fmt.Fprintf(&in, "job-%d\n", i)
	}
	cmd := r.cmd("enqueue", "-q")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("enqueue: %v %s", err, out)
	}
	start := time.Now()
	first := r.start("run", "--slots", "4", "--standby-slots", "0", "--spawn", "4", "--lifetime", "5m", "--", "/bin/true")
	eventually(t, 10*time.Second, "4 holders from one spawn=4 candidate", func() bool { return held(r.status("--slots", "4").Run) == 4 })
	eventually(t, 4*time.Minute, "10,000 jobs done", func() bool { return r.status().Jobs.Done == jobs })
	t.Logf("10,000 exec jobs through 4 slots: %v (race-instrumented binary)", time.Since(start).Round(time.Millisecond))
	s := r.status()
	if s.Jobs.Waiting != 0 || s.Jobs.Pending != 0 {
		t.Fatalf("jobs %+v", *s.Jobs)
	}
	if n := r.redis.Client().XLen(t.Context(), "baton:{default}").Val(); n != 0 {
		t.Fatalf("stream holds %d entries", n)
	}
	_ = first.cmd.Process.Signal(syscall.SIGTERM)
	first.wait(t, 20*time.Second)
}

// TestRedisUnreachable: exit 1 within a bounded time, one JSON line (the
// log format asked for) naming the address without its password, with a
// hint; no slot left held.
func TestRedisUnreachable(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	cmd := r.cmd("run", "--redis-url", "redis://:hunter2@127.0.0.1:1/0", "--log-format", "json", "--", "/bin/true")
	var errb strings.Builder
	cmd.Stderr = &errb
	start := time.Now()
	err := cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("exit %d (%v), want 1", code, err)
	}
	if el := time.Since(start); el > 15*time.Second {
		t.Fatalf("took %v", el)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	var line struct{ Level, Message, Hint string }
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &line) != nil || line.Level != "error" ||
		line.Message != "redis at redis://:xxxxx@127.0.0.1:1/0: connection refused" || line.Hint == "" ||
		strings.Contains(errb.String(), "hunter2") {
		t.Fatalf("stderr %q", errb.String())
	}
	if s := r.status(); held(s.Run) != 0 {
		t.Fatal("slot left held")
	}
}

// TestStandbyTimesOut: a standby that is never promoted leaves after
// standby_wait with exit 0 and frees its slot.
func TestStandbyTimesOut(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h := r.start("run", "--lifetime", "1m", "--", "/bin/true")
	eventually(t, 10*time.Second, "holder up", func() bool { return held(r.status().Run) == 1 })
	sb := r.start("run", "--standby-wait", "300ms", "--", "/bin/true")
	if code := sb.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("standby exit %d: %s", code, sb.log())
	}
	if held(r.status().Standby) != 0 {
		t.Fatal("standby slot still held")
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	h.wait(t, 10*time.Second)
}

// TestGraceEndKillsExecJob: a job that ignores SIGTERM cannot keep its holder
// past lifetime + shutdown_grace: it is killed, stays pending, exit 0.
func TestGraceEndKillsExecJob(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pidFile := filepath.Join(r.dir, "pid")
	job := r.script("job.sh", "trap '' TERM; echo $$ > "+pidFile+"; while :; do sleep 0.1; done\n")
	r.baton("enqueue", "x")
	start := time.Now()
	h := r.start("run", "--lifetime", "1s", "--jitter", "1ms", "--shutdown-grace", "1s", "--job-timeout", "0s", "--", job)
	code := h.wait(t, 20*time.Second)
	el := time.Since(start)
	t.Logf("holder left after %v (lifetime 1s + grace 1s)", el)
	if code != 0 || el > 8*time.Second {
		t.Fatalf("exit %d after %v: %s", code, el, h.log())
	}
	b, _ := os.ReadFile(pidFile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	eventually(t, 5*time.Second, "job process gone", func() bool { return gone(pid) })
	if s := r.status(); s.Jobs.Pending != 1 {
		t.Fatalf("the unfinished job must stay pending: %+v", *s.Jobs)
	}
}

// TestHardDeadline: a Go handler that ignores its context cannot be stopped,
// so the process leaves by lifetime + shutdown_grace + a margin, exit 1.
func TestHardDeadline(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = []string{testHandler + "=hang"}
	r.baton("enqueue", "x")
	start := time.Now()
	h := r.start("run", "--lifetime", "1s", "--jitter", "1ms", "--shutdown-grace", "1s")
	code := h.wait(t, 20*time.Second)
	el := time.Since(start)
	t.Logf("holder left after %v (lifetime 1s + grace 1s + margin 2s)", el)
	if code != 1 || el > 10*time.Second || !strings.Contains(h.log(), "hard deadline") {
		t.Fatalf("exit %d after %v: %s", code, el, h.log())
	}
	if s := r.status(); s.Jobs.Pending != 1 {
		t.Fatalf("the unfinished job must stay pending: %+v", *s.Jobs)
	}
}
