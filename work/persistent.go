package work

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
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

// Persistent is a Handler that keeps long-lived children, one per running
// job at most (so one per lane of Config.Concurrency), and feeds each one
// job at a time over the worker protocol (docs/workers.md): frames on fds
// 3 (baton to child) and 4 (child to baton); stdout and stderr are logged
// like an exec job's. Children are started like exec jobs (own process
// group, Pdeathsig=SIGKILL, Env, BATON_QUEUE, BATON_SLOT, BATON_HOLDER and
// BATON_RUN, baton's secrets removed), plus BATON_PROTOCOL.
//
// Self-defence: a job that runs past its timeout (Job.Timeout, else
// Timeout) or is silent for HeartbeatTimeout gets its child's group killed
// and fails with ErrJobTimeout; a child that dies or breaks the framing
// mid-job fails the job with ErrCrashed; either way the next job gets a
// fresh child. A child found dead before it read its job (it exited
// between jobs) costs the job nothing: the job runs on a fresh child. Each
// job frame carries a delivery number (seq) that the child echoes: a
// result or heartbeat of another delivery is ignored, so a child that
// answers twice cannot settle a later run, nor a leftover heartbeat keep
// one alive. A child is replaced after about MaxJobsPerChild jobs (±10%)
// or when its resident memory passes MaxRSS. A child that cannot start
// (exits or is silent before its ready message, or exits after it without
// reading a job) is retried with backoff; after StartFailures failures in
// a row Handle returns ErrHandlerDown with the tail of its stderr. A
// child's start-up lasts no longer than Handle's context (a drain's
// grace): the job goes back unrun. Close stops the children: each gets
// the stop message and is killed if it is still there after its grace.
type Persistent struct {
	Argv             []string
	Timeout          time.Duration // per job; Job.Timeout overrides it; 0: none
	HeartbeatTimeout time.Duration // longest silence during a job; 0: off
	MaxJobsPerChild  int           // replace a child after about this many jobs (±10%); 0: unlimited
	MaxRSS           int64         // replace a child whose RSS passes this many bytes; 0: off
	Grace            time.Duration // how long a stopped child may take to exit; default 10s
	StartTimeout     time.Duration // how long a child may take to say ready; default 60s
	StartFailures    int           // failed starts in a row before giving up; default 3
	OutputLimit      int           // bytes of stdout and of stderr logged per job; default 16 KiB
	Logger           zerolog.Logger
	// Holder is the holder's token (proc.NewToken), given to every child as
	// BATON_HOLDER: it proves which processes are this holder's. "": none.
	Holder string
	// Env is added to every child's environment (NAME=value each, replacing
	// an inherited value of the same name): the holder's BATON_HOST and
	// BATON_FENCE (holder.JobEnv).
	Env []string

	kin                 // the children's environment, process groups and run marks
	fails atomic.Int32  // failed starts in a row, across lanes
	seq   atomic.Uint64 // the last delivery number given to a job frame

	mu   sync.Mutex
	idle []*child            // children waiting for a job; guarded by mu
	all  map[*child]struct{} // every child not yet exited; guarded by mu
	wg   sync.WaitGroup      // retiring children
}

var _ Handler = (*Persistent)(nil)

// ownsTimeouts: Persistent kills a child at the job's timeout itself.
func (p *Persistent) ownsTimeouts() {}

var _ ownsTimeouts = (*Persistent)(nil)

// child is one long-lived worker process. The lane running a job owns it;
// its waiter goroutine sets err and closes exited; its reader goroutine
// sends frames on msgs and sets readErr before closing msgs; its writer
// goroutine writes what is sent on out.
type child struct {
	pid     int
	run     string        // its BATON_RUN mark
	to      *os.File      // fd 3's write end: small frames go straight, large ones via out
	out     chan [][]byte // frames to write to fd 3
	msgs    chan frame    // frames read from fd 4; closed at EOF or a bad frame
	readErr error         // a protocol error; set before msgs closes
	exited  chan struct{} // closed once it exited and its output is logged
	err     error         // its exit as an *ExecError, nil for status 0; set before exited closes
	stdout  *childOutput
	stderr  *childOutput
	jobs    atomic.Int64 // jobs run; written by the lane, read by Children
	limit   int          // jobs before it is replaced; 0: none

	// What fd 3's pipe carried, to tell whether a child that died had read
	// its job: the pipe is FIFO, so the child read some of a frame iff it
	// consumed (written - unread) more than the bytes sent before it.
	queued  int64         // bytes of the frames the lane sent; the lane's own
	written atomic.Int64  // bytes written to fd 3, by the lane or the writer
	unread  int64         // bytes left in the pipe once it exited, -1: unknown; set before exited closes
	wdone   chan struct{} // closed once the writer returned: written is final
}

