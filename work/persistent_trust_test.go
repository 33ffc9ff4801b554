package work

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// newRaw is a Persistent running testdata/persist_raw.py (a child that
// speaks the protocol itself and misbehaves) with args, and its job log.
func newRaw(tb testing.TB, args ...string) (*Persistent, string) {
	tb.Helper()
	p, log := newPersistent(tb)
	bin, err := exec.LookPath("python3")
	if err != nil {
		tb.Fatal("python3 is needed for the persistent worker tests (apt-get install python3)")
	}
	p.Argv = append([]string{bin, "testdata/persist_raw.py"}, args...)
	return p, log
}

// settleAll runs p on queue q, each job at most attempts times, until n
// jobs are done or dead, and returns the stats.
func settleAll(tb testing.TB, rdb *redis.Client, p *Persistent, attempts int, n int64) *Stats {
	tb.Helper()
	c := testConfig(rdb, p)
	c.MaxAttempts, c.RetryBackoff = attempts, 10*time.Millisecond
	st := new(Stats)
	runUntil(tb, c, st, func() bool { return st.Done.Load()+st.Dead.Load() >= n })
	return st
}

// A child that answers one delivery twice (error, then a late ok): the
// second answer settles nothing, neither the job's next attempt on the same
// child nor the next job.
func TestPersistentSecondAnswerIgnored(t *testing.T) {
	t.Run("next attempt of the job", func(t *testing.T) {
		rdb := redistest.Start(t).Client()
		p, log := newRaw(t)
		put(t, rdb, "twice")
		st := settleAll(t, rdb, p, 2, 1)
		if st.Done.Load() != 0 {
			t.Fatalf("the job is done: the first attempt's late ok settled the second attempt, which failed")
		}
		d := deadLetters(t, rdb, "q")
		if len(d) != 1 || d[0].Values["reason"] != ReasonFailed || d[0].Values["attempts"] != "2" || !strings.Contains(d[0].Values["error"].(string), "later attempt failed") {
			t.Fatalf("dead letters %v: want the job failed after its second attempt", d)
		}
		if rs := jobsRan(t, log); len(rs) != 2 || rs[0].pid != rs[1].pid {
			t.Fatalf("runs %+v: want both attempts on one child", rs)
		}
		settled(t, rdb, "q")
	})
	t.Run("next job", func(t *testing.T) {
		rdb := redistest.Start(t).Client()
		p, log := newRaw(t)
		put(t, rdb, "twice", "ok")
		st := settleAll(t, rdb, p, 1, 2)
		d := deadLetters(t, rdb, "q")
		if st.Done.Load() != 1 || len(d) != 1 || d[0].Values[PayloadField] != "twice" || d[0].Values["reason"] != ReasonFailed {
			t.Fatalf("%d done, dead letters %v: want the second job done, the first failed", st.Done.Load(), d)
		}
		if rs := jobsRan(t, log); len(rs) != 2 || rs[0].pid != rs[1].pid {
			t.Fatalf("runs %+v: want both jobs on one child, not killed for a stale answer", rs)
		}
		settled(t, rdb, "q")
	})
}

// A child that exits (status 0) between jobs costs no job: the job handed
// to it runs on a fresh child, no attempt counted.
func TestPersistentChildExitsBetweenJobs(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, log := newRaw(t)
	var payloads []string
	for i := 0; i < 12; i++ {
		payloads = append(payloads, "exit:0.2")
	}
	ids := put(t, rdb, payloads...)
	st := settleAll(t, rdb, p, 1, 12)
	if d := deadLetters(t, rdb, "q"); st.Done.Load() != 12 || len(d) != 0 {
		t.Fatalf("%d done, dead letters %v: want every job done", st.Done.Load(), d)
	}
	rs := jobsRan(t, log)
	if len(rs) != 12 || len(pids(rs)) != 12 {
		t.Fatalf("runs %+v: want each job once, each on its own child", rs)
	}
	for i, r := range rs {
		if r.id != ids[i] || r.attempt != 1 {
			t.Fatalf("run %d: %+v, want job %s at attempt 1", i, r, ids[i])
		}
	}
	if n := rdb.HGet(context.Background(), KeysFor("q").Stats, StatFailedPrefix+FailedCrashed).Val(); n != "" {
		t.Fatalf("%s crashed runs counted, want none", n)
	}
	settled(t, rdb, "q")
}

