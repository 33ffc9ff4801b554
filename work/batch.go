package work

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A batch is a set of jobs of one queue with a callback job: once the batch
// is closed (no more members will come) and every member is settled (done,
// or dead for any reason), the callback is enqueued, exactly once, with a
// summary of the outcome. The batch, its counts and its members' jobs live
// in its queue's hash slot, so the script that settles a member counts it in
// the same step: nothing (a kill, a lost reply, a second run, a fenced
// holder) can count a member twice or miss it. docs/workflows.md gives the
// argument step by step.

// Errors of the batch calls.
var (
	// ErrNoBatch is a batch id that names no batch in the queue (never
	// opened, or complete for longer than 7 days).
	ErrNoBatch = errors.New("no such batch")
	// ErrBatchClosed is an Add to a closed batch: nothing was added.
	ErrBatchClosed = errors.New("batch is closed")
	// ErrEmptyBatch is a one-shot batch (EnqueueBatch) without a job.
	ErrEmptyBatch = errors.New("a batch needs at least one job")
)

// BatchSummary is what a batch's callback receives: Job.Batch for a Go
// handler, BATON_BATCH_SUMMARY (JSON, these field names) for an exec job,
// the job frame's "batch_summary" for a persistent child; Wait returns it.
type BatchSummary struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Queue string `json:"queue"` // the batch's (and its members') queue
	Total int64  `json:"total"` // members
	Done  int64  `json:"done"`  // members that succeeded
	Dead  int64  `json:"dead"`  // members dead-lettered, whatever the reason
	// DeadIDs are the job ids of the first 1,000 dead members; Dead counts
	// them all.
	DeadIDs []string `json:"dead_ids"`
	// CompletedAt is when the last member settled (or the batch closed,
	// whichever came last), unix ms on Redis' clock.
	CompletedAt int64 `json:"completed_at"`
}

// Success reports whether no member died.
func (s *BatchSummary) Success() bool { return s.Dead == 0 }

// BatchOption sets an option of NewBatch.
type BatchOption func(*batchOptions) error

type batchOptions struct {
	name, cbQueue string
	callback      []byte
	hasCallback   bool
	successOnly   bool
}

// BatchCallback sets the batch's callback job: payload, enqueued in queue
// (the batch's own when ""), once the batch is complete.
func BatchCallback(payload []byte, queue string) BatchOption {
	return func(o *batchOptions) error {
		o.callback, o.cbQueue, o.hasCallback = payload, queue, true
		return nil
	}
}

// BatchName names the batch (shown by baton batch and in the summary).
func BatchName(name string) BatchOption {
	return func(o *batchOptions) error { o.name = name; return nil }
}

// OnSuccessOnly runs the callback only when no member died; otherwise it
// is dead-lettered as batch_failed, with the summary, for dead requeue.
func OnSuccessOnly() BatchOption {
	return func(o *batchOptions) error { o.successOnly = true; return nil }
}

// Batch is an open batch of queue Queue: Add members, Close it, Wait for it.
// Its methods may be called from several goroutines and processes (by id:
// OpenBatch).
type Batch struct {
	rdb   redis.Cmdable
	queue string
	id    string
}

// NewBatch opens a new batch in queue q and returns it. Nothing runs until
// members are added; the callback can fire only after Close.
func NewBatch(ctx context.Context, rdb redis.Cmdable, q string, opts ...BatchOption) (*Batch, error) {
	var o batchOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	for try := 0; ; try++ {
		id := newBatchID()
		k := KeysFor(q)
		args := []any{id, "name", o.name, "callback", o.callback, "cbqueue", o.cbQueue,
			"has_callback", bit(o.hasCallback), "success_only", bit(o.successOnly)}
		ok, err := runScript(ctx, rdb, batchOpenScript, []string{k.batch(id), k.batches()}, args...).Int()
		if err != nil {
			return nil, fmt.Errorf("open batch: %w", err)
		}
		if ok == 1 {
			return &Batch{rdb: rdb, queue: q, id: id}, nil
		}
		if try == 3 {
			return nil, fmt.Errorf("open batch: ids taken %d times", try+1)
		}
	}
}

