package work

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/baton-run/baton/tracing"
	"github.com/redis/go-redis/v9"
)

// Per-job fields a producer's options write; reserved, like attempts, orig
// and priority.
const (
	uniqueField      = "unique"       // the job's unique key (without the queue's prefix)
	maxAttemptsField = "max_attempts" // overrides the queue's max_attempts
	timeoutField     = "timeout"      // overrides job_timeout, in milliseconds
)

// maxJobAttempts is the most a job's own max_attempts may be.
const maxJobAttempts = 1000

// Errors of Enqueue.
var (
	// ErrDuplicate is returned, with the id of the job already queued, when
	// a job with the same unique key is waiting, scheduled, running or
	// retrying: nothing was added.
	ErrDuplicate = errors.New("a job with this unique key is already queued")
	// ErrBadOption is a per-job option with an impossible value.
	ErrBadOption = errors.New("bad job option")
	// ErrNotReplicated is returned by EnqueueManyReplicated, with the ids,
	// when fewer replicas than asked confirmed the jobs in time: they are
	// queued on the master, but a failover now could lose them.
	ErrNotReplicated = errors.New("not confirmed by enough replicas")
)

// DuplicateError lists the jobs of EnqueueMany refused as duplicates, by
// index; their ids are those of the jobs already queued. It wraps
// ErrDuplicate.
type DuplicateError struct{ Jobs []int }

func (e *DuplicateError) Error() string {
	if len(e.Jobs) == 1 {
		return fmt.Sprintf("job %d: %v", e.Jobs[0]+1, ErrDuplicate)
	}
	return fmt.Sprintf("%d jobs: %v", len(e.Jobs), ErrDuplicate)
}

// Unwrap makes errors.Is(err, ErrDuplicate) true.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// Option sets a per-job option of Enqueue.
type Option func(*jobOptions) error

type jobOptions struct {
	due         time.Time // zero: now
	unique      string
	uniqueFor   time.Duration // 0: until done or dead
	maxAttempts int
	timeout     time.Duration
	priority    Priority
	after       []string // After: jobs to wait for (chain.go)
	key         string   // Key; "" for none

	traceParent, traceState string // the producer span's context (carryTrace), or ""
}

// In delays the job: it is queued (status counts it as scheduled) and
// moved to the stream by a running holder when d has passed, at most about a
// quarter of a second late. d must not be negative.
func In(d time.Duration) Option {
	return func(o *jobOptions) error {
		if d < 0 {
			return fmt.Errorf("%w: delay %s is negative", ErrBadOption, d)
		}
		o.due = time.Now().Add(d)
		return nil
	}
}

// At runs the job at t; a time in the past runs it now.
func At(t time.Time) Option {
	return func(o *jobOptions) error { o.due = t; return nil }
}

// UniqueKey makes the job unique by key within its queue: while a job with
// the same key is waiting, blocked, scheduled, running or retrying, Enqueue adds
// nothing and returns that job's id with ErrDuplicate. The key is released
// when the job is done or dead-lettered, in the same script.
func UniqueKey(key string) Option {
	return func(o *jobOptions) error {
		if key == "" {
			return fmt.Errorf("%w: empty unique key", ErrBadOption)
		}
		o.unique = key
		return nil
	}
}

// UniqueFor bounds how long a unique key is held (default: until the job is
// done or dead). It needs UniqueKey.
func UniqueFor(d time.Duration) Option {
	return func(o *jobOptions) error {
		if d < time.Millisecond {
			return fmt.Errorf("%w: unique-for %s must be at least 1ms", ErrBadOption, d)
		}
		o.uniqueFor = d
		return nil
	}
}

// MaxAttempts overrides the queue's max_attempts for this job.
func MaxAttempts(n int) Option {
	return func(o *jobOptions) error {
		if n < 1 || n > maxJobAttempts {
			return fmt.Errorf("%w: max attempts %d must be between 1 and %d", ErrBadOption, n, maxJobAttempts)
		}
		o.maxAttempts = n
		return nil
	}
}

