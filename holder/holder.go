// Package holder is a holder's tenure: what a process that won a slot does
// with it until it leaves. A candidate (package cli) takes a slot through
// the standby protocol and hands it over here; the holder works the queue
// on it (work.Run) until its lifetime ends, and releases it.
//
// The one call is Hold, on a Holder built by New:
//
//	h := holder.New(holder.Options{Settings: cfg, Run: run, Hooks: hooks})
//	defer h.Close()
//	err := h.Hold(ctx, slot)
//
// A standby slot is held with Stand first, which waits for a run slot.
//
// Hold owns every part of the tenure, each a component started and stopped
// in the order documented on Hold: the jittered lifetime, the hard deadline,
// the lost-slot watch, the job handler and the processes it starts, the
// record publisher and the scaler, the slot history, the metrics file and
// the per-minute samples. What only the process may do (exit at the hard
// deadline or on a lost slot, spawn candidates, connect to Redis with the
// process's settings) comes in as Hooks; time comes from a clock.Clock, so
// that tests run lifetimes and deadlines without sleeping.
//
// Guarantees: the hard deadline (lifetime + shutdown_grace + HardMargin) is
// in the slot record before anything else happens, and past it the process
// leaves whatever its handlers do; a lost slot kills the jobs at once (their
// entries stay pending for the slot's next holder); the slot is released
// only once every job and every process a job started is gone.
package holder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/baton-run/baton/history"
	"github.com/baton-run/baton/internal/clock"
	"github.com/baton-run/baton/internal/config"
	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/metrics"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel/trace"
)

// HardMargin is the slack after lifetime + shutdown_grace before the
// process leaves whatever its handlers do.
const HardMargin = 2 * time.Second

// Why the process must exit at once (Hooks.Exit).
var (
	// ErrHardDeadline: jobs still ran past lifetime + shutdown_grace +
	// HardMargin; they were killed.
	ErrHardDeadline = errors.New("hard deadline passed")
	// ErrSlotLost: another process holds the slot now; the jobs were killed
	// and stay pending for it.
	ErrSlotLost = errors.New("slot lost")
)

// Options are what a holder needs. Settings and Hooks.Connect are required.
type Options struct {
	Settings *config.Config
	// Run is all the queue's run slots (slots of them, not only the kept
	// min_slots): the history, the scaler and the metrics read it. Standby
	// is the standby slots, nil when standby_slots is 0.
	Run, Standby lock.Set
	// Handler runs the jobs. nil: the exec handler runs Argv for each job,
	// or with Settings.Persistent, long-lived children of Argv do.
	Handler work.Handler
	Argv    []string
	// Heal, unless nil, kills a frozen sibling holder; the publisher calls
	// it once a second (standby.Protocol.Heal).
	Heal func() bool
	// By is who took the run slot (history.ByCandidate when "").
	By string
	// OwnsProcess: the holder is its process, alone (baton run). It names
	// the process, becomes a child subreaper so that what jobs leave
	// running is adopted and killed, and kills every descendant on a
	// forced exit. False where the process is shared (tests, embedders).
	OwnsProcess bool
	Clock       clock.Clock // nil: clock.Real
	// TracerProvider, unless nil, makes a span per run of a job
	// (work.Config.TracerProvider). nil: tracing off.
	TracerProvider trace.TracerProvider
	Log            zerolog.Logger
	Hooks          Hooks
}

// Hooks are what only the process may do.
type Hooks struct {
	// Connect opens the job loop's Redis client. Required.
	Connect func(ctx context.Context) (redis.UniversalClient, error)
	// Exit leaves the process at once (why: ErrHardDeadline or
	// ErrSlotLost), after the holder killed its jobs; in baton run it never
	// returns. nil: os.Exit(1).
	Exit func(why error)
	// Spawn starts n scale-up candidates and returns how many started.
	// nil: none start.
	Spawn func(n int) int
}

// Holder is one process's tenure of a slot. Its methods are called from
// the goroutine that calls Hold, except Abort (any goroutine).
type Holder struct {
	cfg  *config.Config
	o    Options
	clk  clock.Clock
	log  zerolog.Logger
	host string
	// Set by connect, before any component starts; read by them after.
	rdb  redis.UniversalClient
	hist *history.Recorder // nil when the run set is unknown
	// freeSince: since when a promoted standby saw the run slot free
	// (set by Stand).
	freeSince time.Time
	collector *metrics.Collector // metrics_file's, built once by metricsCollector
	tookDone  chan struct{}      // closed once took's record is written (or failed)
	leftOnce  sync.Once          // the leave is recorded once, forced exit or not

	mu    sync.Mutex       // guards kids and leave: Abort reads them from another goroutine
	kids  killer           // the exec or persistent handler; nil with a Go handler
	leave func(why string) // records leaving the run slot held now, for a forced exit; nil before
}

