package holder_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/holder"
	"github.com/baton-run/baton/internal/clock"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

var redisAddr string

func TestMain(m *testing.M) {
	addr, stop, err := redistest.StartMain()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	redisAddr = addr
	code := m.Run()
	stop()
	os.Exit(code)
}

// rig is one holder on its own queue and lock dir, with a fake clock.
type rig struct {
	t     *testing.T
	cfg   *config.Config
	clk   *clock.Fake
	rdb   *redis.Client
	run   lock.Set
	exits chan error // Hooks.Exit's calls
	// envFile, once a job of startSleeper's started, is its environment.
	envFile string
}

func newRig(t *testing.T, edit func(*config.Config)) *rig {
	t.Helper()
	c := config.Default()
	// A queue of its own, new on each -count run: the shared server keeps
	// the last run's pending jobs.
	c.Queue = strings.ToLower(strings.NewReplacer("/", "-").Replace(t.Name())) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c.RedisURL = "redis://" + redisAddr + "/0"
	c.LockDir = t.TempDir()
	c.Host = "testhost"
	c.StandbySlots, c.MinSlots = 0, 1
	c.Lifetime, c.Jitter = config.Duration{Duration: time.Hour}, config.Duration{}
	c.ShutdownGrace = config.Duration{Duration: 10 * time.Second}
	if edit != nil {
		edit(&c)
	}
	r := &rig{t: t, cfg: &c, clk: clock.NewFake(time.Now()), exits: make(chan error, 4)}
	r.rdb = redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = r.rdb.Close() })
	var err error
	if c.LockBackend == "redis" {
		if _, err := lock.MarkFresh(context.Background(), r.rdb, c.Queue); err != nil {
			t.Fatal(err)
		}
		r.run, err = lock.NewLeaseSet(r.rdb, c.Queue, lock.RoleRun, c.Slots,
			lock.LeaseOptions{Host: c.Host, TTL: c.LeaseTTL.D(), Renew: c.LeaseRenew.D()})
	} else {
		r.run, err = lock.NewFileSet(c.LockDir, c.Queue, lock.RoleRun, c.Slots)
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) holder(h work.Handler, argv ...string) *holder.Holder {
	return holder.New(holder.Options{Settings: r.cfg, Run: r.run, Handler: h, Argv: argv, Clock: r.clk, Log: zerolog.Nop(),
		Hooks: holder.Hooks{
			Connect: func(context.Context) (redis.UniversalClient, error) {
				return redis.NewClient(&redis.Options{Addr: redisAddr}), nil
			},
			Exit: func(why error) { r.exits <- why },
		}})
}

// hold takes a slot and holds it with h in a goroutine; the returned
// channel gets Hold's error.
func (r *rig) hold(ctx context.Context, h *holder.Holder) (lock.Slot, <-chan error) {
	r.t.Helper()
	slot, ok, err := r.run.TryAcquire()
	if err != nil || !ok {
		r.t.Fatalf("take a slot: %v %v", ok, err)
	}
	done := make(chan error, 1)
	go func() { done <- h.Hold(ctx, slot) }()
	r.t.Cleanup(func() { _ = h.Close() })
	return slot, done
}

func (r *rig) enqueue(payload string) string {
	r.t.Helper()
	id, err := work.Enqueue(context.Background(), r.rdb, r.cfg.Queue, []byte(payload))
	if err != nil {
		r.t.Fatal(err)
	}
	return id
}

// record waits for slot 0's record to say held (the first publish).
func (r *rig) record() lock.Record {
	r.t.Helper()
	return r.waitRecord(func(rec lock.Record) bool { return rec.Held && !rec.Until.IsZero() })
}

func (r *rig) waitRecord(ok func(lock.Record) bool) lock.Record {
	r.t.Helper()
	var last lock.Record
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		recs, err := r.run.Records()
		if err == nil && ok(recs[0]) {
			return recs[0]
		}
		if err == nil {
			last = recs[0]
		}
	}
	r.t.Fatalf("slot record never as expected; last %+v", last)
	return last
}