// Timeout overrides the queue's job_timeout for this job.
func Timeout(d time.Duration) Option {
	return func(o *jobOptions) error {
		if d <= 0 {
			return fmt.Errorf("%w: timeout %s must be positive", ErrBadOption, d)
		}
		o.timeout = d
		return nil
	}
}

// Message is one job of EnqueueMany.
type Message struct {
	Payload []byte
	Options []Option
}

// Enqueue adds one job to queue q and returns its id: the job's id for life,
// which BATON_JOB_ID, Job.ID, status and dead letters use. Without options it
// is one XADD; with options, one script. It takes any go-redis client (a
// *redis.Client, a failover or cluster client). When ctx carries a span
// (OpenTelemetry), the enqueue is a producer span of the global
// TracerProvider, and the job stores its context (package tracing): the
// job's runs continue that trace.
func Enqueue(ctx context.Context, rdb redis.Cmdable, q string, payload []byte, opts ...Option) (string, error) {
	ids, err := EnqueueMany(ctx, rdb, q, []Message{{Payload: payload, Options: opts}})
	if len(ids) == 1 {
		return ids[0], err
	}
	return "", err
}

// EnqueueMany adds jobs in one round trip (a pipeline) and returns their ids
// in order. Options are checked before anything is sent: one bad option adds
// nothing. A job refused as a duplicate gets the existing job's id, and the
// returned error is a *DuplicateError (the other jobs are added); a Redis error
// is returned with the ids of the jobs added ("" for the others).
func EnqueueMany(ctx context.Context, rdb redis.Cmdable, q string, jobs []Message) ([]string, error) {
	return EnqueueManyReplicated(ctx, rdb, q, jobs, 0, 0)
}

// EnqueueManyReplicated is EnqueueMany followed, in the same round trip and
// on the same connection, by WAIT replicas timeout: it returns
// ErrNotReplicated (wrapped, with every id) unless that many replicas have
// the jobs, which a Sentinel failover then keeps. replicas 0 is
// EnqueueMany. Not for a Cluster client (WAIT has no key to route by).
func EnqueueManyReplicated(ctx context.Context, rdb redis.Cmdable, q string, jobs []Message, replicas int, timeout time.Duration) (ids []string, err error) {
	var opts []jobOptions // nil while no job has options
	for i, m := range jobs {
		if len(m.Options) == 0 {
			continue
		}
		if opts == nil {
			opts = make([]jobOptions, len(jobs))
		}
		for _, opt := range m.Options {
			if err := opt(&opts[i]); err != nil {
				return nil, fmt.Errorf("job %d: %w", i+1, err)
			}
		}
		if opts[i].uniqueFor > 0 && opts[i].unique == "" {
			return nil, fmt.Errorf("job %d: %w: unique-for needs a unique key", i+1, ErrBadOption)
		}
	}
	ctx, span := tracing.Send(ctx, q, len(jobs))
	if span != nil {
		opts = carryTrace(ctx, opts, len(jobs))
		defer func() { tracing.Sent(span, ids, err) }()
	}
	ids = make([]string, len(jobs))
	sent := make([]bool, len(jobs))
	deps, err := locateDeps(ctx, rdb, q, opts, sent)
	if err != nil {
		return nil, err
	}
	w := &waitCall{replicas: replicas, timeout: timeout}
	calls, plan, err := sendJobs(ctx, rdb, KeysFor(q), jobs, opts, sent, w)
	if isNoScript(err) {
		// A Redis that lost (or never had) the script: load it, and send
		// again only what the script did not add.
		if lerr := enqueueScript.Load(ctx, rdb).Err(); lerr != nil {
			return nil, scriptingErr("SCRIPT LOAD", lerr)
		}
		dup, first := collect(calls, plan, ids, sent, true)
		again, plan, _ := sendJobs(ctx, rdb, KeysFor(q), jobs, opts, sent, w)
		dup2, first2 := collect(again, plan, ids, sent, false)
		return ids, enqueueChained(ctx, rdb, q, jobs, opts, deps, ids, w, cmp.Or(first, first2, w.err(), dupErr(append(dup, dup2...))))
	}
	dup, first := collect(calls, plan, ids, sent, false)
	return ids, enqueueChained(ctx, rdb, q, jobs, opts, deps, ids, w, cmp.Or(first, w.err(), dupErr(dup)))
}

