package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/standby"
)

// TestFrozenHolderIsHealed: a holder SIGSTOPped mid-job keeps its flock and
// cannot fire its own hard deadline. Past the deadline in its record plus
// standby.HealMargin, a standby (at its next poll) or the next candidate
// (which finds every run slot taken) kills it and its job, takes the slot,
// and replays the job, which completes. Nothing is killed before the
// deadline plus margin.
func TestFrozenHolderIsHealed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		standby bool // a standby waits; else a candidate comes after the deadline
	}{
		{"by a standby", true},
		{"by the next candidate", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			events := filepath.Join(r.dir, "events")
			job := hangOnce(r, events)
			out, _, _ := r.baton("enqueue", "x")
			id := strings.TrimSpace(out)
			frozen := r.start("run", "--lifetime", "2s", "--jitter", "0s", "--shutdown-grace", "1s", "--poll-interval", "100ms", "--", job)
			first := waitLine(t, events, 0, 10*time.Second)
			if first[1] != id || first[2] != "1" {
				t.Fatalf("first start %v, want job %s attempt 1", first, id)
			}
			childPID, _ := strconv.Atoi(first[4])
			if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			rec := r.records("default")[0]
			if rec.PID != frozen.cmd.Process.Pid || rec.Deadline.IsZero() {
				t.Fatalf("holder record %+v: want pid %d with a deadline", rec, frozen.cmd.Process.Pid)
			}
			overdue := rec.Deadline.Add(standby.HealMargin)
			t.Logf("holder pid %d stopped; deadline %v from now", rec.PID, time.Until(rec.Deadline).Round(time.Millisecond))
			args := []string{"run", "--lifetime", "1m", "--poll-interval", "100ms", "--", job}
			var healer *process
			if tc.standby {
				healer = r.start(args...)
				eventually(t, 10*time.Second, "standby up", func() bool { return held(r.status().Standby) == 1 })
			} else {
				time.Sleep(time.Until(overdue) + 100*time.Millisecond)
				healer = r.start(args...)
			}
			again := waitLine(t, events, 1, time.Until(overdue)+10*time.Second)
			replayed := time.Now()
			frozen.wait(t, 5*time.Second)
			t.Logf("job replayed %v after deadline + margin; holder killed %v after it",
				replayed.Sub(overdue).Round(time.Millisecond), frozen.end.Sub(overdue).Round(time.Millisecond))
			// The bound: back in service within deadline + margin + one
			// poll (100ms here); generous for a loaded machine.
			if late := replayed.Sub(overdue); tc.standby && late > 3*time.Second {
				t.Fatalf("job replayed %v after deadline + margin; the standby polls every 100ms", late)
			}
			if frozen.end.Before(overdue) {
				t.Fatalf("holder killed %v before its deadline + margin", overdue.Sub(frozen.end))
			}
			if ws, ok := frozen.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
				t.Fatalf("frozen holder ended with %v, want SIGKILL", frozen.cmd.ProcessState)
			}
			if again[1] != id || again[2] != "2" || !strings.HasSuffix(again[3], "/run-0") {
				t.Fatalf("second start %v, want job %s attempt 2 in run-0", again, id)
			}
			eventually(t, 5*time.Second, "the frozen holder's job is gone", func() bool {
				return gone(childPID)
			})
			eventually(t, 10*time.Second, "job acked", func() bool {
				s := r.status()
				return s.Jobs.Done == 1 && s.Jobs.Pending == 0
			})
			if !strings.Contains(healer.log(), "killed an overdue holder") {
				t.Fatalf("the healer did not log the kill:\n%s", healer.log())
			}
			_ = healer.cmd.Process.Signal(syscall.SIGTERM)
			healer.wait(t, 10*time.Second)
		})
	}
}

// waitLine waits for line i (from 0) of the file at path and returns its
// fields.
func waitLine(t *testing.T, path string, i int, within time.Duration) []string {
	t.Helper()
	var f []string
	eventually(t, within, "line "+strconv.Itoa(i+1)+" of "+filepath.Base(path), func() bool {
		lines := readLines(t, path)
		if len(lines) <= i {
			return false
		}
		f = strings.Fields(lines[i])
		return true
	})
	return f
}

