package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
)

// starts reads the job log the control tests' job script writes: one line
// "start <job id> <unix ns>" or "end <job id>" per event.
func starts(t *testing.T, path string) (started map[string]time.Time, ended map[string]bool) {
	t.Helper()
	started, ended = map[string]time.Time{}, map[string]bool{}
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 3 && f[0] == "start":
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			started[f[1]] = time.Unix(0, ns)
		case len(f) == 2 && f[0] == "end":
			ended[f[1]] = true
		}
	}
	return started, ended
}

// jobScript writes start and end lines to log and runs for secs seconds.
func (r *rig) jobScript(log, secs string) string {
	return r.script("job.sh", `cat >/dev/null
echo "start $BATON_JOB_ID $(date +%s%N)" >> `+log+`
sleep `+secs+`
echo "end $BATON_JOB_ID" >> `+log+"\n")
}

// enqueue adds n jobs to queue q through the Go client and returns their ids.
func (r *rig) enqueue(q string, n int, opts ...work.Option) []string {
	r.t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		id, err := work.Enqueue(context.Background(), r.client(), q, []byte(strconv.Itoa(i)), opts...)
		if err != nil {
			r.t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// heldPIDs are the pids of queue q's held run slots.
func (r *rig) heldPIDs(q string, n int) []int {
	var pids []int
	for _, rec := range r.slotTable(q, "run", n) {
		if rec.Held {
			pids = append(pids, rec.PID)
		}
	}
	return pids
}

// TestPauseStopsStartsKeepsSlots: two busy holders; once baton pause
// returns, no job starts more than 1 s later, the running ones finish, the
// holders keep their slots (same pids, still running), enqueue goes on,
// and status, queues and metrics show who paused it and why. Resume starts
// jobs again.
func TestPauseStopsStartsKeepsSlots(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	log := filepath.Join(r.dir, "jobs.log")
	job := r.jobScript(log, "1")
	r.enqueue("default", 12)
	for i := 0; i < 2; i++ {
		r.start("run", "--slots", "2", "--lifetime", "2m", "--poll-interval", "50ms", "--", job)
	}
	eventually(t, 20*time.Second, "both holders run a job", func() bool {
		s, _ := starts(t, log)
		return len(s) >= 2 && len(r.heldPIDs("default", 2)) == 2
	})
	pids := r.heldPIDs("default", 2)
	if out, errOut, code := r.baton("pause", "--reason", "db migration"); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause: exit %d, %s %s", code, out, errOut)
	}
	paused := time.Now()
	r.enqueue("default", 3) // enqueue goes on while paused
	// Every job started by then ends, and nothing starts for 2.5 s after.
	eventually(t, 20*time.Second, "the running jobs finish and the queue stays still", func() bool {
		s, e := starts(t, log)
		for id := range s {
			if !e[id] {
				return false
			}
		}
		return time.Since(paused) > 2500*time.Millisecond
	})
	s, _ := starts(t, log)
	for id, at := range s {
		if at.After(paused.Add(time.Second)) {
			t.Errorf("job %s started %s after baton pause returned", id, at.Sub(paused))
		}
	}
	if len(s) >= 15 {
		t.Fatalf("every job ran: the pause stopped nothing")
	}
	if now := r.heldPIDs("default", 2); fmt.Sprint(now) != fmt.Sprint(pids) {
		t.Fatalf("holders changed while paused: %v, then %v", pids, now)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) != nil {
			t.Fatalf("holder %d is gone", pid)
		}
	}
	out, _, _ := r.baton("status")
	if first := strings.SplitN(out, "\n", 2)[0]; !strings.Contains(first, "PAUSED") || !strings.Contains(first, "db migration") || !strings.Contains(first, "@") {
		t.Errorf("status's first line does not show the pause: %q", first)
	}
	if out, _, _ := r.baton("queues"); !strings.Contains(out, "paused by") || !strings.Contains(out, "db migration") {
		t.Errorf("queues does not show the pause:\n%s", out)
	}
	if out, _, _ := r.baton("metrics"); !strings.Contains(out, `baton_queue_paused{queue="default"} 1`) {
		t.Errorf("metrics has no baton_queue_paused 1:\n%s", out)
	}
	before := len(s)
	if out, errOut, code := r.baton("resume"); code != 0 || !strings.Contains(out, "resumed") {
		t.Fatalf("resume: exit %d, %s %s", code, out, errOut)
	}
	eventually(t, 10*time.Second, "jobs start again after resume", func() bool {
		s, _ := starts(t, log)
		return len(s) > before
	})
	if out, _, _ := r.baton("metrics"); !strings.Contains(out, `baton_queue_paused{queue="default"} 0`) {
		t.Errorf("metrics has no baton_queue_paused 0 after resume")
	}
	if now := r.heldPIDs("default", 2); fmt.Sprint(now) != fmt.Sprint(pids) {
		t.Fatalf("holders changed: %v, then %v", pids, now)
	}
}

