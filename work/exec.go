//go:build linux

package work

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Exec is the CLI's default Handler: it runs a command once per job with the
// payload on stdin, never in argv or a shell string.
//
// The child gets Env, BATON_JOB_ID, BATON_ATTEMPT, BATON_QUEUE, BATON_SLOT,
// and, when Holder is set, BATON_HOLDER and BATON_RUN, and TRACEPARENT and
// TRACESTATE when the job carries a trace (Job.TraceParent); baton's own variables
// (BATON_REDIS_URL, which may hold a password, and BATON_SPAWNED) are
// removed from the environment it inherits. It runs in its own process group
// with Pdeathsig=SIGKILL, so it dies with its holder even on kill -9; on
// timeout or cancel the group gets SIGTERM, then SIGKILL after Grace. Its
// output is logged line by line, tagged with the job id and bounded by
// OutputLimit. Exit status alone decides success.
//
// When the process is a child subreaper (proc.BecomeSubreaper) and Holder is
// set, what a job leaves running outside its group (a daemon, a double fork)
// is adopted by the holder and killed when the job ends.
type Exec struct {
	Argv    []string
	Timeout time.Duration // per job, unless the job has its own (Job.Timeout); 0: none
	// RejectExitCodes are exit statuses that mean "do not retry": the job's
	// error then matches ErrSkipRetry and it is dead-lettered as rejected.
	RejectExitCodes []int
	Grace           time.Duration // SIGTERM to SIGKILL; default 10s
	OutputLimit     int           // bytes of stdout and of stderr logged per job; default 16 KiB
	Logger          zerolog.Logger
	// Holder is the holder's token (proc.NewToken), given to every job as
	// BATON_HOLDER: it proves which processes are this holder's. "": none.
	Holder string
	// Env is added to every job's environment (NAME=value each, replacing
	// an inherited value of the same name): the holder's BATON_HOST and
	// BATON_FENCE (holder.JobEnv).
	Env []string

	kin // the jobs' environment, process groups and run marks

	dirOnce sync.Once // makes dir
	dir     string    // the jobs' result files' directory (exec_result.go); "" until made
	dirErr  error     // why dir could not be made
}

var _ Handler = (*Exec)(nil)

// Handle runs the command for j and waits for it. When Timeout passes, or
// the job is cancelled (ctx's cause ErrCancelled), the group gets SIGTERM,
// then SIGKILL after Grace; when ctx ends otherwise (the holder's grace is
// over) it gets SIGKILL at once: there is no time left to give.
func (x *Exec) Handle(ctx context.Context, j *Job) error {
	grace := x.Grace
	if grace <= 0 {
		grace = 10 * time.Second
	}
	limit := x.OutputLimit
	if limit <= 0 {
		limit = 16 << 10
	}
	log := x.Logger.With().Str("job", j.ID).Logger()
	stdout := &lineLog{log: log, stream: "stdout", left: limit}
	stderr := &lineLog{log: log, stream: "stderr", left: limit, tail: make([]byte, 0, tailSize)}

	cmd := exec.Command(x.Argv[0], x.Argv[1:]...)
	// Our own pipes, so Wait returns when the child exits even if something it
	// left behind still holds them; what it left is killed right after.
	pipes, err := startPipes(cmd, j.Payload, stdout, stderr)
	if err != nil {
		return err
	}
	// The job's result file and progress fd (exec_result.go).
	resultEnv, resultPath, err := x.resultEnv(j)
	var progressEnv string
	if err == nil {
		progressEnv, err = pipes.progress(cmd, j, log)
	}
	if err != nil {
		pipes.started()
		pipes.wait()
		return err
	}
	run := x.prepare(cmd, x.Env, x.Holder, j.Queue, j.Slot, append([]string{
		"BATON_JOB_ID=" + j.ID,
		"BATON_ATTEMPT=" + strconv.Itoa(j.Attempt),
		resultEnv, progressEnv,
	}, append(append(append(j.tickEnv(), j.traceEnv()...), j.batchEnv()...), j.keyEnv()...)...)...)

	// Pdeathsig fires when the thread that forked exits, not the process:
	// keep this goroutine on its thread from fork to wait.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	x.track(0, run, true)
	err = proc.Start(cmd)
	pipes.started()
	if err != nil {
		x.track(0, run, false)
		pipes.wait()
		return fmt.Errorf("start %s: %w", x.Argv[0], err)
	}
	pgid := cmd.Process.Pid
	x.track(pgid, "", true)
	exited := make(chan struct{})
	var timedOut atomic.Bool
	timeout := x.Timeout
	if j.Timeout > 0 {
		timeout = j.Timeout
	}
	go x.supervise(ctx, pgid, timeout, grace, exited, &timedOut)
	err = cmd.Wait()
	proc.Done(pgid)
	close(exited)
	// Whatever the job left behind in its group goes with it, and what it
	// left outside its group, adopted by this subreaper, too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	x.track(pgid, run, false)
	x.killOrphans(x.Holder, x.Logger)
	if pipes.wait() {
		log.Debug().Msg("job output cut off: a process it left behind held the pipe open")
	}
	stdout.flush()
	stderr.flush()
	return takeResult(j, resultPath, exitError(err, timedOut.Load(), stderr.Tail(), x.RejectExitCodes))
}

