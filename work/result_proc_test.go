package work

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

func shExec(script string) *Exec {
	return &Exec{Argv: []string{"sh", "-c", script}, Grace: 2 * time.Second, Logger: testLogger()}
}

// An exec job's result is what it writes to $BATON_RESULT_FILE (never its
// stdout), its progress the lines it writes to $BATON_PROGRESS_FD; a
// result over result_max fails it, and the result files' directory goes
// with Close.
func TestExecResultAndProgress(t *testing.T) {
	rdb := redistest.Start(t).Client()
	ctx := context.Background()
	x := shExec(`
case "$(cat)" in
result) echo "log line"; printf 'the result\000' > "$BATON_RESULT_FILE" ;;
big) head -c 200 /dev/zero > "$BATON_RESULT_FILE" ;;
fails) echo partial > "$BATON_RESULT_FILE"; exit 3 ;;
progress)
  echo "200 out of range" >&$BATON_PROGRESS_FD
  echo "not a number" >&$BATON_PROGRESS_FD
  echo "42 resizing" >&$BATON_PROGRESS_FD
  while [ ! -e "$STOP" ]; do sleep 0.05; done ;;
flood)
  i=0; yes '7 flood' | head -n 100000 >&$BATON_PROGRESS_FD; echo "99 flooded" >&$BATON_PROGRESS_FD
  while [ ! -e "$STOP" ]; do sleep 0.05; done ;;
esac`)
	stop := t.TempDir() + "/stop"
	t.Setenv("STOP", stop)
	ids := put(t, rdb, "result", "big", "fails", "progress", "flood")
	c := testConfig(rdb, x)
	c.ResultMax, c.MaxAttempts, c.Retention, c.Concurrency = 100, 1, time.Minute, 5
	before := hsetCalls(t, rdb)
	st := runFor(t, c)
	waitFor(t, "progress of both", func() bool {
		a, ok1, _ := ProgressOf(ctx, rdb, "q", ids[3])
		b, ok2, _ := ProgressOf(ctx, rdb, "q", ids[4])
		return ok1 && ok2 && a.Pct == 42 && a.Msg == "resizing" && b.Pct == 99 && b.Msg == "flooded"
	})
	start := time.Now()
	time.Sleep(time.Second) // let a flood of writes show, if there were one
	if n := hsetCalls(t, rdb) - before; n > 4*int(time.Since(start).Seconds()+5) {
		t.Errorf("%d HSETs: progress written more than twice a second", n)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all settled", func() bool { return st.Done.Load()+st.Dead.Load() == 5 })
	if b, err := Result(ctx, rdb, "q", ids[0]); err != nil || string(b) != "the result\x00" {
		t.Errorf("exec result = %q, %v", b, err)
	}
	if b, err := Result(ctx, rdb, "q", ids[3]); err != nil || b != nil {
		t.Errorf("a job that wrote no result: %q, %v", b, err)
	}
	for i, want := range map[int]string{1: "200 bytes, result_max is 100", 2: "exit"} {
		_, err := Wait(ctx, rdb, "q", ids[i])
		var de *DeadError
		if !errors.As(err, &de) || !strings.Contains(de.Err, want) {
			t.Errorf("job %q: %v, want a dead letter saying %q", []string{"result", "big", "fails"}[i], err, want)
		}
	}
	dir := x.dir
	if dir == "" {
		t.Fatal("no result directory")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("result files left: %v", ents)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("result directory still there after Close: %v", err)
	}
}

// Persistent children (the Python and Node helpers): the handler's return
// value is the result, progress frames are progress (a flood written at
// most twice a second), a result over result_max fails the job.
func TestPersistentResultAndProgress(t *testing.T) {
	for _, l := range langs {
		t.Run(l.name, func(t *testing.T) {
			rdb := redistest.Start(t).Client()
			ctx := context.Background()
			p, _ := newWorker(t, l.name)
			p.HeartbeatTimeout = 1500 * time.Millisecond
			ids := put(t, rdb, "result:bytes\x01", "text:héllo", "big:200", "progress:1", "flood:100000")
			c := testConfig(rdb, p)
			c.ResultMax, c.MaxAttempts, c.Retention = 100, 1, time.Minute
			before := hsetCalls(t, rdb)
			st := runFor(t, c)
			waitFor(t, "progress 42", func() bool {
				n, ok, _ := ProgressOf(ctx, rdb, "q", ids[3])
				return ok && n.Pct == 42 && n.Msg == "resizing"
			})
			waitFor(t, "all settled", func() bool { return st.Done.Load()+st.Dead.Load() == 5 })
			if st.Dead.Load() != 1 {
				t.Errorf("%d dead, want 1 (the big result)", st.Dead.Load())
			}
			for i, want := range []string{"bytes\x01", "héllo"} {
				if b, err := Result(ctx, rdb, "q", ids[i]); err != nil || string(b) != want {
					t.Errorf("result %d = %q, %v; want %q", i, b, err, want)
				}
			}
			var de *DeadError
			if _, err := Wait(ctx, rdb, "q", ids[2]); !errors.As(err, &de) || !strings.Contains(de.Err, "result_max is 100") {
				t.Errorf("big result: %v", err)
			}
			if b, err := Result(ctx, rdb, "q", ids[4]); err != nil || b != nil {
				t.Errorf("flood's result = %q, %v", b, err)
			}
			// two jobs' progress over about 3s: at most twice a second each
			if n := hsetCalls(t, rdb) - before; n > 20 {
				t.Errorf("%d HSETs: progress written more than twice a second", n)
			}
		})
	}
}

// A cancelled job on a persistent child: a helper whose handler honours
// the cancel (Python: Cancelled raised; Node: job.signal aborted) answers,
// and its child stays for the next job; one that ignores it is killed
// after the grace and replaced. Either way the job is dead-lettered as
// cancelled, once.
func TestPersistentCancelFrame(t *testing.T) {
	for _, l := range langs {
		for _, stubborn := range []bool{false, true} {
			name := l.name + "/honoured"
			payload := "cancellable"
			if stubborn {
				name, payload = l.name+"/ignored", "stubborn"
			}
			t.Run(name, func(t *testing.T) {
				rdb := redistest.Start(t).Client()
				ctx := context.Background()
				p, log := newWorker(t, l.name)
				p.Grace = time.Second
				ids := put(t, rdb, payload)
				c := testConfig(rdb, p)
				st := runFor(t, c)
				waitFor(t, "running", func() bool { return len(jobsRan(t, log)) == 1 })
				pid := jobsRan(t, log)[0].pid
				start := time.Now()
				if res, err := Cancel(ctx, rdb, "q", ids[0]); err != nil || res[0].Outcome != CancelRequested {
					t.Fatalf("cancel: %+v, %v", res, err)
				}
				if _, err := Wait(ctx, rdb, "q", ids[0]); !errors.Is(err, ErrCancelled) {
					t.Fatalf("Wait = %v, want cancelled", err)
				}
				took := time.Since(start)
				waitFor(t, "counted dead", func() bool { return st.Dead.Load() == 1 })
				switch {
				case stubborn && alive(pid):
					t.Errorf("the child that ignored the cancel (pid %d) is still alive", pid)
				case stubborn && took < p.Grace:
					t.Errorf("killed after %s, before its grace %s", took, p.Grace)
				case !stubborn && !alive(pid):
					t.Errorf("the child that honoured the cancel (pid %d) was killed", pid)
				case !stubborn && took > p.Grace+2*time.Second:
					t.Errorf("cancel took %s", took)
				}
				// the lane goes on: the next job runs (on the same child when it answered)
				put(t, rdb, "result:next")
				waitFor(t, "the next job", func() bool { return st.Done.Load() == 1 })
				if st.Dead.Load() != 1 {
					t.Errorf("%d dead, want the cancelled job once", st.Dead.Load())
				}
				if r := jobsRan(t, log); len(r) != 2 || (r[1].pid == pid) == stubborn {
					t.Errorf("jobs ran %+v; the second on the same child: %v, want %v", r, r[len(r)-1].pid == pid, !stubborn)
				}
			})
		}
	}
}

// A progress frame restarts the heartbeat_timeout clock: a job that
// reports progress every 200ms, and sends no heartbeat, outlives a 600ms
// heartbeat_timeout; one that is silent as long does not.
func TestPersistentProgressIsAHeartbeat(t *testing.T) {
	rdb := redistest.Start(t).Client()
	p, _ := newPersistent(t)
	p.HeartbeatTimeout = 600 * time.Millisecond
	ids := put(t, rdb, "steps:10", "sleep:2")
	c := testConfig(rdb, p)
	c.MaxAttempts, c.Retention = 1, time.Minute
	runFor(t, c)
	ctx := context.Background()
	if _, err := Wait(ctx, rdb, "q", ids[0]); err != nil {
		t.Errorf("the job reporting progress: %v, want done", err)
	}
	var de *DeadError
	if _, err := Wait(ctx, rdb, "q", ids[1]); !errors.As(err, &de) || de.Reason != ReasonTimeout {
		t.Errorf("the silent job: %v, want dead by timeout", err)
	}
}