// OpenBatch returns the batch id of queue q, to add to, close or wait for
// from another process; ErrNoBatch when there is none.
func OpenBatch(ctx context.Context, rdb redis.Cmdable, q, id string) (*Batch, error) {
	if !ValidBatchID(id) {
		return nil, fmt.Errorf("batch %q: %w (a batch id looks like b1a2b3c4d5e6f7)", id, ErrNoBatch)
	}
	n, err := rdb.Exists(ctx, KeysFor(q).batch(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	if n == 0 {
		return nil, fmt.Errorf("batch %s in queue %s: %w", id, q, ErrNoBatch)
	}
	return &Batch{rdb: rdb, queue: q, id: id}, nil
}

// ID is the batch's id.
func (b *Batch) ID() string { return b.id }

// Queue is the batch's queue.
func (b *Batch) Queue() string { return b.queue }

// Add enqueues jobs as members of the batch and returns their ids, in one
// script call per 1,000 jobs (each call all or nothing). A member may carry
// MaxAttempts, Timeout and WithPriority; a delay or a unique key is refused
// (ErrBadOption). ErrBatchClosed once the batch is closed.
func (b *Batch) Add(ctx context.Context, jobs ...Message) ([]string, error) {
	return b.add(ctx, jobs, false)
}

// AddAndClose adds jobs, then closes the batch in the same script call as
// the last of them.
func (b *Batch) AddAndClose(ctx context.Context, jobs ...Message) ([]string, error) {
	return b.add(ctx, jobs, true)
}

// Close says no more members will come: the callback fires once every
// member is settled, at once when they all are (or there are none).
func (b *Batch) Close(ctx context.Context) error {
	_, err := b.add(ctx, nil, true)
	return err
}

// batchChunk is the most members one script call adds.
const batchChunk = 1000

func (b *Batch) add(ctx context.Context, jobs []Message, closeIt bool) ([]string, error) {
	fields := make([][]string, len(jobs))
	levels := make([]Priority, len(jobs))
	for i, m := range jobs {
		f, level, err := EntryFields(m.Payload, m.Options...)
		if err == nil {
			for k := 0; k < len(f); k += 2 {
				if f[k] == uniqueField {
					err = fmt.Errorf("%w: a batch member cannot have a unique key", ErrBadOption)
				}
			}
		}
		if err != nil {
			return nil, fmt.Errorf("job %d: %w", i+1, err)
		}
		fields[i], levels[i] = f, level
	}
	k := KeysFor(b.queue)
	keys := []string{k.batch(b.id), k.batchSettled(b.id), k.batchDeadIDs(b.id), k.batchSignal(b.id), k.batchOutbox(),
		k.Stream, k.High, k.Low, k.Dead, k.DeadIndex}
	ids := make([]string, 0, len(jobs))
	for start := 0; start < len(jobs) || start == 0; start += batchChunk {
		end := min(start+batchChunk, len(jobs))
		last := end == len(jobs)
		args := []any{b.id, b.queue, bit(closeIt && last)}
		for i := start; i < end; i++ {
			args = append(args, strconv.Itoa(int(levels[i])), len(fields[i]))
			for _, s := range fields[i] {
				args = append(args, s)
			}
		}
		got, err := runScript(ctx, b.rdb, batchAddScript, keys, args...).StringSlice()
		if err != nil {
			return ids, batchErr(b.queue, b.id, err)
		}
		ids = append(ids, got...)
		if last {
			break
		}
	}
	if closeIt {
		if _, err := ForwardBatches(ctx, b.rdb, b.queue); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// batchErr maps the batch scripts' refusals to ErrNoBatch and
// ErrBatchClosed.
func batchErr(q, id string, err error) error {
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, "NOBATCH"):
		return fmt.Errorf("batch %s in queue %s: %w", id, q, ErrNoBatch)
	case strings.HasPrefix(msg, "BATCHCLOSED"):
		return fmt.Errorf("batch %s: %w", id, ErrBatchClosed)
	}
	return fmt.Errorf("batch %s: %w", id, err)
}

// Wait blocks until the batch is complete (closed, every member settled)
// and returns its summary; at once for a batch already complete. It blocks
// in Redis (BLMOVE on the signal list the completing script pushes to,
// rotated so that every waiter sees it), never polling the batch's state;
// the blocking call is renewed every few seconds while nothing happens.
// When ctx is done it returns ctx.Err() at once.
func (b *Batch) Wait(ctx context.Context) (*BatchSummary, error) {
	return WaitBatch(ctx, b.rdb, b.queue, b.id)
}

// batchWaitBlock is how long one blocking call of WaitBatch waits.
var batchWaitBlock = 2 * time.Second

// WaitBatch is Batch.Wait by queue and id.
func WaitBatch(ctx context.Context, rdb redis.Cmdable, q, id string) (*BatchSummary, error) {
	if _, err := OpenBatch(ctx, rdb, q, id); err != nil {
		return nil, err
	}
	k := KeysFor(q)
	done := make(chan error, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			err := rdb.BLMove(context.WithoutCancel(ctx), k.batchSignal(id), k.batchSignal(id), "RIGHT", "LEFT", batchWaitBlock).Err()
			if !isRedisNil(err) {
				done <- err
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case err := <-done:
		if err != nil {
			return nil, fmt.Errorf("wait for batch %s: %w", id, err)
		}
	}
	info, err := GetBatch(ctx, rdb, q, id)
	if err != nil {
		return nil, err
	}
	if info.Summary == nil {
		return nil, fmt.Errorf("wait for batch %s: signalled, but no summary", id)
	}
	return info.Summary, nil
}

// BatchInfo is a batch's state, as baton batch shows it.
type BatchInfo struct {
	ID            string `json:"id"`
	Name          string `json:"name"`
	Queue         string `json:"queue"`
	Created       int64  `json:"created"` // unix ms
	Closed        bool   `json:"closed"`
	Complete      bool   `json:"complete"`
	Total         int64  `json:"total"`
	Done          int64  `json:"done"`
	Dead          int64  `json:"dead"`
	Running       int64  `json:"running"` // members running now (read by a holder, not settled)
	Waiting       int64  `json:"waiting"` // the others not settled: waiting, retrying or scheduled
	OnSuccessOnly bool   `json:"on_success_only"`
	// Callback is whether the batch has a callback job; CallbackQueue its
	// queue; CallbackID its job id once enqueued (or its dead letter's,
	// CallbackState "dead"); CallbackState "pending" (the batch is not
	// complete), "enqueued", "dead" (batch_failed), "outbox" (complete, on
	// its way to another queue) or "none".
	Callback      bool          `json:"callback"`
	CallbackQueue string        `json:"callback_queue"`
	CallbackID    string        `json:"callback_id,omitempty"`
	CallbackState string        `json:"callback_state"`
	Summary       *BatchSummary `json:"summary,omitempty"`
}

// GetBatch reads batch id of queue q; ErrNoBatch when there is none.
func GetBatch(ctx context.Context, rdb redis.Cmdable, q, id string) (*BatchInfo, error) {
	if !ValidBatchID(id) {
		return nil, fmt.Errorf("batch %q: %w (a batch id looks like b1a2b3c4d5e6f7)", id, ErrNoBatch)
	}
	k := KeysFor(q)
	h, err := rdb.HGetAll(ctx, k.batch(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("read batch %s: %w", id, err)
	}
	if h["created"] == "" {
		return nil, fmt.Errorf("batch %s in queue %s: %w", id, q, ErrNoBatch)
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(h[f], 10, 64); return n }
	b := &BatchInfo{ID: id, Name: h["name"], Queue: q, Created: num("created"), Closed: h["closed"] == "1",
		Complete: h["completed"] != "", Total: num("total"), Done: num("done"), Dead: num("dead"),
		OnSuccessOnly: h["success_only"] == "1", Callback: h["has_callback"] == "1", CallbackQueue: h["cbqueue"],
		CallbackID: h["callback_id"], CallbackState: h["callback_state"]}
	if b.CallbackQueue == "" {
		b.CallbackQueue = q
	}
	if b.CallbackState == "" {
		b.CallbackState = "pending"
		if !b.Callback {
			b.CallbackState = "none"
		}
	}
	if s := h["summary"]; s != "" {
		b.Summary = new(BatchSummary)
		if err := json.Unmarshal([]byte(s), b.Summary); err != nil {
			return nil, fmt.Errorf("read batch %s: summary: %w", id, err)
		}
	}
	if !b.Complete {
		if b.Running, err = runningMembers(ctx, rdb, k, id); err != nil {
			return nil, err
		}
		b.Waiting = max(b.Total-b.Done-b.Dead-b.Running, 0)
	}
	return b, nil
}

// runningMembers counts the batch's members pending in the queue's streams
// (read by a holder, not settled), its keys' streams too: the pending
// entries, then their batch fields, in three round trips.
func runningMembers(ctx context.Context, rdb redis.Cmdable, k Keys, id string) (int64, error) {
	var pend []*redis.XPendingExtCmd
	keyed, err := rdb.SMembers(ctx, k.KeyStreams()).Result()
	if err != nil {
		return 0, fmt.Errorf("read batch %s: running members: %w", id, err)
	}
	streams := append([]string{k.Stream, k.High, k.Low}, keyed...)
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range streams {
			pend = append(pend, p.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s, Group: Group, Start: "-", End: "+", Count: 10000}))
		}
		return nil
	})
	var ranges []*redis.XMessageSliceCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range pend {
			for _, e := range c.Val() {
				ranges = append(ranges, p.XRange(ctx, streams[i], e.ID, e.ID))
			}
		}
		return nil
	})
	if err != nil && !isRedisNil(err) {
		return 0, fmt.Errorf("read batch %s: running members: %w", id, err)
	}
	var n int64
	for _, c := range ranges {
		for _, m := range c.Val() {
			if m.Values[batchField] == id {
				n++
			}
		}
	}
	return n, nil
}