// advanceUntil moves the fake clock by d once the holder armed its timers
// (the hard deadline, the lifetime and the publisher's ticker at least).
func (r *rig) advance(d time.Duration) {
	r.t.Helper()
	for end := time.Now().Add(5 * time.Second); r.clk.Waiters() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			r.t.Fatalf("the holder armed %d timers", r.clk.Waiters())
		}
	}
	r.clk.Advance(d)
}

func wait[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", what)
	}
	var zero T
	return zero
}

func lastLeft(t *testing.T, rdb *redis.Client, q string) string {
	t.Helper()
	evs, err := history.ReadEvents(context.Background(), rdb, q, 10)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		switch evs[i].Kind {
		case history.KindLeft:
			return evs[i].Why
		case history.KindRetired:
			return history.WhyLifetime
		}
	}
	return ""
}

// The lifetime is lifetime + U[0, jitter) of the holder's clock: the record
// says so, and the holder works until the clock passes it, then leaves.
func TestLifetimeEndsOnTheClock(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *config.Config) { c.Jitter = config.Duration{Duration: 10 * time.Minute} })
	ran := make(chan string, 4)
	h := r.holder(work.HandlerFunc(func(_ context.Context, j *work.Job) error { ran <- j.ID; return nil }))
	_, done := r.hold(context.Background(), h)
	rec := r.record()
	if l := rec.Until.Sub(rec.Since); l < time.Hour || l >= time.Hour+10*time.Minute {
		t.Fatalf("lifetime %s: outside [1h, 1h10m)", l)
	}
	if want := rec.Until.Add(10*time.Second + holder.HardMargin); !rec.Deadline.Equal(want) {
		t.Fatalf("hard deadline %s, want until + shutdown_grace + HardMargin = %s", rec.Deadline, want)
	}
	id := r.enqueue("a")
	if got := wait(t, ran, "job"); got != id {
		t.Fatalf("ran %s, want %s", got, id)
	}
	select {
	case err := <-done:
		t.Fatalf("left before the lifetime ended: %v", err)
	default:
	}
	r.advance(rec.Until.Sub(r.clk.Now()) - time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("left a millisecond before the lifetime ended: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	r.clk.Advance(time.Millisecond)
	if err := wait(t, done, "leave"); err != nil {
		t.Fatal(err)
	}
	if why := lastLeft(t, r.rdb, r.cfg.Queue); why != history.WhyLifetime {
		t.Fatalf("left because %q, want %q", why, history.WhyLifetime)
	}
	s, ok, err := r.run.TryAcquire()
	if !ok {
		t.Fatalf("the slot was not released: %v", err)
	}
	_ = s.Release()
}

func TestLifetimeJitterBounds(t *testing.T) {
	t.Parallel()
	c := config.Default()
	c.Lifetime, c.Jitter = config.Duration{Duration: 5 * time.Minute}, config.Duration{Duration: time.Minute}
	for _, tc := range []struct {
		r    float64
		want time.Duration
	}{{0, 5 * time.Minute}, {0.5, 5*time.Minute + 30*time.Second}} {
		if got := holder.Lifetime(&c, tc.r); got != tc.want {
			t.Errorf("Lifetime(r=%v) = %s, want %s", tc.r, got, tc.want)
		}
	}
	if got := holder.Lifetime(&c, 0.9999999999); got >= 6*time.Minute {
		t.Errorf("Lifetime(r→1) = %s, not below lifetime + jitter", got)
	}
}

// A handler that ignores the end of its grace period is left behind at the
// hard deadline: the process exits (the hook), whatever the handler does.
func TestHardDeadlineExits(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *config.Config) {
		c.Lifetime = config.Duration{Duration: time.Minute}
		c.ShutdownGrace = config.Duration{Duration: time.Hour} // work.Run's grace is real time: never over here
	})
	started, release := make(chan struct{}, 1), make(chan struct{})
	h := r.holder(work.HandlerFunc(func(context.Context, *work.Job) error {
		started <- struct{}{}
		<-release // hung: deaf to its context
		return nil
	}))
	_, done := r.hold(context.Background(), h)
	r.enqueue("hang")
	wait(t, started, "job start")
	r.advance(time.Minute) // the lifetime ends: draining, the job hangs on
	r.clk.Advance(time.Hour + holder.HardMargin - time.Millisecond)
	select {
	case why := <-r.exits:
		t.Fatalf("exited before the hard deadline: %v", why)
	case <-time.After(20 * time.Millisecond):
	}
	r.clk.Advance(time.Millisecond)
	if why := wait(t, r.exits, "exit at the hard deadline"); !errors.Is(why, holder.ErrHardDeadline) {
		t.Fatalf("exit because %v, want ErrHardDeadline", why)
	}
	if why := lastLeft(t, r.rdb, r.cfg.Queue); why != history.WhyError {
		t.Fatalf("leave recorded as %q, want %q before the exit", why, history.WhyError)
	}
	close(release)
	wait(t, done, "Hold's return")
}