// Handle runs j on an idle child, or on a fresh one; on a fresh one again
// when the child turns out to be dead before it read j.
func (p *Persistent) Handle(ctx context.Context, j *Job) error {
	for {
		c, err := p.take(ctx, j)
		if err != nil {
			return err
		}
		alive, err := p.run(ctx, c, j)
		if errors.Is(err, errUnstarted) {
			// Not the job's fault. A child that never read a job did not
			// start either: counted as a failed start, so one that says
			// ready and exits cannot loop.
			p.Logger.Warn().Err(err).Str("job", j.ID).Int("child", c.pid).Msg("persistent child gone before it read its job: running the job on a fresh child")
			if c.jobs.Load() == 0 {
				if err := p.failed(ctx, err); err != nil {
					return err
				}
			}
			continue
		}
		p.fails.Store(0)
		if !alive {
			return err
		}
		return p.done(c, err)
	}
}

// done puts c back to the idle children after a job, or replaces it.
func (p *Persistent) done(c *child, err error) error {
	jobs := c.jobs.Add(1)
	switch {
	case c.limit > 0 && jobs >= int64(c.limit):
		p.retire(c, "max_jobs_per_child")
	case p.MaxRSS > 0 && rss(c.pid) > p.MaxRSS:
		p.retire(c, "max_child_rss")
	default:
		p.mu.Lock()
		p.idle = append(p.idle, c)
		p.mu.Unlock()
	}
	return err
}

// run sends j to c and waits for its result. alive is false when c was
// killed or died.
func (p *Persistent) run(ctx context.Context, c *child, j *Job) (alive bool, err error) {
	log := p.Logger.With().Str("job", j.ID).Int("child", c.pid).Logger()
	c.stdout.next(log)
	c.stderr.next(log)
	seq := p.seq.Add(1)
	f := jobFrame(j)
	f.Seq = seq
	bufs := f.encode()
	before := c.queued
	for _, b := range bufs {
		c.queued += int64(len(b))
	}
	c.send(bufs)
	timeout := p.Timeout
	if j.Timeout > 0 {
		timeout = j.Timeout
	}
	var deadline, silence <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	var hb *time.Timer
	if p.HeartbeatTimeout > 0 {
		hb = time.NewTimer(p.HeartbeatTimeout)
		defer hb.Stop()
		silence = hb.C
	}
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				err := p.lost(c, "died mid-job")
				if !c.started(before) {
					return false, fmt.Errorf("child %d gone before it read job %s: %w: %w", c.pid, j.ID, errUnstarted, err)
				}
				return false, err
			}
			// A frame without seq (a child of an older helper) is this
			// delivery's when it names this job.
			ours := m.ID == j.ID && (m.Seq == 0 || m.Seq == seq)
			switch {
			case m.Type == frameProgress && ours:
				p.progressed(j, m, log)
				if hb != nil {
					hb.Reset(p.HeartbeatTimeout)
				}
			case m.Type == frameHeartbeat && !ours:
				// Only this delivery's heartbeats keep it alive: not a
				// finished job's, nor an earlier run's of this job.
				log.Debug().Str("of_job", m.ID).Uint64("seq", m.Seq).Uint64("want_seq", seq).Msg("ignored a heartbeat of another delivery")
			case m.Type == frameHeartbeat && hb != nil:
				hb.Reset(p.HeartbeatTimeout)
			case m.Type == frameHeartbeat:
			case m.Type != frameResult:
				log.Debug().Str("type", m.Type).Msg("ignored a frame of an unknown type")
			case m.Seq != 0 && m.Seq != seq:
				// A late or second answer to an earlier delivery: it must
				// not settle this one.
				log.Warn().Str("of_job", m.ID).Uint64("seq", m.Seq).Uint64("want_seq", seq).Str("status", m.Status).Msg("ignored a result of an earlier delivery")
			case m.ID != j.ID:
				p.kill(c)
				return false, fmt.Errorf("child %d: %w: result for job %q while running %q: %w", c.pid, errProtocol, m.ID, j.ID, ErrCrashed)
			case m.Status == statusOK:
				if len(m.body) > 0 {
					_ = j.SetResult(m.body) // over result_max: the runner fails the job
				}
				return true, nil
			case m.Status == statusError:
				return true, errors.New(orDefault(m.Error, "the worker reported a failure"))
			case m.Status == statusSkip:
				return true, fmt.Errorf("%s: %w", orDefault(m.Error, "rejected by the worker"), ErrSkipRetry)
			default:
				p.kill(c)
				return false, fmt.Errorf("child %d: %w: result status %q: %w", c.pid, errProtocol, m.Status, ErrCrashed)
			}
		case <-deadline:
			p.kill(c)
			return false, fmt.Errorf("%w after %s: child %d killed", ErrJobTimeout, timeout, c.pid)
		case <-silence:
			p.kill(c)
			return false, fmt.Errorf("%w: no heartbeat for %s: child %d killed", ErrJobTimeout, p.HeartbeatTimeout, c.pid)
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), ErrCancelled) {
				return p.cancel(c, j, seq, log)
			}
			p.kill(c)
			return false, fmt.Errorf("child %d killed: %w", c.pid, context.Cause(ctx))
		}
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// lost waits for a child whose fd 4 closed or broke and says why it is gone.
func (p *Persistent) lost(c *child, what string) error {
	if c.readErr != nil {
		p.kill(c)
		return fmt.Errorf("child %d: %w: %w", c.pid, c.readErr, ErrCrashed)
	}
	c.await()
	return fmt.Errorf("child %d %s: %w: %w", c.pid, what, ErrCrashed, c.exit())
}