// waitCall is the WAIT that ends each pipeline of EnqueueManyReplicated
// (WAIT counts the replicas that have this connection's writes), and the
// fewest replicas any of them saw.
type waitCall struct {
	replicas int
	timeout  time.Duration
	cmds     []*redis.IntCmd
}

// err is ErrNotReplicated when a WAIT saw fewer replicas than asked.
func (w *waitCall) err() error {
	for _, c := range w.cmds {
		if n, err := c.Result(); err != nil {
			return fmt.Errorf("%w: WAIT: %v", ErrNotReplicated, err)
		} else if n < int64(w.replicas) {
			return fmt.Errorf("%w: %d of %d replicas within %s", ErrNotReplicated, n, w.replicas, w.timeout)
		}
	}
	return nil
}

// scriptBatch is the most jobs with options one script call adds, and
// scriptBytes about the most bytes of their packed arguments: one Redis
// argument, which Redis refuses past proto-max-bulk-len (512 MB).
const scriptBatch = 200

var scriptBytes = 64 << 20 // a variable for the tests

// sendJobs sends, in one pipeline, the jobs not yet sent: jobs without
// options before the first job with options are one XADD each; from the
// first job with options on, every job goes in script calls of up to
// scriptBatch jobs. Ids then grow in job order even when Redis lost the
// script: every script call fails alike (NOSCRIPT), and all the jobs they
// carried are sent again, after the XADDs. It marks what it sent; the
// replies are in the returned commands, and plan says which jobs each
// command carries.
func sendJobs(ctx context.Context, rdb redis.Cmdable, k Keys, jobs []Message, opts []jobOptions, sent []bool, w *waitCall) (cmds []redis.Cmder, plan []carried, err error) {
	now := time.Now()
	plan = make([]carried, 0, len(jobs))
	var none jobOptions
	cmds, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		var batch scriptCall
		var keyed keyCall // jobs with a key and no delay (key_enqueue.go)
		flush := func() {
			if len(batch.jobs) > 0 {
				batch.send(ctx, p, k)
				plan = append(plan, carried{batch: batch.jobs})
				batch = scriptCall{}
			}
		}
		scripted := false
		for i, m := range jobs {
			if sent[i] {
				continue
			}
			sent[i] = true
			o := &none
			if opts != nil {
				o = &opts[i]
			}
			scripted = scripted || !o.plain()
			if !scripted {
				p.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: o.xaddValues(m.Payload)})
				plan = append(plan, carried{one: i})
				continue
			}
			if o.key != "" && !o.due.After(now) {
				keyed.add(i, m.Payload, o, k)
				if len(keyed.jobs) == scriptBatch {
					keyed.send(ctx, p, k, &plan)
				}
				continue
			}
			batch.add(i, m.Payload, o, now, k)
			if len(batch.jobs) == scriptBatch || len(batch.args) >= scriptBytes {
				flush()
			}
		}
		flush()
		keyed.send(ctx, p, k, &plan)
		if w.replicas > 0 {
			c := redis.NewIntCmd(ctx, "wait", w.replicas, w.timeout.Milliseconds())
			_ = p.Process(ctx, c)
			w.cmds = append(w.cmds, c)
		}
		return nil
	})
	if w.replicas > 0 && len(cmds) > 0 {
		cmds = cmds[:len(cmds)-1] // the WAIT, read by w.err
	}
	return cmds, plan, err
}