// TestPauseForAndTurnover: a pause --for 3s outlives every holder that
// starts meanwhile (each logs the pause once, at info, and starts
// nothing), delayed jobs still become due and wait, and the pause ends by
// itself on Redis' clock.
func TestPauseForAndTurnover(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	log := filepath.Join(r.dir, "jobs.log")
	job := r.jobScript(log, "0")
	if _, errOut, code := r.baton("pause", "--for", "4s", "--reason", "short"); code != 0 {
		t.Fatalf("pause: exit %d %s", code, errOut)
	} else if !strings.Contains(errOut, "warning: queue default has no keys") {
		t.Errorf("pause of a queue with no keys does not warn: %q", errOut)
	}
	paused := time.Now()
	r.enqueue("default", 3)
	r.enqueue("default", 1, work.In(500*time.Millisecond))
	// Holders come and go while paused: each starts, sees the pause, and
	// is stopped.
	var holders []*process
	for i := 0; i < 2; i++ {
		p := r.start("run", "--lifetime", "1m", "--shutdown-grace", "1s", "--", job)
		holders = append(holders, p)
		eventually(t, 20*time.Second, "the holder sees the pause", func() bool { return strings.Contains(p.log(), "queue paused") })
		time.Sleep(300 * time.Millisecond) // a keeper tick or two: the pause is logged once, not per tick
		_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
		p.wait(t, 20*time.Second)
	}
	c, err := work.ReadCounts(context.Background(), r.client(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(paused) < 3500*time.Millisecond {
		if s, _ := starts(t, log); len(s) > 0 {
			t.Fatalf("%d jobs started while paused", len(s))
		}
		if c.Scheduled != 0 || c.Waiting != 4 {
			t.Errorf("paused queue: %d scheduled, %d waiting; want the delayed job due and waiting (0, 4)", c.Scheduled, c.Waiting)
		}
	}
	for _, p := range holders {
		if n := strings.Count(p.log(), "queue paused"); n != 1 {
			t.Errorf("a holder that started on a paused queue logged the pause %d times, want once:\n%s", n, p.log())
		}
	}
	// The pause ends by itself; a holder then runs the jobs.
	r.start("run", "--lifetime", "1m", "--", job)
	eventually(t, 20*time.Second, "the jobs run once --for has passed", func() bool {
		s, _ := starts(t, log)
		return len(s) == 4
	})
	s, _ := starts(t, log)
	for id, at := range s {
		if at.Before(paused.Add(3 * time.Second)) {
			t.Errorf("job %s started %s after the pause, before --for 4s ended", id, at.Sub(paused))
		}
	}
}

// TestPauseBadInput: --for zero or negative is a usage error, one line,
// and pauses nothing.
func TestPauseBadInput(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	for _, d := range []string{"0s", "-5m"} {
		_, errOut, code := r.baton("pause", "--for", d)
		if code != 2 || !strings.Contains(errOut, "not positive") {
			t.Errorf("pause --for %s: exit %d, %q; want 2 and a clear error", d, code, errOut)
		}
	}
	if p, err := work.ReadPause(context.Background(), r.client(), "default"); err != nil || p != nil {
		t.Fatalf("bad pauses paused the queue: %v %v", p, err)
	}
	if out, _, code := r.baton("resume"); code != 0 || !strings.Contains(out, "was not paused") {
		t.Errorf("resume of a queue not paused: exit %d %q", code, out)
	}
}

// deadOf is job id's dead letter, or nil.
func (r *rig) deadOf(q, id string) *work.DeadLetter {
	d, err := work.GetDead(context.Background(), r.client(), q, id)
	if err != nil || d.JobID != id { // GetDead takes a letter's id too
		return nil
	}
	return d
}

// TestCancelEachState: a waiting job (with a unique key, freed), a delayed
// one and a retrying one are dead-lettered as cancelled at once, and dead
// requeue brings one back; a running exec job's process group is stopped
// (SIGTERM first) and the job dead-lettered as cancelled, never retried;
// a done, an unknown and another queue's job say so and exit 1.
func TestCancelEachState(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	ctx := context.Background()
	waiting := r.enqueue("default", 1, work.UniqueKey("k1"))[0]
	delayed := r.enqueue("default", 1, work.In(time.Hour))[0]
	out, errOut, code := r.baton("cancel", "--reason", "wrong input", waiting, delayed)
	if code != 0 || strings.Count(out, "cancelled: was") != 2 {
		t.Fatalf("cancel waiting and delayed: exit %d\n%s%s", code, out, errOut)
	}
	for _, id := range []string{waiting, delayed} {
		d := r.deadOf("default", id)
		if d == nil || d.Reason != work.ReasonCancelled || !strings.Contains(d.Error, "wrong input") {
			t.Fatalf("job %s: dead letter %+v, want reason cancelled with the reason", id, d)
		}
	}
	if again, err := work.Enqueue(ctx, r.client(), "default", []byte("x"), work.UniqueKey("k1")); err != nil || again == waiting {
		t.Fatalf("unique key not freed by the cancel: %s %v", again, err)
	}
	if _, errOut, code := r.baton("dead", "requeue", delayed); code != 0 {
		t.Fatalf("dead requeue of a cancelled job: %s", errOut)
	}
	if loc, _ := work.Locate(ctx, r.client(), "default", delayed); loc.State != work.StateWaiting {
		t.Fatalf("requeued cancelled job is %s, want waiting", loc.State)
	}

	// A retrying job: it fails once, with a long backoff.
	marks := filepath.Join(r.dir, "marks")
	fail := r.script("fail.sh", "cat >/dev/null; echo run >> "+marks+"; exit 3\n")
	rq := "retrying"
	r.fresh(rq)
	retrying := r.enqueue(rq, 1)[0]
	h := r.start("run", "--queue", rq, "--lifetime", "1m", "--retry-backoff", "1h", "--retry-backoff-max", "2h", "--", fail)
	eventually(t, 20*time.Second, "the job waits for its retry", func() bool {
		loc, err := work.Locate(ctx, r.client(), rq, retrying)
		return err == nil && loc.State == work.StateRetrying
	})
	if out, errOut, code := r.baton("cancel", "--queue", rq, retrying); code != 0 || !strings.Contains(out, "was retrying") {
		t.Fatalf("cancel retrying: exit %d %s%s", code, out, errOut)
	}
	_ = syscall.Kill(h.cmd.Process.Pid, syscall.SIGTERM)

	// A running exec job that traps SIGTERM, on queue "exec".
	eq := "exec"
	r.fresh(eq)
	termed := filepath.Join(r.dir, "termed")
	pidf := filepath.Join(r.dir, "job.pid")
	long := r.script("long.sh", "cat >/dev/null; echo $$ > "+pidf+"; trap 'echo term > "+termed+"; exit 143' TERM\nsleep 60 & wait\n")
	running := r.enqueue(eq, 1)[0]
	r.start("run", "--queue", eq, "--lifetime", "1m", "--shutdown-grace", "5s", "--", long)
	var jobPID int
	eventually(t, 20*time.Second, "the exec job runs", func() bool {
		b, _ := os.ReadFile(pidf)
		jobPID, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return jobPID > 0
	})
	start := time.Now()
	out, errOut, code = r.baton("cancel", "--queue", eq, running)
	if code != 0 || !strings.Contains(out, "stopped while running") {
		t.Fatalf("cancel running exec: exit %d %s%s", code, out, errOut)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("cancel of a running job took %s", took)
	}
	if b, _ := os.ReadFile(termed); !strings.Contains(string(b), "term") {
		t.Errorf("the job never got SIGTERM")
	}
	eventually(t, 5*time.Second, "the job's process group is gone", func() bool { return !groupAlive(jobPID) })
	if d := r.deadOf(eq, running); d == nil || d.Reason != work.ReasonCancelled {
		t.Fatalf("running job's letter: %+v", d)
	}

	// Done (with a retention), unknown, and another queue's job.
	dq := "done"
	r.fresh(dq)
	done := r.enqueue(dq, 1)[0]
	ok := r.script("ok.sh", "cat >/dev/null\n")
	r.start("run", "--queue", dq, "--lifetime", "1m", "--retention", "1h", "--", ok)
	eventually(t, 20*time.Second, "the job is done", func() bool {
		loc, err := work.Locate(ctx, r.client(), dq, done)
		return err == nil && loc.State == work.StateDone
	})
	if out, _, code := r.baton("cancel", "--queue", dq, done); code != 1 || !strings.Contains(out, "it is done") {
		t.Errorf("cancel of a done job: exit %d %q", code, out)
	}
	if out, _, code := r.baton("cancel", "--queue", dq, "1-0"); code != 1 || !strings.Contains(out, "unknown") {
		t.Errorf("cancel of an unknown job: exit %d %q", code, out)
	}
	if out, _, code := r.baton("cancel", "--queue", dq, running); code != 1 || !strings.Contains(out, "unknown") {
		t.Errorf("cancel of another queue's job: exit %d %q", code, out)
	}
}

// TestCancelGoHandler: a running Go handler's context is cancelled with
// cause work.ErrCancelled; the job is dead-lettered as cancelled.
func TestCancelGoHandler(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.extraEnv = append(r.extraEnv, testHandler+"=until-cancelled")
	cause := filepath.Join(r.dir, "cause")
	id, err := work.Enqueue(context.Background(), r.client(), "default", []byte(cause))
	if err != nil {
		t.Fatal(err)
	}
	r.start("run", "--lifetime", "1m")
	eventually(t, 20*time.Second, "the job runs", func() bool {
		loc, err := work.Locate(context.Background(), r.client(), "default", id)
		return err == nil && loc.State == work.StateRunning
	})
	out, errOut, code := r.baton("cancel", id)
	if code != 0 || !strings.Contains(out, "stopped while running") {
		t.Fatalf("cancel: exit %d %s%s", code, out, errOut)
	}
	if b, _ := os.ReadFile(cause); string(b) != work.ErrCancelled.Error() {
		t.Errorf("handler's context cause %q, want %q", b, work.ErrCancelled)
	}
	if d := r.deadOf("default", id); d == nil || d.Reason != work.ReasonCancelled {
		t.Fatalf("letter: %+v", d)
	}
}

// TestCancelBadInput: no ids, a malformed id: exit 2, one line; ids from
// a file and from stdin are read.
func TestCancelBadInput(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if _, errOut, code := r.baton("cancel"); code != 2 || !strings.Contains(errOut, "at least one job id") {
		t.Errorf("cancel without ids: exit %d %q", code, errOut)
	}
	if _, errOut, code := r.baton("cancel", "nope"); code != 2 || !strings.Contains(errOut, "not a job id") {
		t.Errorf("cancel of a bad id: exit %d %q", code, errOut)
	}
	ids := r.enqueue("default", 3)
	file := filepath.Join(r.dir, "ids")
	if err := os.WriteFile(file, []byte(ids[0]+"\n# comment\n\n"+ids[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := r.cmd("cancel", "--from", file, "-")
	cmd.Stdin = strings.NewReader(ids[2] + "\n")
	out, err := cmd.Output()
	if err != nil || strings.Count(string(out), "cancelled: was waiting") != 3 {
		t.Fatalf("cancel from a file and stdin: %v\n%s", err, out)
	}
}

// TestCancelRacesFinish: 200 jobs (-cancel.races; make chaos-cancel runs
// 1,000) of random short lengths, each cancelled at a random moment
// (waiting, running, finishing, done): every job has exactly one outcome,
// done or cancelled, never both and never none, recorded once (one dead
// letter, counted once), and what Cancel reported matches it.
func TestCancelRacesFinish(t *testing.T) {
	t.Parallel()
	n := *cancelRaces
	r := newRig(t)
	ctx := context.Background()
	job := r.script("job.sh", "read t; sleep \"$t\"\n")
	r.start("run", "--lifetime", "5m", "--concurrency", "8", "--retention", "1h", "--shutdown-grace", "2s", "--", job)
	type outcome struct {
		id        string
		cancelled bool
	}
	outcomes := make(chan outcome, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("0.%03d", rand.IntN(100))
		id, err := work.Enqueue(ctx, r.client(), "default", []byte(d+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			time.Sleep(time.Duration(rand.IntN(150)) * time.Millisecond)
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			res, err := work.CancelAndWait(wctx, r.client(), "default", work.CancelOptions{}, id)
			if err != nil {
				t.Errorf("job %s: %v", id, err)
				return
			}
			o := outcome{id: id, cancelled: res.Outcome == work.CancelDone}
			outcomes <- o
		}()
	}
	wg.Wait()
	close(outcomes)
	var cancelled, finished int
	for o := range outcomes {
		loc, err := work.Locate(ctx, r.client(), "default", o.id)
		if err != nil {
			t.Fatal(err)
		}
		dead := r.deadOf("default", o.id)
		doneAt, derr := r.client().ZScore(ctx, work.KeysFor("default").Done, o.id).Result()
		isDone := derr == nil && doneAt > 0
		switch {
		case dead != nil && isDone:
			t.Errorf("job %s is both done (at %v) and dead %+v", o.id, doneAt, dead)
		case dead == nil && !isDone:
			t.Errorf("job %s has no outcome: %s", o.id, loc.State)
		case o.cancelled != (dead != nil):
			t.Errorf("job %s: cancel said cancelled=%v, but its letter is %+v, done %v", o.id, o.cancelled, dead, isDone)
		case dead != nil && dead.Reason != work.ReasonCancelled:
			t.Errorf("job %s dead as %s", o.id, dead.Reason)
		}
		if dead != nil {
			cancelled++
		} else {
			finished++
		}
	}
	c, err := work.ReadCounts(ctx, r.client(), "default")
	if err != nil {
		t.Fatal(err)
	}
	if c.Done+c.Stats[work.StatDeadPrefix+work.ReasonCancelled] != int64(n) || c.Stats["retried"] != 0 {
		t.Errorf("stats: %d done + %d cancelled != %d, or retries (%d)", c.Done, c.Stats[work.StatDeadPrefix+work.ReasonCancelled], n, c.Stats["retried"])
	}
	if letters := r.client().XLen(ctx, work.KeysFor("default").Dead).Val(); letters != int64(cancelled) {
		t.Errorf("%d dead letters for %d cancelled jobs: one recorded twice", letters, cancelled)
	}
	t.Logf("%d cancelled, %d finished first", cancelled, finished)
	if cancelled == 0 || finished == 0 {
		t.Errorf("no race: %d cancelled, %d finished", cancelled, finished)
	}
}

// TestPausedQueueDoesNotScaleUp: an autoscaled holder on a paused queue
// with a backlog far over scale_up_backlog starts no candidate; once the
// queue is resumed it does.
func TestPausedQueueDoesNotScaleUp(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	q := "scaled"
	r.fresh(q)
	t.Cleanup(func() { r.killHolders(q) })
	if _, errOut, code := r.baton("pause", "--queue", q); code != 0 {
		t.Fatalf("pause: %s", errOut)
	}
	r.enqueueN(q, 200)
	job := r.script("job.sh", "cat >/dev/null; sleep 0.05\n")
	p := r.start(append(scaleArgs(q, 3, 1), "--", job)...)
	eventually(t, 10*time.Second, "the holder sees the pause", func() bool { return strings.Contains(p.log(), "queue paused") })
	s := r.sample(q, 3)
	seen := time.Now()
	eventually(t, 20*time.Second, "a few scaling rounds pass", func() bool {
		return time.Since(seen) > 3*time.Second // scaling rounds are once a second
	})
	s.stop()
	if s.max > 1 {
		t.Fatalf("%d run slots held for a paused queue's backlog", s.max)
	}
	if strings.Contains(p.log(), "scale up") {
		t.Fatalf("scaled up for a paused queue:\n%s", p.log())
	}
	if _, errOut, code := r.baton("resume", "--queue", q); code != 0 {
		t.Fatalf("resume: %s", errOut)
	}
	eventually(t, 20*time.Second, "scale-up after resume", func() bool { return strings.Contains(p.log(), "scale up") })
	// Let the candidates drain the queue and leave (idle_exit 1s), so that
	// none is still starting when the test's lock dir is removed.
	eventually(t, 60*time.Second, "the queue drained", func() bool { return r.status("--queue", q).Jobs.Done == 200 })
	eventually(t, 30*time.Second, "back to the kept holder", func() bool {
		return len(heldSlots(r.slotTable(q, "run", 3))) == 1
	})
}

// TestPauseSurvivesRedisRestart: with AOF, a pause (and its --for expiry)
// is still there after Redis restarts; a holder started then starts
// nothing until resume.
func TestPauseSurvivesRedisRestart(t *testing.T) {
	t.Parallel()
	r := newRig(t, redistest.Appendonly)
	log := filepath.Join(r.dir, "jobs.log")
	job := r.jobScript(log, "0")
	if _, errOut, code := r.baton("pause", "--for", "1h", "--reason", "restart"); code != 0 {
		t.Fatalf("pause: %s", errOut)
	}
	r.redis.Restart()
	r.fresh("default")
	p, err := work.ReadPause(context.Background(), r.client(), "default")
	if err != nil || p == nil || p.Reason != "restart" || p.Until.IsZero() {
		t.Fatalf("pause after the restart: %+v %v; want it, with its expiry", p, err)
	}
	r.enqueue("default", 2)
	h := r.start("run", "--lifetime", "1m", "--", job)
	eventually(t, 20*time.Second, "the holder sees the pause", func() bool { return strings.Contains(h.log(), "queue paused") })
	seen := time.Now()
	eventually(t, 10*time.Second, "a few keeper rounds", func() bool { return time.Since(seen) > 1500*time.Millisecond })
	if s, _ := starts(t, log); len(s) > 0 {
		t.Fatalf("%d jobs started on a queue paused before the restart", len(s))
	}
	if _, errOut, code := r.baton("resume"); code != 0 {
		t.Fatalf("resume: %s", errOut)
	}
	eventually(t, 10*time.Second, "the jobs run after resume", func() bool {
		s, _ := starts(t, log)
		return len(s) == 2
	})
}

// TestCancelAndPauseInFleet: with lock_backend redis, holders on two
// simulated hosts; a cancel (from neither) stops the running job on
// whichever host runs it, through its fenced dead script, and a pause
// stops both hosts.
func TestCancelAndPauseInFleet(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	pidf := filepath.Join(r.dir, "pids")
	long := r.script("long.sh", "cat >/dev/null; echo $$ >> "+pidf+"\nsleep 60\n")
	ids := r.enqueue("default", 2)
	for _, h := range []string{"h1", "h2"} {
		r.start(r.fleetArgs(h, "--slots", "2", "--lifetime", "1m", "--shutdown-grace", "0s", "--", long)...)
	}
	// Both jobs are delivered (one may be read ahead, unstarted, by the
	// host running the other) and at least one runs.
	eventually(t, 20*time.Second, "both jobs delivered, one running", func() bool {
		for _, id := range ids {
			if loc, err := work.Locate(context.Background(), r.client(), "default", id); err != nil || loc.State != work.StateRunning {
				return false
			}
		}
		b, _ := os.ReadFile(pidf)
		return len(strings.Fields(string(b))) >= 1
	})
	if _, errOut, code := r.baton("pause"); code != 0 {
		t.Fatalf("pause: %s", errOut)
	}
	out, errOut, code := r.baton(append([]string{"cancel"}, ids...)...)
	// The running one is stopped; one read ahead and unstarted went back
	// to the stream when the pause came, and is taken out as waiting.
	if code != 0 || strings.Count(out, " cancelled: ") != 2 || !strings.Contains(out, "stopped while running") {
		t.Fatalf("cancel in a fleet: exit %d\n%s%s", code, out, errOut)
	}
	b, _ := os.ReadFile(pidf)
	for _, f := range strings.Fields(string(b)) {
		pid, _ := strconv.Atoi(f)
		eventually(t, 5*time.Second, "the job's process group is gone", func() bool { return !groupAlive(pid) })
	}
	for _, id := range ids {
		if d := r.deadOf("default", id); d == nil || d.Reason != work.ReasonCancelled {
			t.Fatalf("job %s: letter %+v", id, d)
		}
	}
	// Paused: a new job waits on both hosts.
	r.enqueue("default", 1)
	seen := time.Now()
	eventually(t, 10*time.Second, "a few keeper rounds", func() bool { return time.Since(seen) > 1500*time.Millisecond })
	if b2, _ := os.ReadFile(pidf); len(b2) != len(b) {
		t.Fatalf("a job started on a paused fleet queue")
	}
}

// groupAlive reports whether process group pgid has a member that is not
// a zombie (one reparented to a holder is reaped a moment later).
func groupAlive(pgid int) bool {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
		i := strings.LastIndexByte(string(b), ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" {
			return true
		}
	}
	return false
}