// await waits for a child whose fd 4 closed to exit: a second at most, then
// it is killed (it closed fd 4 but lives on).
func (c *child) await() {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		_ = syscall.Kill(-c.pid, syscall.SIGKILL)
		<-c.exited
	}
}

// started says whether c, which exited, had read any byte of the frame
// sent after the first before bytes of fd 3. When unsure: yes.
func (c *child) started(before int64) bool {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-c.wdone:
	case <-t.C: // a writer stuck on a pipe that an escaped process holds
		return true
	}
	return c.unread < 0 || c.written.Load()-c.unread > before
}

// unreadIn is how many bytes wait in the pipe f writes to (FIONREAD, named
// TIOCINQ on Linux); -1 when unknown.
func unreadIn(f *os.File) int64 {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	_ = rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ); err == nil {
			n = v
		}
	})
	return int64(n)
}

// exit is how c ended; only once exited is closed.
func (c *child) exit() error {
	if c.err != nil {
		return c.err
	}
	return &ExecError{Stderr: c.stderr.tail()}
}

// take returns an idle child, or starts one; a start that fails is retried
// with backoff, and after StartFailures failures in a row it gives up with
// ErrHandlerDown. When ctx ends first (the end of a drain's grace), the
// job was not started: errUnstarted.
func (p *Persistent) take(ctx context.Context, j *Job) (*child, error) {
	if ctx.Err() != nil {
		return nil, fmt.Errorf("take a persistent child: %w: %w", context.Cause(ctx), errUnstarted)
	}
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		select {
		case <-c.exited: // died between jobs: not this job's fault
			continue
		default:
		}
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	for {
		c, err := p.start(j.Queue, j.Slot)
		if err == nil {
			if err = p.ready(ctx, c); err == nil {
				return c, nil
			}
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("start a persistent child: %w: %w", context.Cause(ctx), errUnstarted)
		}
		if err := p.failed(ctx, err); err != nil {
			return nil, err
		}
	}
}

// failed counts a failed start: after StartFailures in a row it gives up
// with ErrHandlerDown, else it waits its backoff (100ms, 200ms, ... 5s).
// The count restarts when a child starts a job.
func (p *Persistent) failed(ctx context.Context, err error) error {
	most := p.StartFailures
	if most < 1 {
		most = 3
	}
	n := int(p.fails.Add(1))
	if n >= most {
		return fmt.Errorf("%w: %s failed to start %d times in a row: %w", ErrHandlerDown, p.Argv[0], n, err)
	}
	wait := min(100*time.Millisecond<<(n-1), 5*time.Second)
	p.Logger.Warn().Err(err).Int("failures", n).Dur("retry_in", wait).Msg("persistent child failed to start")
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("start a persistent child: %w: %w", context.Cause(ctx), errUnstarted)
	}
}

// ready waits for c's ready message, or until ctx ends: a drain waits for
// a child's start-up no longer than its grace.
func (p *Persistent) ready(ctx context.Context, c *child) error {
	wait := p.StartTimeout
	if wait <= 0 {
		wait = time.Minute
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case m, ok := <-c.msgs:
		switch {
		case !ok && c.readErr != nil:
			p.kill(c)
			return fmt.Errorf("child %d: %w", c.pid, c.readErr)
		case !ok:
			c.await()
			return fmt.Errorf("child %d exited before ready: %w", c.pid, c.exit())
		case m.Type != frameReady:
			p.kill(c)
			return fmt.Errorf("child %d: %w: sent %q before ready", c.pid, errProtocol, m.Type)
		}
		p.Logger.Debug().Int("child", c.pid).Msg("persistent child ready")
		return nil
	case <-t.C:
		p.kill(c)
		return fmt.Errorf("child %d: no ready message within %s: %w", c.pid, wait, c.exit())
	case <-ctx.Done():
		p.kill(c)
		return fmt.Errorf("child %d killed before ready: %w", c.pid, context.Cause(ctx))
	}
}