// A child that says ready and exits without reading a job failed to start:
// after StartFailures of them the holder gives up (ErrHandlerDown) and the
// job goes back unrun, instead of a crash blamed on it or a loop.
func TestPersistentChildExitsAfterReady(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, _ := newRaw(t, "--exit-after-ready")
	ids := put(t, rdb, "ok")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := testConfig(rdb, p)
	c.MaxAttempts = 1
	if err := Run(ctx, c, nil); !errors.Is(err, ErrHandlerDown) {
		t.Fatalf("Run = %v, want ErrHandlerDown", err)
	}
	if n := rdb.XLen(context.Background(), KeysFor("q").Stream).Val(); n != int64(len(ids)) || pending(t, rdb, "q") != 0 {
		t.Fatalf("stream holds %d entries (%d pending), want the job waiting", n, pending(t, rdb, "q"))
	}
	if d := deadLetters(t, rdb, "q"); len(d) != 0 {
		t.Fatalf("dead letters %v", d)
	}
}

// A drain waits for a child's start-up no longer than the grace: the child
// still starting is killed, and its job goes back unrun.
func TestPersistentDrainDuringStartup(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, _ := newRaw(t, "--slow-ready", "60")
	p.StartTimeout = 40 * time.Second
	put(t, rdb, "ok")
	c := testConfig(rdb, p)
	c.Grace = 500 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- Run(ctx, c, nil) }()
	for end := time.Now().Add(20 * time.Second); len(p.Children()) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("no child started in 20s")
		}
	}
	kid := p.Children()[0].PID
	start := time.Now()
	cancel() // SIGTERM: drain
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("Run still draining 10s after the drain began (grace 500ms): it waits for the child's start-up")
		<-errc
	}
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second || alive(kid) {
		t.Fatalf("drained and closed in %s, child alive: %v; want the starting child killed at the grace's end", took, alive(kid))
	}
	if n := rdb.XLen(context.Background(), KeysFor("q").Stream).Val(); n != 1 || pending(t, rdb, "q") != 0 {
		t.Fatalf("stream holds %d entries (%d pending), want the job back, unrun", n, pending(t, rdb, "q"))
	}
	// Given back, not cut short: its next run is its first attempt.
	p2, log := newRaw(t)
	settleAll(t, rdb, p2, 1, 1)
	if rs := jobsRan(t, log); len(rs) != 1 || rs[0].attempt != 1 {
		t.Fatalf("runs %+v: want one run, attempt 1", rs)
	}
}

// Only the running delivery's heartbeats count: those of a heartbeat
// thread a finished job left running, for itself or for an earlier attempt
// of the same job, do not keep a silent job alive.
func TestPersistentStaleHeartbeats(t *testing.T) {
	for _, lang := range langs {
		for _, tc := range []struct {
			name     string
			payloads []string
			attempts int
		}{
			{"finished job's", []string{"leak", "hang"}, 1},
			{"earlier attempt's", []string{"leak-fail"}, 2},
		} {
			t.Run(lang.name+"/"+tc.name, func(t *testing.T) {
				rdb := redistest.Start(t).Client()
				p, log := newWorker(t, lang.name)
				p.HeartbeatTimeout = 500 * time.Millisecond
				p.Timeout = 25 * time.Second
				put(t, rdb, tc.payloads...)
				settleAll(t, rdb, p, tc.attempts, int64(len(tc.payloads)))
				d := deadLetters(t, rdb, "q")
				if len(d) != 1 || d[0].Values["reason"] != ReasonTimeout || !strings.Contains(d[0].Values["error"].(string), "no heartbeat") {
					t.Fatalf("dead letters %v: want the silent job killed for its silence", d)
				}
				if rs := jobsRan(t, log); len(rs) != 2 || rs[0].pid != rs[1].pid {
					t.Fatalf("runs %+v: want both runs on one child", rs)
				}
			})
		}
	}
}