// carried is the jobs of one command of sendJobs: a script call's batch, or
// the one job of an XADD.
type carried struct {
	one   int
	batch []int
}

// plain reports whether a job has no options: one XADD.
func (o *jobOptions) plain() bool {
	return o.unique == "" && o.maxAttempts == 0 && o.timeout == 0 && o.due.IsZero() && o.priority == PriorityNormal && o.key == ""
}

// scriptCall gathers the arguments of one enqueueScript call. The jobs'
// arguments go packed in one MessagePack array, unpacked by the script with
// cmsgpack: one string to send and to read instead of four to eight per
// job, with nothing boxed in an interface on the way.
type scriptCall struct {
	jobs   []int    // indexes of its jobs
	unique []string // their unique keys, in order
	args   []byte   // array32 header (count patched by send), then the items
	nargs  int
	rec    []byte // a delayed job's record, built here and copied into args
}

func (c *scriptCall) add(i int, payload []byte, o *jobOptions, now time.Time, k Keys) {
	if c.args == nil {
		c.args = append(make([]byte, 0, 16<<10), 0xdd, 0, 0, 0, 0)
	}
	due := int64(0)
	if o.due.After(now) {
		due = o.due.UnixMilli()
	}
	// Its due time, its kind and, with a unique key that has a TTL, the TTL.
	var num [20]byte
	pack(c, strconv.AppendInt(num[:0], due, 10))
	switch {
	case o.unique == "":
		pack(c, jobKind[o.priority][0])
	case o.uniqueFor > 0:
		pack(c, jobKind[o.priority][2])
		pack(c, strconv.AppendInt(num[:0], o.uniqueFor.Milliseconds(), 10))
	default:
		pack(c, jobKind[o.priority][1])
	}
	if o.unique != "" {
		c.unique = append(c.unique, k.Unique(o.unique))
	}
	n := o.fields()
	if due > 0 {
		// A delayed job's record, packed here: the script appends its id.
		c.rec = appendFields(appendArrayHeader(c.rec[:0], n+2), payload, o)
		c.small(1)
		pack(c, c.rec)
	} else {
		c.small(n)
		c.args = appendFields(c.args, payload, o)
		c.nargs += n
	}
	c.jobs = append(c.jobs, i)
}

// pack appends one string item to c's arguments.
func pack[S string | []byte](c *scriptCall, s S) {
	c.args = appendPackedString(c.args, s)
	c.nargs++
}

// small packs n (0 to 127) as a number, which the script reads without
// converting a string.
func (c *scriptCall) small(n int) {
	c.args = append(c.args, byte(n))
	c.nargs++
}

// fields counts a job's field and value strings.
func (o *jobOptions) fields() int {
	n := 2
	for _, set := range []bool{o.unique != "", o.maxAttempts > 0, o.timeout > 0, o.priority != PriorityNormal, o.traceParent != "", o.traceState != "", o.key != ""} {
		if set {
			n += 2
		}
	}
	return n
}

// appendFields packs a job's field/value strings (o.fields() of them).
func appendFields(b, payload []byte, o *jobOptions) []byte {
	var num [20]byte
	b = appendPackedString(appendPackedString(b, PayloadField), payload)
	if o.unique != "" {
		b = appendPackedString(appendPackedString(b, uniqueField), o.unique)
	}
	if o.maxAttempts > 0 {
		b = appendPackedString(appendPackedString(b, maxAttemptsField), strconv.AppendInt(num[:0], int64(o.maxAttempts), 10))
	}
	if o.timeout > 0 {
		b = appendPackedString(appendPackedString(b, timeoutField), strconv.AppendInt(num[:0], o.timeout.Milliseconds(), 10))
	}
	if o.priority != PriorityNormal {
		b = appendPackedString(appendPackedString(b, priorityField), o.priority.String())
	}
	if o.key != "" {
		b = appendPackedString(appendPackedString(b, keyField), o.key)
	}
	return appendTraceFields(b, o)
}

