package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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

// stalledLog starts a holder of one run slot running job (extra: more
// run flags), with its stderr
// a pipe that the test reads until the holder holds its slot and then
// stops reading, keeping the pipe open: a `2>&1 | logger` whose logger is
// stopped. It returns the holder and the pipe's reader, to read on later.
func stalledLog(t *testing.T, r *rig, job string, extra ...string) (*process, *bufio.Reader) {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pr.Close() })
	args := append([]string{"run", "--log-format", "json", "--slots", "1", "--standby-slots", "0", "--lifetime", "1m"}, extra...)
	cmd := r.cmd(append(args, "--", job)...)
	cmd.Stderr = pw
	h := r.startCmd(cmd)
	pw.Close()
	br := bufio.NewReader(pr)
	holding := make(chan error, 1)
	go func() {
		for {
			l, err := br.ReadString('\n')
			if err != nil || strings.Contains(l, "holding run slot") {
				holding <- err
				return
			}
		}
	}()
	select {
	case err := <-holding:
		if err != nil {
			t.Fatalf("read the holder's log: %v\n", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the holder did not log that it holds its slot")
	}
	return h, br
}

// loudJob writes its OutputLimit (16 KiB) of stderr and more, which the
// holder logs line by line: a few of them fill a pipe nobody reads.
func loudJob(r *rig) string {
	return r.script("loud.sh", `cat >/dev/null
i=0
while [ $i -lt 200 ]; do
  echo "line $i of a job that talks a lot xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" >&2
  i=$((i+1))
done
`)
}

// TestLogReaderStalls: the holder's log reader stops reading but keeps
// the pipe open (a stopped or hung `| logger`). The holder goes on
// acknowledging jobs whose output it logs (lines are dropped, not waited
// for); once the reader is back the log says how many lines were dropped,
// and the holder drains on SIGTERM with exit 0, its last line flushed.
func TestLogReaderStalls(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h, br := stalledLog(t, r, loudJob(r))
	const n = 40 // ~25 KiB of log each, far beyond the pipe and the buffer
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = strconv.Itoa(i)
	}
	r.baton(append([]string{"enqueue"}, jobs...)...)
	eventually(t, 30*time.Second, "every job acked while nothing reads the log", func() bool { return r.status().Jobs.Done == n })
	if done, code := h.exited(); done {
		t.Fatalf("the holder exited (%d) while its log reader stalled", code)
	}
	// The reader is back: the notice comes out, ahead of the next lines.
	var mu sync.Mutex
	var lines []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				return
			}
			mu.Lock()
			lines = append(lines, l)
			mu.Unlock()
		}
	}()
	notice := regexp.MustCompile(`"level":"warn".*"dropped":([0-9]+).*"message":"log: dropped ([0-9]+) lines: log reader stalled"`)
	eventually(t, 10*time.Second, "the log says lines were dropped", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, l := range lines {
			if m := notice.FindStringSubmatch(l); m != nil && m[1] == m[2] && m[1] != "0" {
				return true
			}
		}
		return false
	})
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, h.cmd.ProcessState)
	}
	<-read
	if last := lines[len(lines)-1]; !strings.Contains(last, `"message":"leaving run slot"`) || !strings.Contains(last, fmt.Sprintf(`"jobs_done":%d`, n)) {
		t.Fatalf("last line %q, want the holder leaving, having done %d jobs", last, n)
	}
}

// TestLogReaderStallsAtExit: told to stop while its log reader is still
// stalled, the holder exits within bounds: the lines it cannot flush are
// lost, the exit is not held up.
func TestLogReaderStallsAtExit(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	h, _ := stalledLog(t, r, loudJob(r))
	r.baton("enqueue", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10")
	eventually(t, 30*time.Second, "every job acked while nothing reads the log", func() bool { return r.status().Jobs.Done == 10 })
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, h.cmd.ProcessState)
	}
}

// TestLogReaderStallsFleet: in fleet mode, a holder whose log reader
// stalls keeps renewing its lease (it is not fenced for a log line) and
// keeps acknowledging jobs, well past lease_ttl.
func TestLogReaderStallsFleet(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	const ttl = 2 * time.Second
	h, _ := stalledLog(t, r, loudJob(r), "--lock-backend", "redis", "--host", "h1", "--lease-ttl", ttl.String(), "--lease-renew", "200ms")
	enqueue := func(from, to int) {
		var ids []string
		for i := from; i < to; i++ {
			ids = append(ids, strconv.Itoa(i))
		}
		r.baton(append([]string{"enqueue"}, ids...)...)
	}
	fleet := []string{"--lock-backend", "redis", "--slots", "1", "--standby-slots", "0"}
	enqueue(0, 20)
	eventually(t, 30*time.Second, "every job acked while nothing reads the log", func() bool { return r.status(fleet...).Jobs.Done == 20 })
	time.Sleep(2 * ttl) // what is asserted is that nothing changes meanwhile
	if done, code := h.exited(); done {
		t.Fatalf("the holder exited (%d) while its log reader stalled", code)
	}
	if ls := r.leases("default", 1); heldRecs(ls) != 1 || ls[0].PID != h.cmd.Process.Pid {
		t.Fatalf("run leases %+v, want one held by the holder (pid %d)", ls, h.cmd.Process.Pid)
	}
	enqueue(20, 30)
	eventually(t, 30*time.Second, "later jobs acked too", func() bool { return r.status(fleet...).Jobs.Done == 30 })
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d (%v) after SIGTERM, want 0", code, h.cmd.ProcessState)
	}
}
