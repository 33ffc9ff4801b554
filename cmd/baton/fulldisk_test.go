package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/standby"
)

// fullDisk mounts a small tmpfs at dir (root only) and returns a func
// that fills it to the last byte. The mount is detached when the test ends,
// whatever still has files open on it.
func fullDisk(t *testing.T, dir string) (fill func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("a full disk needs a tmpfs mount: run this test as root")
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0750", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return func() {
		t.Helper()
		f, err := os.Create(filepath.Join(dir, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for _, chunk := range []int{64 << 10, 1} {
			b := make([]byte, chunk)
			for {
				if _, err = f.Write(b); err != nil {
					break
				}
			}
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
		}
	}
}

// TestFrozenHolderOnFullDiskIsHealed: the lock dir's filesystem is full when
// a holder wins its slot, so its record cannot be written. Its hard deadline
// is still known (the tenure in the lock file, written in place), so once it
// is frozen (SIGSTOP) past that deadline plus the margin, the next
// candidate kills it, takes the slot and replays its job.
func TestFrozenHolderOnFullDiskIsHealed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	fill := fullDisk(t, filepath.Join(r.dir, "fs"))
	r.locks = filepath.Join(r.dir, "fs", "locks")
	events := filepath.Join(r.dir, "events") // off the full disk
	job := hangOnce(r, events)
	one := []string{"--slots", "1", "--standby-slots", "0", "--poll-interval", "100ms"}
	// Slots have been used before the disk filled up.
	first := r.start(append(append([]string{"run"}, one...), "--lifetime", "1s", "--jitter", "0s", "--", job)...)
	if code := first.wait(t, 15*time.Second); code != 0 {
		t.Fatalf("first holder exit %d:\n%s", code, first.log())
	}
	fill()
	out, _, _ := r.baton("enqueue", "x")
	id := strings.TrimSpace(out)
	const tenure = 2*time.Second + time.Second + 2*time.Second // lifetime + shutdown_grace + the hard margin
	frozen := r.start(append(append([]string{"run"}, one...), "--lifetime", "2s", "--jitter", "0s", "--shutdown-grace", "1s", "--", job)...)
	started := waitLine(t, events, 0, 10*time.Second)
	if started[1] != id || started[2] != "1" {
		t.Fatalf("first start %v, want job %s attempt 1", started, id)
	}
	if !strings.Contains(frozen.log(), "cannot publish the slot record") {
		t.Fatalf("the record was written on a full disk:\n%s", frozen.log())
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Its deadline is tenure after it won the slot: after it started, and
	// before its job started.
	earliest := frozen.start.Add(tenure + standby.HealMargin)
	latest := time.Now().Add(tenure + standby.HealMargin)
	time.Sleep(time.Until(latest) + 100*time.Millisecond)
	// cron: a candidate every half second, until one heals the slot
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if done, _ := frozen.exited(); done {
			break
		}
		r.start(append(append([]string{"run"}, one...), "--lifetime", "1m", "--", job)...)
	}
	frozen.wait(t, 5*time.Second)
	if frozen.end.Before(earliest) {
		t.Fatalf("holder killed %v before its deadline + margin", earliest.Sub(frozen.end))
	}
	if ws, ok := frozen.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("frozen holder ended with %v, want SIGKILL", frozen.cmd.ProcessState)
	}
	t.Logf("frozen holder without a record killed %v after deadline + margin", frozen.end.Sub(latest).Round(time.Millisecond))
	if late := frozen.end.Sub(latest); late > 5*time.Second {
		t.Fatalf("killed %v after deadline + margin; a candidate came every half second", late)
	}
	// The candidate that healed it holds the slot and replays its job.
	again := waitLine(t, events, 1, 15*time.Second)
	if again[1] != id || again[2] != "2" || !strings.HasSuffix(again[3], "/run-0") {
		t.Fatalf("second start %v, want job %s attempt 2 in run-0", again, id)
	}
	eventually(t, 10*time.Second, "job acked", func() bool {
		s := r.status()
		return s.Jobs.Done == 1 && s.Jobs.Pending == 0
	})
}

// TestHolderRefusesSlotWhenDeadlineUnwritable: on a full disk a slot never
// held before has no room for its tenure, and the record cannot be written
// either: nobody could ever prove the holder overdue. It refuses the slot
// with a clear error before it takes a job.
func TestHolderRefusesSlotWhenDeadlineUnwritable(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	fill := fullDisk(t, filepath.Join(r.dir, "fs"))
	r.locks = filepath.Join(r.dir, "fs", "locks")
	if err := os.Mkdir(r.locks, 0o750); err != nil {
		t.Fatal(err)
	}
	fill()
	r.baton("enqueue", "x")
	_, errOut, code := r.baton("run", "--slots", "1", "--standby-slots", "0", "--lifetime", "1m", "--", "true")
	if code != 1 || !strings.Contains(errOut, "refusing slot run-0: its hard deadline cannot be published") ||
		!strings.Contains(errOut, "no space left on device") || !strings.Contains(errOut, "free space on the filesystem of lock_dir") {
		t.Fatalf("exit %d, stderr:\n%s\nwant exit 1, refusing the slot for want of space, with a hint", code, errOut)
	}
	if s := r.status(); s.Jobs.Waiting != 1 || held(s.Run) != 0 {
		t.Fatalf("status %+v: want the job waiting and no holder", s)
	}
}