// start starts a child with its pipes and its reader, writer and waiter
// goroutines.
func (p *Persistent) start(queue, slot string) (*child, error) {
	limit := p.OutputLimit
	if limit <= 0 {
		limit = 16 << 10
	}
	log := p.Logger.With().Str("stage", "start").Logger()
	c := &child{
		out:    make(chan [][]byte, 2),
		msgs:   make(chan frame, 8),
		exited: make(chan struct{}),
		wdone:  make(chan struct{}),
		stdout: &childOutput{limit: limit, l: lineLog{log: log, stream: "stdout", left: limit}},
		stderr: &childOutput{limit: limit, l: lineLog{log: log, stream: "stderr", left: limit, tail: make([]byte, 0, tailSize)}},
	}
	if n := p.MaxJobsPerChild; n > 0 {
		c.limit = max(1, n+rand.IntN(n/5+1)-n/10)
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	c.run = p.prepare(cmd, p.Env, p.Holder, queue, slot, envProtocol+"="+strconv.Itoa(ProtocolVersion))
	pipes, err := startPipes(cmd, nil, c.stdout, c.stderr)
	if err != nil {
		return nil, err
	}
	toChild, toW, err := os.Pipe()
	if err != nil {
		pipes.started()
		pipes.wait()
		return nil, err
	}
	fromR, fromChild, err := os.Pipe()
	if err != nil {
		pipes.started()
		pipes.wait()
		_, _ = toChild.Close(), toW.Close()
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{toChild, fromChild} // fds 3 and 4
	started := make(chan error, 1)
	go p.wait(c, cmd, pipes, started, toW, fromR)
	err = <-started
	_, _ = toChild.Close(), fromChild.Close()
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", p.Argv[0], err)
	}
	c.pid = cmd.Process.Pid
	p.mu.Lock()
	if p.all == nil {
		p.all = map[*child]struct{}{}
	}
	p.all[c] = struct{}{}
	p.mu.Unlock()
	c.to = toW
	go c.read(fromR)
	go c.write(toW)
	return c, nil
}

// wait starts cmd and waits for it on one locked OS thread: Pdeathsig fires
// when the thread that forked exits, and a persistent child lives long.
// Once the child exited, its group and orphans are killed, its pipes
// closed and its output logged, then c.exited closes.
func (p *Persistent) wait(c *child, cmd *exec.Cmd, pipes *pipes, started chan<- error, toW, fromR *os.File) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	p.track(0, c.run, true)
	err := proc.Start(cmd)
	pipes.started()
	if err != nil {
		p.track(0, c.run, false)
		pipes.wait()
		_, _ = toW.Close(), fromR.Close()
		close(c.wdone)
		close(c.exited)
		started <- err
		return
	}
	pgid := cmd.Process.Pid
	p.track(pgid, "", true)
	started <- nil
	werr := cmd.Wait()
	proc.Done(pgid)
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.track(pgid, c.run, false)
	p.killOrphans(p.Holder, p.Logger)
	c.unread = unreadIn(toW) // nothing reads fd 3 any more; the writer closes toW once exited closes
	_ = fromR.Close()        // ends the reader even if an escaped process holds fd 4
	pipes.wait()
	c.stdout.flush()
	c.stderr.flush()
	c.err = exitError(werr, false, c.stderr.tail(), nil)
	p.mu.Lock()
	delete(p.all, c)
	p.mu.Unlock()
	close(c.exited)
}

// read sends c's frames on msgs until EOF or a bad frame.
func (c *child) read(r *os.File) {
	defer close(c.msgs)
	br := bufio.NewReaderSize(r, maxHeader)
	for {
		f, err := readFrame(br)
		if err != nil {
			if errors.Is(err, errProtocol) {
				c.readErr = err
			}
			return
		}
		select {
		case c.msgs <- f:
		case <-c.exited:
			return
		}
	}
}

