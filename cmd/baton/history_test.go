package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// historyJSON is the slot history in status --json.
type historyJSON struct {
	Coverage *struct {
		Keep   int   `json:"k"`
		Held   int   `json:"held"`
		BelowK int64 `json:"below_k_ns"`
		Gaps   map[string]struct {
			Count int64 `json:"count"`
			Sum   int64 `json:"sum_ns"`
		} `json:"gaps"`
	} `json:"coverage"`
	Events []struct {
		Kind    string `json:"kind"`
		Slot    string `json:"slot"`
		PID     int    `json:"pid"`
		Gap     *int64 `json:"gap_ns"`
		DiedPID int    `json:"died_pid"`
		Why     string `json:"why"`
	} `json:"events"`
}

func (r *rig) history(args ...string) historyJSON {
	r.t.Helper()
	var h historyJSON
	r.statusInto(&h, args...)
	return h
}

func (h historyJSON) kinds() string {
	var ks []string
	for _, e := range h.Events {
		ks = append(ks, e.Kind)
	}
	return strings.Join(ks, " ")
}

// TestPromotionGaps: a holder retires and its standby takes the slot; the
// new holder is killed with -9 and the next standby takes it. Each take
// records a promotion gap, bounded; the events say retired, promoted,
// died (or a take after a death); status, --watch and the metrics show
// them.
func TestPromotionGaps(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	run := func(lifetime string) *process {
		return r.start("run", "--slots", "1", "--standby-slots", "2", "--lifetime", lifetime, "--jitter", "0",
			"--poll-interval", "200ms", "--standby-wait", "2m", "--", "/bin/true")
	}
	a := run("3s")
	eventually(t, 20*time.Second, "a holds run-0", func() bool { return held(r.status("--standby-slots", "2").Run) == 1 })
	b := run("10m")
	eventually(t, 20*time.Second, "b stands by", func() bool { return held(r.status("--standby-slots", "2").Standby) == 1 })
	if code := a.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("a exited %d: %s", code, a.log())
	}
	var h historyJSON
	eventually(t, 20*time.Second, "b promoted", func() bool {
		h = r.history("--standby-slots", "2")
		return strings.Contains(h.kinds(), "retired promoted")
	})
	last := h.Events[len(h.Events)-1]
	if last.PID != b.cmd.Process.Pid || last.Gap == nil || time.Duration(*last.Gap) > 5*time.Second {
		t.Fatalf("promotion after a retirement: %+v", last)
	}

	// kill -9 the promoted holder with a third candidate standing by.
	c := run("10m")
	eventually(t, 20*time.Second, "c stands by", func() bool { return held(r.status("--standby-slots", "2").Standby) == 1 })
	_ = syscall.Kill(b.cmd.Process.Pid, syscall.SIGKILL)
	// status reads the counters, then the events, not atomically: wait
	// until a read shows the take in both.
	eventually(t, 20*time.Second, "c promoted after b died", func() bool {
		h = r.history("--standby-slots", "2")
		e := h.Events[len(h.Events)-1]
		return e.Kind == "promoted" && e.PID == c.cmd.Process.Pid && h.Coverage.Gaps["standby"].Count == 2
	})
	last = h.Events[len(h.Events)-1]
	if last.DiedPID != b.cmd.Process.Pid && !strings.Contains(h.kinds(), "died promoted") {
		t.Errorf("the take after b's death does not say so: %s, %+v", h.kinds(), last)
	}
	for _, e := range h.Events {
		if e.Gap != nil {
			t.Logf("%s %s by pid %d: the slot was free for %v", e.Kind, e.Slot, e.PID, time.Duration(*e.Gap))
		}
	}
	g := h.Coverage.Gaps["standby"]
	if g.Count != 2 || time.Duration(g.Sum) > 10*time.Second {
		t.Errorf("promotion gaps %+v; want 2, each within seconds", h.Coverage.Gaps)
	}
	if h.Coverage.Held != 1 || h.Coverage.Keep != 1 || time.Duration(h.Coverage.BelowK) > 10*time.Second {
		t.Errorf("coverage %+v", *h.Coverage)
	}

	// The text and the metrics say the same.
	out, _, _ := r.baton("status", "--standby-slots", "2")
	for _, want := range []string{"retired after", "was promoted from standby", "2 takes by a standby, mean gap"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	m, _, _ := r.baton("metrics", "--lock-dir", r.locks, "--standby-slots", "2")
	if !regexp.MustCompile(`(?m)^baton_slot_gap_seconds_count\{by="standby",queue="default"\} 2$`).MatchString(m) {
		t.Errorf("metrics lack 2 standby gaps:\n%s", m)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	c.wait(t, 30*time.Second)
}

// TestTimeBelowK: with k = 2 and one holder, the time below k grows, in
// status and in the metrics; it stops growing once a second holder runs.
func TestTimeBelowK(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	run := func() *process {
		return r.start("run", "--slots", "2", "--standby-slots", "0", "--lifetime", "10m", "--", "/bin/true")
	}
	run()
	eventually(t, 20*time.Second, "one holder", func() bool { return held(r.status("--slots", "2").Run) == 1 })
	below := func() float64 {
		m, _, _ := r.baton("metrics", "--lock-dir", r.locks, "--slots", "2")
		v := regexp.MustCompile(`(?m)^baton_below_k_seconds_total\{queue="default"\} (\S+)$`).FindStringSubmatch(m)
		if v == nil {
			t.Fatalf("no baton_below_k_seconds_total:\n%s", m)
		}
		f, _ := strconv.ParseFloat(v[1], 64)
		return f
	}
	first := below()
	time.Sleep(1500 * time.Millisecond)
	second := below()
	if second < first+1 {
		t.Fatalf("one holder of k=2: below k went from %vs to %vs in 1.5s", first, second)
	}
	if h := r.history("--slots", "2"); h.Coverage == nil || time.Duration(h.Coverage.BelowK) < time.Duration(second*float64(time.Second)) {
		t.Errorf("status's below k %+v, metrics said %vs", h.Coverage, second)
	}
	run()
	eventually(t, 20*time.Second, "two holders", func() bool { return held(r.status("--slots", "2").Run) == 2 })
	eventually(t, 20*time.Second, "below k recorded as full", func() bool {
		x := below()
		time.Sleep(time.Second)
		return below()-x < 0.1
	})
	if out, _, _ := r.baton("status", "--slots", "2"); !strings.Contains(out, "cover below k=2 for ") {
		t.Errorf("status lacks the time below k:\n%s", out)
	}
}

// TestLeaveRecordedAtRelease: a persistent holder whose child ignores its
// stop message keeps its slot until the child is killed, shutdown_grace
// later; its retirement is recorded then, not when it stopped taking jobs,
// or the history would count the slot free (time below k) while it was
// held.
func TestLeaveRecordedAtRelease(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	worker, err := filepath.Abs(filepath.Join("..", "..", "work", "testdata", "persist_worker.py"))
	if err != nil {
		t.Fatal(err)
	}
	r.extraEnv = append(r.extraEnv, "PERSIST_LOG="+filepath.Join(r.dir, "persist.log"))
	r.baton("enqueue", "x") // children start with the first job
	h := r.start("run", "--slots", "1", "--standby-slots", "0", "--persistent", "--lifetime", "1s", "--jitter", "0",
		"--shutdown-grace", "1500ms", "--", python(t), worker, "--ignore-stop")
	if code := h.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("exit %d: %s", code, h.log())
	}
	var killed time.Time
	for _, line := range strings.Split(h.log(), "\n") {
		var l struct {
			Time    time.Time `json:"time"`
			Message string    `json:"message"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && strings.Contains(l.Message, "still running after the stop message") {
			killed = l.Time
		}
	}
	if killed.IsZero() {
		t.Fatalf("the child was not killed after its grace:\n%s", h.log())
	}
	var events struct {
		Events []struct {
			Kind string    `json:"kind"`
			At   time.Time `json:"at"`
		} `json:"events"`
	}
	r.statusInto(&events, "--slots", "1", "--standby-slots", "0")
	for _, e := range events.Events {
		if e.Kind != "retired" {
			continue
		}
		if e.At.Before(killed.Add(-50 * time.Millisecond)) {
			t.Fatalf("retirement recorded at %s, %v before the child was killed (%s): the slot was still held",
				e.At.Format(time.StampMilli), killed.Sub(e.At), killed.Format(time.StampMilli))
		}
		return
	}
	t.Fatalf("no retirement among the events %+v", events.Events)
}

// TestForcedExitRecordsLeave: a second SIGTERM while a persistent child
// ignores its stop message exits at once, and the holder records leaving
// its slot first ("left", stopped): the slot history does not count a
// death at the next take.
func TestForcedExitRecordsLeave(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	worker, err := filepath.Abs(filepath.Join("..", "..", "work", "testdata", "persist_worker.py"))
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(r.dir, "persist.log")
	r.extraEnv = append(r.extraEnv, "PERSIST_LOG="+log)
	r.baton("enqueue", "x") // children start with the first job
	h := r.start("run", "--slots", "1", "--standby-slots", "0", "--persistent", "--lifetime", "1m",
		"--shutdown-grace", "10s", "--", python(t), worker, "--ignore-stop")
	eventually(t, 20*time.Second, "the child runs the job", func() bool {
		b, _ := os.ReadFile(log)
		return len(b) > 0
	})
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 10*time.Second, "the holder drains", func() bool { return strings.Contains(h.log(), "draining") })
	time.Sleep(300 * time.Millisecond) // the child ignores its stop message
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 5*time.Second); code != 1 {
		t.Fatalf("exit %d after the second signal, want 1: %s", code, h.log())
	}
	var events struct {
		Events []struct {
			Kind string `json:"kind"`
			Why  string `json:"why"`
		} `json:"events"`
	}
	r.statusInto(&events, "--slots", "1", "--standby-slots", "0")
	for _, e := range events.Events {
		if e.Kind == "left" && e.Why == "stopped" {
			return
		}
	}
	t.Fatalf("no leave among the events %+v", events.Events)
}

// TestForcedExitWithRedisHung: with Redis no longer answering (a network
// blackhole), a second SIGTERM still exits at once: recording the leave
// is given half a second, not the client's read timeout.
func TestForcedExitWithRedisHung(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	px := r.proxy()
	started := filepath.Join(r.dir, "started")
	job := r.script("job.sh", "touch "+started+"\nsleep 60\n")
	r.baton("enqueue", "x")
	h := r.start("run", "--redis-url", "redis://"+px.Addr+"/0", "--slots", "1", "--standby-slots", "0",
		"--lifetime", "1m", "--shutdown-grace", "30s", "--", job)
	eventually(t, 20*time.Second, "the job starts", func() bool { _, err := os.Stat(started); return err == nil })
	px.Blackhole(true)
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	eventually(t, 10*time.Second, "the holder drains", func() bool { return strings.Contains(h.log(), "draining") })
	second := time.Now()
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t, 10*time.Second); code != 1 {
		t.Fatalf("exit %d after the second signal, want 1: %s", code, h.log())
	}
	if d := time.Since(second); d > 2*time.Second {
		t.Fatalf("exited %v after the second signal; want at once (half a second for the leave record)", d)
	}
}