// exitError turns cmd.Wait's error into an *ExecError (nil stays nil); an
// exit status listed in reject marks it Rejected.
func exitError(err error, timedOut bool, stderr string, reject []int) error {
	if err == nil {
		return nil
	}
	ee := &ExecError{ExitCode: -1, TimedOut: timedOut, Stderr: stderr}
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		return err
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		ee.Signal = unix.SignalName(ws.Signal())
	} else {
		ee.ExitCode = exitErr.ExitCode()
		ee.Rejected = slices.Contains(reject, ee.ExitCode)
	}
	return ee
}

// supervise signals the job's group on timeout (limit; 0: none) or cancel,
// until it exits.
func (x *Exec) supervise(ctx context.Context, pgid int, limit, grace time.Duration, exited <-chan struct{}, timedOut *atomic.Bool) {
	var timeout <-chan time.Time
	if limit > 0 {
		t := time.NewTimer(limit)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-exited:
		return
	case <-ctx.Done():
		if !errors.Is(context.Cause(ctx), ErrCancelled) {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			return
		}
		// Cancelled (baton cancel): the job gets its grace, as at a timeout.
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		ctx = context.WithoutCancel(ctx)
	case <-timeout:
		timedOut.Store(true)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-ctx.Done():
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	case <-t.C:
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

const tailSize = 1024

// lineLog logs a child's output one line per event, up to left bytes, and
// keeps the last tailSize bytes when tail is non-nil.
type lineLog struct {
	log     zerolog.Logger
	stream  string
	left    int
	dropped int
	buf     []byte
	tail    []byte
}

func (l *lineLog) Write(p []byte) (int, error) {
	if l.tail != nil {
		l.tail = append(l.tail, p...)
		if over := len(l.tail) - tailSize; over > 0 {
			l.tail = append(l.tail[:0], l.tail[over:]...)
		}
	}
	n := len(p)
	if l.left <= 0 {
		l.dropped += n
		return n, nil
	}
	if len(p) > l.left {
		l.dropped += len(p) - l.left
		p = p[:l.left]
	}
	l.left -= len(p)
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.emit(l.buf[:i])
		l.buf = l.buf[i+1:]
	}
	return n, nil
}

func (l *lineLog) emit(line []byte) {
	l.log.Info().Str("stream", l.stream).Bytes("line", line).Msg("job output")
}

func (l *lineLog) flush() {
	if len(l.buf) > 0 {
		l.emit(l.buf)
		l.buf = nil
	}
	if l.dropped > 0 {
		l.log.Warn().Str("stream", l.stream).Int("dropped_bytes", l.dropped).Msg("job output over the limit was not logged")
	}
}

// Tail is the end of what was written, trimmed to whole lines where possible.
func (l *lineLog) Tail() string {
	t := bytes.TrimSpace(l.tail)
	if len(l.tail) >= tailSize {
		if i := bytes.IndexByte(t, '\n'); i >= 0 {
			t = t[i+1:]
		}
	}
	return string(t)
}