// startSleeper enqueues a job whose exec process writes its pid to a file
// and sleeps; it returns the pid once the job runs.
func startSleeper(t *testing.T, r *rig, ctx context.Context) (pid int, slot lock.Slot, done <-chan error, h *holder.Holder) {
	t.Helper()
	pidFile := filepath.Join(t.TempDir(), "pid")
	r.envFile = pidFile + ".env"
	h = r.holder(nil, "/bin/sh", "-c", `echo $$ > `+pidFile+`.tmp; env > `+pidFile+`.env; mv `+pidFile+`.tmp `+pidFile+`; exec sleep 60`)
	slot, done = r.hold(ctx, h)
	r.enqueue("sleep")
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		b, err := os.ReadFile(pidFile)
		if err == nil {
			if pid, err = strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				return pid, slot, done, h
			}
		}
		if time.Now().After(end) {
			t.Fatal("the job never started")
		}
	}
}

// gone waits for pid to be gone (reaped by the exec handler).
func gone(t *testing.T, pid int) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("job process %d still alive", pid)
		}
	}
}

// A lease lost (here: deleted in Redis, as a failover without persistence
// would) kills the running jobs and exits at once.
func TestLostSlotKillsJobsAndExits(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *config.Config) {
		c.LockBackend = "redis"
		c.LeaseTTL, c.LeaseRenew = config.Duration{Duration: 900 * time.Millisecond}, config.Duration{Duration: 50 * time.Millisecond}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pid, slot, done, _ := startSleeper(t, r, ctx)
	key, fence := holder.Fence(slot)
	if key == "" {
		t.Fatal("a lease slot without a fence")
	}
	jobEnv(t, r, "BATON_HOST=testhost", "BATON_FENCE="+strconv.FormatInt(fence, 10))
	if err := r.rdb.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	if why := wait(t, r.exits, "exit on the lost slot"); !errors.Is(why, holder.ErrSlotLost) {
		t.Fatalf("exit because %v, want ErrSlotLost", why)
	}
	gone(t, pid)
	cancel()
	wait(t, done, "Hold's return")
}

