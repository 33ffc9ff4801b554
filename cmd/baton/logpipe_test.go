package main

import (
	"bufio"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestLogReaderDies: a holder logs into a pipe (`2>&1 | logger`) whose
// reader dies while a job runs. The job's output is the holder's next log
// line; the holder must not die of SIGPIPE there: the job completes and is
// acknowledged once, the holder goes on with the next jobs (their lines
// are lost) and drains on SIGTERM with exit 0.
func TestLogReaderDies(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	events, release := filepath.Join(r.dir, "events"), filepath.Join(r.dir, "release")
	sigs := filepath.Join(r.dir, "sigs")
	job := r.script("job.sh", `p=$(cat)
echo "start $p" >> `+events+`
grep SigIgn /proc/$$/status > `+sigs+`
while [ "$p" = a ] && [ ! -e `+release+` ]; do sleep 0.01; done
echo "output of $p" >&2
echo "end $p" >> `+events+"\n")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := r.cmd("run", "--log-format", "json", "--slots", "1", "--standby-slots", "0", "--lifetime", "1m", "--", job)
	cmd.Stderr = pw // the holder's fd 2 is the pipe itself, as under cron
	h := r.startCmd(cmd)
	pw.Close()
	var mu sync.Mutex
	var lines []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			lines = append(lines, sc.Text())
			mu.Unlock()
		}
	}()
	logged := func(s string) bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(lines, "\n"), s)
	}
	eventually(t, 10*time.Second, "the holder logs that it holds its slot", func() bool { return logged("holding run slot") })
	r.baton("enqueue", "a")
	eventually(t, 10*time.Second, "job a starts", func() bool { return len(readLines(t, events)) > 0 })
	pr.Close() // the reader dies: nothing reads the pipe any more
	<-read
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "job a acked", func() bool { return r.status().Jobs.Done == 1 })
	r.baton("enqueue", "b", "c")
	eventually(t, 10*time.Second, "jobs b and c acked", func() bool { return r.status().Jobs.Done == 3 })
	if done, code := h.exited(); done {
		t.Fatalf("the holder exited (%d, %v) once its log reader died", code, h.cmd.ProcessState)
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, h.cmd.ProcessState)
	}
	got := readLines(t, events)
	sort.Strings(got)
	if want := "end a,end b,end c,start a,start b,start c"; strings.Join(got, ",") != want {
		t.Fatalf("events %v, want each job started and ended once", got)
	}
	// The holder survives SIGPIPE by handling it, not ignoring it: a job
	// must not inherit an ignored SIGPIPE (bit 13-1 of SigIgn).
	b, _ := os.ReadFile(sigs)
	ign, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(b), "SigIgn:")), 16, 64)
	if err != nil || ign&(1<<(syscall.SIGPIPE-1)) != 0 {
		t.Errorf("a job's ignored signals: %q (%v): SIGPIPE must not be ignored", b, err)
	}
	if s := r.status(); s.Jobs.Done != 3 || s.Jobs.Pending != 0 || s.Jobs.Waiting != 0 {
		t.Fatalf("jobs %+v, want 3 done, none pending or waiting", *s.Jobs)
	}
}
