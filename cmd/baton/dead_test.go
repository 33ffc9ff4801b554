package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

type deadJSON struct {
	ID       string `json:"id"`
	JobID    string `json:"job_id"`
	Reason   string `json:"reason"`
	Attempts int    `json:"attempts"`
	Error    string `json:"error"`
}

func (r *rig) dead(t *testing.T) []deadJSON {
	t.Helper()
	out, errOut, code := r.baton("dead", "list", "--json")
	if code != 0 {
		t.Fatalf("dead list: exit %d %s", code, errOut)
	}
	var d []deadJSON
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("dead list json: %v: %s", err, out)
	}
	return d
}

// cron fires a candidate every interval until stop is closed, as cron would.
func (r *rig) cron(interval time.Duration, args ...string) (stop func()) {
	quit := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			r.start(args...)
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-done }) }
}

// TestJobThatKillsItsRunner: dead-lettered as crashed after max_attempts,
// and the queue behind it keeps flowing.
func TestJobThatKillsItsRunner(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	job := r.script("job.sh", `p=$(cat)
if [ "$p" = poison ]; then echo "taking my holder with me" >&2; kill -9 $PPID; sleep 5; fi
`)
	payloads := []string{"enqueue", "-q", "poison"}
	for i := 0; i < 20; i++ {
		payloads = append(payloads, "good-"+strconv.Itoa(i))
	}
	r.baton(payloads...)
	stop := r.cron(200*time.Millisecond, "run", "--max-attempts", "3", "--poll-interval", "50ms", "--lifetime", "1m", "--", job)
	defer stop()
	eventually(t, 60*time.Second, "poison dead-lettered and good jobs done", func() bool {
		s := r.status()
		return s.Jobs.Done == 20 && len(r.dead(t)) == 1
	})
	d := r.dead(t)[0]
	if d.Reason != "crashed" || d.Attempts != 3 {
		t.Fatalf("dead letter %+v, want crashed after 3 attempts", d)
	}
	stop()
	r.killHolders("default")
}

