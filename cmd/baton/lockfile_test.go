package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
)

// TestLockFileRemovedUnderHolder: the run slot's lock file, or the whole
// lock dir, is removed under a live holder (a tmp cleaner, a deploy) while
// a standby waits and cron keeps starting candidates. The kernel keeps the
// holder's flock on the unlinked file, so a candidate that locked a new file
// would be a second holder of one slot; one that finds the holder stopped
// (it cannot restore its file first) must defer to it. Asserted: never more than one run
// holder (process names, sampled), the holder keeps its slot (restored file,
// record, status), nothing is killed, and no job runs twice.
func TestLockFileRemovedUnderHolder(t *testing.T) {
	t.Parallel()
	removeFile := func(locks string) error { return os.Remove(filepath.Join(locks, "default.run.0")) }
	// rm may fail (directory not empty) when a holder restores its file
	// while rm runs: it removed the dir all the same.
	removeDir := func(locks string) error { _ = exec.Command("rm", "-rf", locks).Run(); return nil }
	for _, tc := range []struct {
		name   string
		remove func(locks string) error
		// stopped: the holder is stopped (SIGSTOP) from before the removal
		// until the candidates are done, so it cannot restore its file
		// first: the candidates and the standby must defer to it.
		stopped bool
	}{
		{"lock file", removeFile, false},
		{"lock dir", removeDir, false},
		{"lock file, holder stopped", removeFile, true},
		{"lock dir, holder stopped", removeDir, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			events := filepath.Join(r.dir, "events")
			job := r.script("job.sh", "cat >/dev/null; echo \"start $BATON_JOB_ID\" >> "+events+"; sleep 0.3\n")
			t0 := time.Now()
			args := []string{"run", "--slots", "1", "--standby-slots", "1", "--lifetime", "1m", "--poll-interval", "50ms", "--", job}
			holder := r.start(args...)
			eventually(t, 10*time.Second, "holder up", func() bool { return held(r.status().Run) == 1 })
			sb := r.start(args...)
			eventually(t, 10*time.Second, "standby up", func() bool { return held(r.status().Standby) == 1 })

			t.Logf("%v: holder and standby up", time.Since(t0))
			const jobs = 10 // run while the file is removed and after
			payloads := []string{"enqueue"}
			for i := 0; i < jobs; i++ {
				payloads = append(payloads, strconv.Itoa(i))
			}
			r.baton(payloads...)
			stop := r.sampleRunHolders()
			if tc.stopped {
				_ = holder.cmd.Process.Signal(syscall.SIGSTOP)
			}
			if err := tc.remove(r.locks); err != nil {
				t.Fatal(err)
			}
			var cands []*process
			for i := 0; i < 6; i++ {
				cands = append(cands, r.start(args...))
				time.Sleep(20 * time.Millisecond)
			}
			for _, c := range cands {
				if code := c.wait(t, 10*time.Second); code != 0 {
					t.Fatalf("candidate exit %d: %s", code, c.log())
				}
			}
			if tc.stopped {
				time.Sleep(200 * time.Millisecond) // a few more standby polls
				_ = holder.cmd.Process.Signal(syscall.SIGCONT)
			}
			t.Logf("%v: removed; candidates done", time.Since(t0))
			eventually(t, 30*time.Second, "every job done", func() bool { return r.status().Jobs.Done == jobs })
			t.Logf("%v: jobs done", time.Since(t0))
			if n := stop(); n != 1 {
				t.Fatalf("%d processes held the run slot at once", n)
			}
			for name, p := range map[string]*process{"holder": holder, "standby": sb} {
				if done, code := p.exited(); done {
					t.Fatalf("%s exited (%d): %s", name, code, p.log())
				}
			}
			s := r.status()
			if run := s.Run[0]; !run.Held || run.PID != holder.cmd.Process.Pid {
				t.Fatalf("run slot %+v, want held by the holder, pid %d", run, holder.cmd.Process.Pid)
			}
			if strings.Contains(holder.log(), "slot lost") {
				t.Fatalf("holder gave up its slot:\n%s", holder.log())
			}
			starts := map[string]int{}
			for _, l := range readLines(t, events) {
				starts[l]++
				if starts[l] > 1 {
					t.Fatalf("%q twice", l)
				}
			}
		})
	}
}

// sampleRunHolders watches the rig's live processes every few milliseconds
// until stop, which returns the most that were named as run-slot holders
// (baton:run:<i>) at once.
func (r *rig) sampleRunHolders() (stop func() int) {
	quit, done := make(chan struct{}), make(chan struct{})
	most := 0
	go func() {
		defer close(done)
		for {
			n := 0
			r.mu.Lock()
			for _, p := range r.procs {
				if done, _ := p.exited(); done {
					continue
				}
				if name, err := proc.Name(p.cmd.Process.Pid); err == nil && strings.HasPrefix(name, "baton:run:") {
					n++
				}
			}
			r.mu.Unlock()
			most = max(most, n)
			select {
			case <-quit:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	var once sync.Once
	return func() int { once.Do(func() { close(quit); <-done }); return most }
}

// TestStatusShowsHolderWithoutRecord: the holder's record cannot be written
// (a directory where it goes, as deterministic as a full disk). status must
// still show the slot held, by the flock owner, "held, record unreadable";
// the holder says so once at error, keeps working and retrying, and says
// when the record is back.
func TestStatusShowsHolderWithoutRecord(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if err := os.MkdirAll(filepath.Join(r.locks, "default.run.0.json"), 0o750); err != nil {
		t.Fatal(err)
	}
	job := r.script("job.sh", "cat >/dev/null\n")
	h := r.start("run", "--slots", "1", "--standby-slots", "0", "--lifetime", "1m", "--", job)
	pid := h.cmd.Process.Pid
	eventually(t, 10*time.Second, "holder logs the publish failure", func() bool {
		return strings.Contains(h.log(), "cannot publish the slot record")
	})
	s := r.status()
	if run := s.Run[0]; !run.Held || !run.NoRecord || run.PID != pid {
		t.Fatalf("status run slot %+v, want held by %d without a record", run, pid)
	}
	out, _, _ := r.baton("status")
	if !strings.Contains(out, "held, record unreadable") || !strings.Contains(out, strconv.Itoa(pid)) {
		t.Fatalf("status table:\n%s", out)
	}
	r.baton("enqueue", "a")
	eventually(t, 10*time.Second, "job done without a record", func() bool { return r.status().Jobs.Done == 1 })
	if err := os.Remove(filepath.Join(r.locks, "default.run.0.json")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "record published again", func() bool {
		run := r.status().Run[0]
		return run.Held && !run.NoRecord && run.PID == pid
	})
	// The lock watcher may put the record back first; the publish loop
	// logs the recovery at its next tick.
	eventually(t, 10*time.Second, "recovery logged", func() bool {
		return strings.Contains(h.log(), "slot record published again")
	})
	if n := strings.Count(h.log(), "cannot publish the slot record"); n != 1 {
		t.Fatalf("publish failure logged %d times, want once:\n%s", n, h.log())
	}
}