// TestFrozenHolderHealedBySibling: with a run slot free and no candidate
// finding every slot taken, a running holder heals its frozen sibling within
// deadline + margin + its one-second look; the slot's next holder replays
// the frozen holder's job.
func TestFrozenHolderHealedBySibling(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events := filepath.Join(r.dir, "events")
	job := hangOnce(r, events)
	out, _, _ := r.baton("enqueue", "x")
	id := strings.TrimSpace(out)
	slots := []string{"--slots", "2", "--standby-slots", "0"}
	frozen := r.start(append(append([]string{"run"}, slots...), "--lifetime", "2s", "--jitter", "0s", "--shutdown-grace", "1s", "--", job)...)
	first := waitLine(t, events, 0, 10*time.Second)
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	set, _ := lock.NewFileSet(r.locks, "default", lock.RoleRun, 2)
	recs, _ := set.Records()
	var rec lock.Record
	for _, x := range recs {
		if x.PID == frozen.cmd.Process.Pid {
			rec = x
		}
	}
	if rec.Deadline.IsZero() {
		t.Fatalf("no record with a deadline for the frozen holder: %+v", recs)
	}
	overdue := rec.Deadline.Add(standby.HealMargin)
	sibling := r.start(append(append([]string{"run"}, slots...), "--lifetime", "1m", "--", job)...)
	frozen.wait(t, time.Until(overdue)+10*time.Second)
	late := frozen.end.Sub(overdue)
	t.Logf("frozen holder killed %v after deadline + margin, by its sibling", late.Round(time.Millisecond))
	if late < 0 || late > 3*time.Second {
		t.Fatalf("killed %v after deadline + margin, want within about one second", late)
	}
	eventually(t, 5*time.Second, "the sibling logs the kill", func() bool {
		return strings.Contains(sibling.log(), "killed an overdue holder")
	})
	// The next holder of the frozen slot replays its job.
	next := r.start(append(append([]string{"run"}, slots...), "--lifetime", "1m", "--", job)...)
	defer func() { _ = next.cmd.Process.Signal(syscall.SIGTERM); _ = sibling.cmd.Process.Signal(syscall.SIGTERM) }()
	eventually(t, 20*time.Second, "the frozen holder's job replayed and done", func() bool {
		return r.status().Jobs.Done == 1
	})
	if again := waitLine(t, events, 1, time.Second); again[1] != id || again[2] != "2" || again[3] != first[3] {
		t.Fatalf("replayed as %v, want job %s attempt 2 on %s", again, id, first[3])
	}
}

// hangOnce is a job that logs its starts to events and, on its first
// attempt, sleeps for a minute: a frozen holder's job.
func hangOnce(r *rig, events string) string {
	return r.script("job.sh", `cat >/dev/null
echo "start $BATON_JOB_ID $BATON_ATTEMPT $BATON_SLOT $$" >> `+events+`
if [ "$BATON_ATTEMPT" = 1 ]; then sleep 60; fi
echo "end $BATON_JOB_ID" >> `+events+"\n")
}

// TestFrozenStandbyIsHealed: a standby frozen (SIGSTOP) keeps its standby
// slot past its wait. Its record carries a deadline (the end of its wait
// plus standby.StandbyGrace): once past it and the margin, the next
// candidate that finds every slot taken kills it and stands by itself.
func TestFrozenStandbyIsHealed(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	args := []string{"run", "--lifetime", "1m", "--standby-wait", "2s", "--poll-interval", "100ms", "--", "true"}
	standbys, _ := lock.NewFileSet(r.locks, "default", lock.RoleStandby, 1)
	r.start(args...)
	eventually(t, 10*time.Second, "holder up", func() bool { return held(r.status().Run) == 1 })
	frozen := r.start(args...)
	var rec lock.Record
	eventually(t, 10*time.Second, "standby record with a deadline", func() bool {
		rs, _ := standbys.Records()
		for _, x := range rs {
			if x.Role == lock.RoleStandby && x.PID == frozen.cmd.Process.Pid && !x.Deadline.IsZero() {
				rec = x
				return true
			}
		}
		return false
	})
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	early := r.start(args...) // before the deadline: nothing to heal, no slot
	if code := early.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("candidate exit %d\n%s", code, early.log())
	}
	if done, _ := frozen.exited(); done {
		t.Fatal("a standby was killed before its deadline")
	}
	time.Sleep(time.Until(rec.Deadline.Add(standby.HealMargin)) + 100*time.Millisecond)
	healer := r.start(args...)
	frozen.wait(t, 10*time.Second)
	if ws, ok := frozen.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("frozen standby ended with %v, want SIGKILL", frozen.cmd.ProcessState)
	}
	eventually(t, 10*time.Second, "the healer stands by", func() bool {
		rs, _ := standbys.Records()
		for _, x := range rs {
			if x.Role == lock.RoleStandby && x.PID == healer.cmd.Process.Pid {
				return true
			}
		}
		return false
	})
}