// TestDeadRequeue: a job that failed max_attempts times is listed, shown and,
// once requeued, runs again; the id enqueue printed names it throughout: in
// the job's environment on every attempt, in dead list/show/requeue.
func TestDeadRequeue(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ok := filepath.Join(r.dir, "fixed")
	ran := filepath.Join(r.dir, "ran")
	ids := filepath.Join(r.dir, "ids")
	job := r.script("job.sh", `p=$(cat)
echo "$BATON_JOB_ID" >> `+ids+`
[ -e `+ok+` ] || { echo "cannot resize: disk full" >&2; exit 3; }
echo "$p" >> `+ran+"\n")
	out, _, _ := r.baton("enqueue", "img-1.jpg")
	id := strings.TrimSpace(out)
	h := r.start("run", "--max-attempts", "2", "--retry-backoff", "50ms", "--lifetime", "1m", "--", job)
	defer r.killHolders("default")
	eventually(t, 20*time.Second, "job dead-lettered", func() bool { return len(r.dead(t)) == 1 })
	d := r.dead(t)[0]
	if d.Reason != "failed" || d.Attempts != 2 || !strings.Contains(d.Error, "exit status 3: cannot resize: disk full") {
		t.Fatalf("dead letter %+v", d)
	}
	if d.JobID != id {
		t.Fatalf("dead letter job id %q, want the id enqueue printed %q", d.JobID, id)
	}
	out, _, code := r.baton("dead", "show", id)
	if code != 0 || !strings.Contains(out, "job:       "+id) || !strings.Contains(out, "reason:    failed") || !strings.Contains(out, "payload:   9 bytes\nimg-1.jpg") {
		t.Fatalf("dead show: %d\n%s", code, out)
	}
	out, _, _ = r.baton("dead", "list")
	if !strings.Contains(out, id) || strings.Contains(out, "img-1.jpg") {
		t.Fatalf("dead list shows the id but never the payload:\n%s", out)
	}
	if s := r.status(); s.Jobs.Waiting+s.Jobs.Pending != 0 {
		t.Fatalf("jobs %+v", *s.Jobs)
	}

	if err := os.WriteFile(ok, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := r.baton("dead", "requeue", id); code != 0 || !strings.Contains(out, "requeued "+id) {
		t.Fatalf("requeue: %d %s %s", code, out, errOut)
	}
	eventually(t, 20*time.Second, "requeued job ran", func() bool { return len(readLines(t, ran)) == 1 })
	if len(r.dead(t)) != 0 {
		t.Fatal("dead letter still there after requeue")
	}
	if got := readLines(t, ids); len(got) != 3 || got[0] != id || got[1] != id || got[2] != id {
		t.Fatalf("BATON_JOB_ID over two attempts and a requeue: %q, want %q each time", got, id)
	}
	if _, errOut, code := r.baton("dead", "requeue", id); code != 1 || !strings.Contains(errOut, "no such dead letter") {
		t.Fatalf("requeue twice: %d %s", code, errOut)
	}
	if _, errOut, code := r.baton("dead", "show", "nonsense"); code != 1 || !strings.Contains(errOut, "not a dead-letter id") {
		t.Fatalf("show nonsense: %d %s", code, errOut)
	}
	_ = h
}

// TestEnqueueRefusesLargePayload: exit 2, nothing added, a clear line; with
// --skip-bad the others are added and the bad one is reported by line.
func TestEnqueueRefusesLargePayload(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	input := "small\n" + strings.Repeat("x", 11) + "\nafter\n"
	cmd := r.cmd("enqueue", "-q", "--max-payload", "10")
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "payload 2 is 11 bytes, over max_payload (10); nothing added") {
		t.Fatalf("%v: %s", err, out)
	}
	if s := r.status(); s.Jobs.Waiting != 0 {
		t.Fatalf("waiting %d, want nothing added", s.Jobs.Waiting)
	}
	cmd = r.cmd("enqueue", "-q", "--max-payload", "10", "--skip-bad")
	cmd.Stdin = strings.NewReader(input)
	out, err = cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 0 || !strings.Contains(string(out), "payload 2 is 11 bytes, over max_payload (10): skipped") {
		t.Fatalf("--skip-bad: %v: %s", err, out)
	}
	if s := r.status(); s.Jobs.Waiting != 2 {
		t.Fatalf("waiting %d, want the 2 good jobs", s.Jobs.Waiting)
	}
}

// TestDeadJSON: dead list --json on an empty queue is [], not null; dead
// show --json gives a UTF-8 payload as text and any other as base64, saying
// which; HTML in a payload stays as it is (JSON escapes it).
func TestDeadJSON(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if out, _, code := r.baton("dead", "list", "--json"); code != 0 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("empty dead list --json: %d %q", code, out)
	}
	text, _, _ := r.baton("enqueue", "héllo <b>")
	cmd := r.cmd("enqueue")
	cmd.Stdin = strings.NewReader("\xff\xfe\n")
	bin, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	h := r.start("run", "--max-attempts", "1", "--lifetime", "1m", "--", "/bin/false")
	defer func() { _ = h.cmd.Process.Kill() }()
	eventually(t, 20*time.Second, "two dead letters", func() bool { return len(r.dead(t)) == 2 })
	for id, want := range map[string]struct{ payload, enc string }{
		strings.TrimSpace(text):        {"héllo <b>", "text"},
		strings.TrimSpace(string(bin)): {"//4=", "base64"},
	} {
		out, _, code := r.baton("dead", "show", "--json", id)
		var d struct {
			JobID    string `json:"job_id"`
			Payload  string `json:"payload"`
			Encoding string `json:"payload_encoding"`
		}
		if err := json.Unmarshal([]byte(out), &d); code != 0 || err != nil {
			t.Fatalf("dead show --json %s: %d %v\n%s", id, code, err, out)
		}
		if d.JobID != id || d.Payload != want.payload || d.Encoding != want.enc {
			t.Fatalf("dead show --json %s = %+v, want payload %q as %s", id, d, want.payload, want.enc)
		}
	}
}