// killer is a handler that starts processes: KillAll kills them all.
type killer interface{ KillAll() }

// New is a holder of nothing yet: Stand or Hold give it a slot.
func New(o Options) *Holder {
	h := &Holder{cfg: o.Settings, o: o, clk: o.Clock, log: o.Log, host: o.Settings.Host}
	if h.clk == nil {
		h.clk = clock.Real
	}
	if h.o.Hooks.Exit == nil {
		h.o.Hooks.Exit = func(error) { os.Exit(1) }
	}
	return h
}

// Close closes the Redis client, once the holder is done.
func (h *Holder) Close() error {
	if h.rdb == nil {
		return nil
	}
	return h.rdb.Close()
}

// connect opens and prepares the job loop's client, once.
func (h *Holder) connect(ctx context.Context) error {
	if h.rdb != nil {
		return nil
	}
	rdb, err := h.o.Hooks.Connect(ctx)
	if err != nil {
		return err
	}
	if err := work.Prepare(ctx, rdb, work.KeysFor(h.cfg.Queue)); err != nil {
		_ = rdb.Close()
		return fmt.Errorf("prepare queue %s on %s: %w", h.cfg.Queue, h.cfg.RedisName(), err)
	}
	h.rdb = rdb
	if h.o.Run != nil {
		h.hist = &history.Recorder{Client: rdb, Queue: h.cfg.Queue, Keep: h.cfg.MinSlots, Run: h.o.Run, PID: os.Getpid(), Host: h.host}
	}
	return nil
}

func (h *Holder) record(role string, since, until time.Time) lock.Record {
	start, _ := proc.StartTime(os.Getpid())
	r := lock.Record{PID: os.Getpid(), Start: start, Host: h.host, Role: role, Since: since, Until: until}
	Activity{}.Put(&r) // jobs_done 0, as before
	return r
}

// setName names the process, when it is the holder's own.
func (h *Holder) setName(name string) {
	if h.o.OwnsProcess {
		_ = proc.SetName(name)
	}
}

// Abort kills the jobs and, when a run slot is held, records leaving it
// (why, a history.Why* value); the caller exits next (a second signal).
// It waits half a second at most, however the record fares: a Redis that
// stopped answering holds a reply for the client's read timeout whatever
// the context says, and a normal leave in progress holds leftOnce. Safe
// from any goroutine.
func (h *Holder) Abort(why string) {
	h.killAll()
	h.mu.Lock()
	leave := h.leave
	h.mu.Unlock()
	if leave == nil {
		return
	}
	done := make(chan struct{})
	go func() { // owned by Abort: it waits for it, half a second at most
		defer close(done)
		leave(why)
	}()
	select {
	case <-done:
	case <-time.After(500 * time.Millisecond):
	}
}

// UnhealableError refuses a slot whose hard deadline could be published
// nowhere (a full disk as the slot was won): nobody could ever prove the
// holder overdue, and a frozen one would keep the slot forever.
type UnhealableError struct {
	Slot, Dir string
	Err       error
}

func (e *UnhealableError) Error() string {
	return fmt.Sprintf("refusing slot %s: its hard deadline cannot be published in %s, so a frozen holder could never be healed: %v", e.Slot, e.Dir, e.Err)
}

func (e *UnhealableError) Unwrap() error { return e.Err }

// refuseUnhealable turns err, from publishing a record with a hard
// deadline, into the error that makes slot's holder leave before it works.
// Other publish errors are the publish loop's to log and retry: the
// deadline is in the lock file.
func refuseUnhealable(err error, slot lock.Slot, dir string) error {
	if !errors.Is(err, lock.ErrDeadlineUnpublished) {
		return nil
	}
	return &UnhealableError{Slot: slot.Name(), Dir: dir, Err: err}
}

// Consumer is the Redis consumer of run slot i: host/run-i with flock
// files, host being the configured host (host, BATON_HOST; default the
// hostname), as the slot is this machine's; fleet/run-i with leases (the
// slot is the fleet's, so another host replays a lost host's pending
// entries). A holder reads as it; baton job finds a job's slot by it.
func Consumer(cfg *config.Config, i int) string {
	slot := lock.RoleRun + "-" + strconv.Itoa(i)
	if cfg.LockBackend == "redis" {
		return "fleet/" + slot
	}
	return cfg.Host + "/" + slot
}

// Fence is slot's lease key and fencing token; "" and 0 for a flock slot.
func Fence(slot lock.Slot) (key string, token int64) { return slot.Fence() }