// A lease lost while the holder drains (the first signal came, its job
// still runs for up to shutdown_grace) still kills the job and exits: the
// lease expires meanwhile and the slot's next holder replays the job, so
// running it here too would run it twice at once. The watch used to end
// with the signal.
func TestLostSlotWhileDraining(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *config.Config) {
		c.LockBackend = "redis"
		c.LeaseTTL, c.LeaseRenew = config.Duration{Duration: 900 * time.Millisecond}, config.Duration{Duration: 50 * time.Millisecond}
	})
	ctx, cancel := context.WithCancel(context.Background())
	pid, slot, done, _ := startSleeper(t, r, ctx)
	cancel() // drain: the job runs on, within shutdown_grace (10s here)
	select {
	case err := <-done:
		t.Fatalf("left with a job running: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	key, _ := holder.Fence(slot)
	if err := r.rdb.Del(context.Background(), key).Err(); err != nil {
		t.Fatal(err)
	}
	if why := wait(t, r.exits, "exit on the lost slot while draining"); !errors.Is(why, holder.ErrSlotLost) {
		t.Fatalf("exit because %v, want ErrSlotLost", why)
	}
	gone(t, pid)
	wait(t, done, "Hold's return")
}

// The first signal (ctx cancelled) drains: the running job finishes and is
// acknowledged. The second (Abort) kills the running jobs and records the
// leave; the caller exits.
func TestDrainThenAbort(t *testing.T) {
	t.Parallel()
	t.Run("drain", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, nil)
		started, release := make(chan struct{}, 1), make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		h := r.holder(work.HandlerFunc(func(context.Context, *work.Job) error {
			started <- struct{}{}
			<-release
			return nil
		}))
		_, done := r.hold(ctx, h)
		r.enqueue("a")
		wait(t, started, "job start")
		cancel()
		select {
		case err := <-done:
			t.Fatalf("left with a job running: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		close(release)
		if err := wait(t, done, "leave"); err != nil {
			t.Fatal(err)
		}
		c, err := work.ReadCounts(context.Background(), r.rdb, r.cfg.Queue)
		if err != nil || c.Waiting+c.Pending != 0 {
			t.Fatalf("after the drain: %+v, %v; want the job acknowledged", c, err)
		}
		if why := lastLeft(t, r.rdb, r.cfg.Queue); why != history.WhyStopped {
			t.Fatalf("left because %q, want %q", why, history.WhyStopped)
		}
	})
	t.Run("abort", func(t *testing.T) {
		t.Parallel()
		r := newRig(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		pid, _, done, h := startSleeper(t, r, ctx)
		cancel() // first signal: the job runs on
		time.Sleep(5 * time.Millisecond)
		if syscall.Kill(pid, 0) != nil {
			t.Fatal("the first signal killed the job")
		}
		h.Abort(history.WhyStopped) // second signal
		gone(t, pid)
		if why := lastLeft(t, r.rdb, r.cfg.Queue); why != history.WhyStopped {
			t.Fatalf("leave recorded as %q, want %q", why, history.WhyStopped)
		}
		wait(t, done, "Hold's return")
	})
}

// jobEnv checks that the job's environment has want and that the holder
// left its own process's environment alone (no os.Setenv: a program that
// embeds the holder keeps its own).
func jobEnv(t *testing.T, r *rig, want ...string) {
	t.Helper()
	b, err := os.ReadFile(r.envFile)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.Split(string(b), "\n")
	for _, kv := range want {
		if !slices.Contains(env, kv) {
			t.Errorf("job environment lacks %s", kv)
		}
		if name, _, _ := strings.Cut(kv, "="); os.Getenv(name) != "" {
			t.Errorf("the holder set %s in its own process's environment", name)
		}
	}
}

// A flock holder's jobs get BATON_HOST, no BATON_FENCE.
func TestJobEnvironment(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	_, _, done, h := startSleeper(t, r, ctx)
	jobEnv(t, r, "BATON_HOST=testhost")
	if b, _ := os.ReadFile(r.envFile); strings.Contains(string(b), "BATON_FENCE=") {
		t.Error("a flock holder's job got BATON_FENCE")
	}
	cancel()
	h.Abort(history.WhyStopped)
	wait(t, done, "Hold's return")
}

// Told to stop (the first signal) while it connects, a holder leaves as
// from a drain: nil, the slot released, nothing to drain.
func TestStopWhileConnecting(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	dialing := make(chan struct{})
	h := holder.New(holder.Options{Settings: r.cfg, Run: r.run, Clock: r.clk, Log: zerolog.Nop(),
		Handler: work.HandlerFunc(func(context.Context, *work.Job) error { return nil }),
		Hooks: holder.Hooks{Connect: func(ctx context.Context) (redis.UniversalClient, error) {
			close(dialing)
			<-ctx.Done()
			return nil, ctx.Err()
		}}})
	_, done := r.hold(ctx, h)
	wait(t, dialing, "connect")
	cancel()
	if err := wait(t, done, "Hold's return"); err != nil {
		t.Fatalf("stopped while connecting: %v, want nil (a drain)", err)
	}
	s, ok, err := r.run.TryAcquire()
	if !ok {
		t.Fatalf("the slot was not released: %v", err)
	}
	_ = s.Release()
}