// send writes a frame to fd 3: a small one at once (the child has read
// every earlier frame, so it fits in the empty pipe; a deadline guards
// against a child that did not), a large one through the writer goroutine,
// so the lane can watch timeouts while the child reads it.
func (c *child) send(bufs [][]byte) {
	n := 0
	for _, b := range bufs {
		n += len(b)
	}
	if n <= smallPayload {
		buf := bufs[0]
		if len(bufs) > 1 {
			buf = append(append(make([]byte, 0, n), bufs[0]...), bufs[1]...)
		}
		_ = c.to.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := c.to.Write(buf)
		c.written.Add(int64(n))
		// The writer's large frames and stop must not inherit the deadline.
		_ = c.to.SetWriteDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			_ = syscall.Kill(-c.pid, syscall.SIGKILL) // not reading: the lane sees it die
		}
		return // any other failed write is a dead child: the lane sees it exit
	}
	select {
	case c.out <- bufs:
	case <-c.exited:
	}
}

// write writes the frames sent on out to fd 3 until c exits. A write to a
// child that died fails (EPIPE); the lane learns it from msgs and exited.
func (c *child) write(w *os.File) {
	defer close(c.wdone)
	defer w.Close()
	for {
		select {
		case bufs := <-c.out:
			b := net.Buffers(bufs)
			n, _ := b.WriteTo(w)
			c.written.Add(n)
		case <-c.exited:
			return
		}
	}
}

// kill kills c's process group and waits until it is gone.
func (p *Persistent) kill(c *child) {
	_ = syscall.Kill(-c.pid, syscall.SIGKILL)
	<-c.exited
}

// retire sends c the stop message and, in the background, kills it if it
// is still there after Grace.
func (p *Persistent) retire(c *child, why string) {
	p.Logger.Info().Int("child", c.pid).Int64("jobs", c.jobs.Load()).Str("reason", why).Msg("replacing persistent child")
	p.stop(c)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.reap(c, time.Now().Add(p.grace()))
	}()
}

func (p *Persistent) grace() time.Duration {
	if p.Grace <= 0 {
		return 10 * time.Second
	}
	return p.Grace
}

// stop sends the stop message.
func (p *Persistent) stop(c *child) {
	f := frame{Type: frameStop}
	select {
	case c.out <- f.encode():
	default: // the writer is stuck on a child that does not read: reap kills it
	}
}

// reap waits for c to exit until deadline, then kills it.
func (p *Persistent) reap(c *child, deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-c.exited:
	case <-t.C:
		p.Logger.Warn().Int("child", c.pid).Msg("persistent child still running after the stop message and its grace: killing it")
		p.kill(c)
	}
}

// Close stops every child: each gets the stop message, and those still
// running after Grace (or by ctx's deadline, if sooner) are killed. Call
// it once Run has returned.
func (p *Persistent) Close(ctx context.Context) error {
	deadline := time.Now().Add(p.grace())
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	p.mu.Lock()
	p.idle = nil
	var live []*child
	for c := range p.all {
		live = append(live, c)
	}
	p.mu.Unlock()
	for _, c := range live {
		p.stop(c)
	}
	for _, c := range live {
		p.reap(c, deadline)
	}
	p.wg.Wait()
	return nil
}

// ChildInfo is one running child: its pid, the jobs it has served, its
// resident memory in bytes (0 when unreadable).
type ChildInfo struct {
	PID  int
	Jobs int64
	RSS  int64
}

// Children lists the children still running, by pid, for a holder's record.
func (p *Persistent) Children() []ChildInfo {
	p.mu.Lock()
	out := make([]ChildInfo, 0, len(p.all))
	for c := range p.all {
		out = append(out, ChildInfo{PID: c.pid, Jobs: c.jobs.Load()})
	}
	p.mu.Unlock()
	for i := range out {
		out[i].RSS = rss(out[i].PID)
	}
	slices.SortFunc(out, func(a, b ChildInfo) int { return a.PID - b.PID })
	return out
}

// rss is a process's resident memory in bytes, from /proc/PID/statm; 0 when
// it cannot be read.
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(string(f[1]), 10, 64)
	return pages * int64(os.Getpagesize())
}

// childOutput logs one output stream of a persistent child, tagged with
// the job it runs; the OutputLimit budget renews with every job.
type childOutput struct {
	mu    sync.Mutex
	l     lineLog
	limit int
}

func (o *childOutput) Write(b []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Write(b)
}

// next flushes what the last job wrote and tags what follows with log.
func (o *childOutput) next(log zerolog.Logger) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.l.flush()
	o.l.log, o.l.left, o.l.dropped = log, o.limit, 0
}

func (o *childOutput) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.l.flush()
}

func (o *childOutput) tail() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.l.Tail()
}