// ListBatches returns the batches of queue q, oldest first; batches whose
// record expired (complete for 7 days) are dropped from the list.
func ListBatches(ctx context.Context, rdb redis.Cmdable, q string) ([]*BatchInfo, error) {
	k := KeysFor(q)
	ids, err := rdb.ZRange(ctx, k.batches(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list batches: %w", err)
	}
	var out []*BatchInfo
	for _, id := range ids {
		b, err := GetBatch(ctx, rdb, q, id)
		if errors.Is(err, ErrNoBatch) {
			rdb.ZRem(ctx, k.batches(), id)
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, b)
	}
	return out, nil
}

// ForwardBatches enqueues the callbacks of queue q's complete batches whose
// callback goes to another queue (the outbox), each exactly once: first in
// the callback's queue under a marker that makes a second forward return
// the first one's job id, then out of the outbox. A holder does it after a
// member's settle completes such a batch, and once when it starts, so a
// forwarder killed half way is followed by another; Close does it too. It
// returns how many it forwarded.
func ForwardBatches(ctx context.Context, rdb redis.Cmdable, q string) (int, error) {
	k := KeysFor(q)
	ids, err := rdb.SMembers(ctx, k.batchOutbox()).Result()
	if err != nil || len(ids) == 0 {
		if err != nil {
			err = fmt.Errorf("forward batch callbacks: %w", err)
		}
		return 0, err
	}
	n := 0
	for _, id := range ids {
		h, err := rdb.HMGet(ctx, k.batch(id), "callback", "cbqueue", "success_only", "dead", "total", "summary").Result()
		if err != nil {
			return n, fmt.Errorf("forward batch %s: %w", id, err)
		}
		str := func(i int) string { s, _ := h[i].(string); return s }
		if str(5) == "" { // gone: nothing to forward
			rdb.SRem(ctx, k.batchOutbox(), id)
			continue
		}
		failed := str(2) == "1" && str(3) != "0" && str(3) != ""
		to := KeysFor(str(1))
		marker := to.Stream + ":batches:fwd:" + q + ":" + id
		why := fmt.Sprintf("%s of %s jobs of batch %s died", str(3), str(4), id)
		cid, err := runScript(ctx, rdb, batchForwardScript, []string{marker, to.Stream, to.Dead, to.DeadIndex},
			bit(failed), str(0), id, str(5), why, batchKeep).Text()
		if err != nil {
			return n, fmt.Errorf("forward batch %s to queue %s: %w", id, str(1), err)
		}
		state := "enqueued"
		if failed {
			state = "dead"
		}
		if err := runScript(ctx, rdb, batchForwardedScript, []string{k.batch(id), k.batchOutbox()}, id, cid, state).Err(); err != nil {
			return n, fmt.Errorf("forward batch %s: %w", id, err)
		}
		n++
	}
	return n, nil
}

// newBatchID returns a new batch id: "b", the time in ms and 40 random
// bits, base 36.
func newBatchID() string {
	var r [5]byte
	_, _ = rand.Read(r[:])
	n := uint64(r[0])<<32 | uint64(r[1])<<24 | uint64(r[2])<<16 | uint64(r[3])<<8 | uint64(r[4])
	return "b" + strconv.FormatInt(time.Now().UnixMilli(), 36) + strconv.FormatUint(n, 36)
}

// ValidBatchID reports whether id has the form of a batch id: "b" and 1 to
// 40 lowercase letters and digits.
func ValidBatchID(id string) bool {
	if len(id) < 2 || len(id) > 41 || id[0] != 'b' {
		return false
	}
	for _, c := range id[1:] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return false
		}
	}
	return true
}

func bit(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// The keys of a queue's batches, all under its hash tag.
func (k Keys) batch(id string) string        { return k.Stream + ":batch:" + id }
func (k Keys) batchSettled(id string) string { return k.batch(id) + ":settled" }
func (k Keys) batchDeadIDs(id string) string { return k.batch(id) + ":dead" }
func (k Keys) batchSignal(id string) string  { return k.batch(id) + ":signal" }
func (k Keys) batches() string               { return k.Stream + ":batches" }
func (k Keys) batchOutbox() string           { return k.Stream + ":batches:outbox" }