// appendArrayHeader appends a MessagePack array header for n items, in the
// smallest form, as cmsgpack does: retry and scheduled records are
// cmsgpack.pack of a Lua table of strings.
func appendArrayHeader(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n < 1<<16:
		return append(b, 0xdc, byte(n>>8), byte(n))
	default:
		return append(b, 0xdd, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
}

// appendPackedString appends s as a MessagePack string, in the smallest
// form, as cmsgpack does.
func appendPackedString[S string | []byte](b []byte, s S) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda, byte(n>>8), byte(n))
	default:
		b = append(b, 0xdb, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	return append(b, s...)
}

// jobKind is a job's kind in enqueueScript's arguments, by priority: without
// a unique key, with one, with one that has a TTL.
var jobKind = [...][3]string{
	PriorityNormal: {"0", "0u", "0t"},
	PriorityHigh:   {"1", "1u", "1t"},
	PriorityLow:    {"2", "2u", "2t"},
}

// send queues the call on p.
func (c *scriptCall) send(ctx context.Context, p redis.Pipeliner, k Keys) {
	keys := append([]string{k.Stream, k.Scheduled, k.ScheduledJobs, k.High, k.Low}, c.unique...)
	n := c.nargs
	c.args[1], c.args[2], c.args[3], c.args[4] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	enqueueScript.EvalSha(ctx, p, keys, c.args)
}

// collect reads the replies of sendJobs into ids, in job order: the
// duplicates' indexes and the first error. With noScript, a script call
// refused for NOSCRIPT marks its jobs unsent again, for a second try.
func collect(cmds []redis.Cmder, plan []carried, ids []string, sent []bool, noScript bool) ([]int, error) {
	var dup []int
	var first error
	for n, c := range cmds {
		jobs := plan[n].batch
		switch c := c.(type) {
		case *redis.StringCmd:
			if c.Err() == nil {
				ids[plan[n].one] = c.Val()
			}
			first = cmp.Or(first, c.Err())
		case *redis.Cmd:
			if err := c.Err(); err != nil {
				if noScript && isNoScript(err) {
					for _, i := range jobs {
						sent[i] = false
					}
					continue
				}
				first = cmp.Or(first, err)
				continue
			}
			res, _ := c.Slice()
			if len(res) < len(jobs) {
				first = cmp.Or(first, fmt.Errorf("enqueue script replied %d items for %d jobs", len(res), len(jobs)))
				continue
			}
			// After one text per job: the duplicates' numbers, and minus
			// the failed jobs' numbers.
			var failed map[int]bool
			for _, v := range res[len(jobs):] {
				switch v, _ := v.(int64); {
				case v > 0 && int(v) <= len(jobs):
					dup = append(dup, jobs[v-1])
				case v < 0 && int(-v) <= len(jobs):
					if failed == nil {
						failed = map[int]bool{}
					}
					failed[int(-v)-1] = true
				}
			}
			for n, i := range jobs {
				text, _ := res[n].(string)
				if failed[n] {
					first = cmp.Or(first, fmt.Errorf("job %d: %s", i+1, text))
					continue
				}
				ids[i] = text
			}
		}
	}
	return dup, first
}

// dupErr is the DuplicateError of the jobs at dup, or nil.
func dupErr(dup []int) error {
	if len(dup) == 0 {
		return nil
	}
	slices.Sort(dup)
	return &DuplicateError{Jobs: dup}
}
func isNoScript(err error) bool {
	return err != nil && len(err.Error()) >= 8 && err.Error()[:8] == "NOSCRIPT"
}

// jobTimeout reads a job's own timeout field (milliseconds; 0, written for
// a timeout under 1 ms, means none); false when it is not a count of
// milliseconds a Duration holds.
func jobTimeout(v any) (time.Duration, bool) {
	s, _ := v.(string)
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}
