// Package work is baton's job loop on a Redis Stream: read in batches with
// XREADGROUP, run a Handler, acknowledge (XACK and XDEL in one script), until
// the holder's lifetime ends.
//
// Most callers need Run with a Handler:
//
//	err := work.Run(ctx, work.Config{Client: rdb, Queue: "thumbs", Consumer: "host/run-0", Handler: h})
//
// Guarantees: a job is acknowledged only after its handler returned nil, so it
// is at least once, never nowhere. A consumer (one per slot) first replays its
// own pending entries, so the next holder of a crashed holder's slot restarts
// the crashed job at once. A job whose handler fails is retried with backoff
// (RetryBackoff, doubling, capped at RetryBackoffMax) until MaxAttempts, then
// dead-lettered; ErrSkipRetry dead-letters it at once. The package never
// handles signals and never exits the process.
//
// NewBatch groups jobs into a batch whose callback job runs exactly once,
// after every member is done or dead; Batch.Wait blocks until then
// (docs/workflows.md).
package work

import (
	"context"
	"sync/atomic"
	"time"
)

// Job is one job handed to a Handler.
type Job struct {
	// ID is the job's id for life: the id enqueue returned (its first stream
	// entry's id, e.g. "1700000000000-0"). Retries, replays, dead letters
	// and lookups keep it, so a handler may use it for idempotency.
	ID string
	// Entry is the id of the stream entry being run now; a retry or a
	// give-back puts the job in a new entry. An implementation detail, shown
	// beside ID in logs.
	Entry   string
	Payload []byte // the entry's payload field; data, never a command
	Attempt int    // 1 on first delivery, counting every delivery since
	Queue   string // queue name
	Slot    string // consumer name, e.g. "host/run-2"
	Started time.Time
	// Timeout is the job's own timeout, set by its producer (work.Timeout,
	// enqueue --timeout); 0 means the queue's job_timeout applies.
	Timeout time.Duration
	// Priority is the job's level, set by its producer (WithPriority,
	// enqueue --priority).
	Priority Priority
	// Fence is the fencing token of the holder's lease in fleet mode
	// (BATON_FENCE for exec jobs), 0 otherwise. It only grows, fleet-wide:
	// a job that writes elsewhere can refuse a write carrying a token lower
	// than one already seen (e.g. UPDATE ... WHERE fence <= $token).
	Fence int64
	// Tick is the scheduled time a periodic job was enqueued for (package
	// periodic; BATON_TICK for exec and persistent jobs), not the time it
	// was enqueued; zero for other jobs.
	Tick time.Time
	// Periodic names the [[periodic]] entry that enqueued the job
	// (BATON_PERIODIC); "" for other jobs.
	Periodic string
	// Key is the job's key (work.Key, enqueue --key), "" for none: at most
	// the key's cap of its jobs run at once (docs/keys.md).
	Key string
	// Batch is the summary of the batch whose callback this job is
	// (BATON_BATCH and BATON_BATCH_SUMMARY for exec jobs); nil for other
	// jobs, batch members included.
	Batch *BatchSummary
	// bat is its batch fields (batch_settle.go); nil for other jobs.
	bat *jobBatch

	maxAttempts int    // the job's own max_attempts; 0: the queue's
	unique      string // the job's unique key, freed when it is done or dead
	verdict     string // a dead-letter reason decided on reading: do not run
	problem     string // why, for the dead letter
	inKey       bool   // its entry is in its key's stream (KeyStream), not its level's

	trace *jobTrace // its trace context and run span; nil for a job without either (work/trace.go)

	cancelled atomic.Bool // cancelled (baton cancel); set by the keeper, after cancelWhy
	cancelWhy string      // the cancel's reason, for the dead letter; the keeper's, then read-only

	jobResults // its result and progress (result.go, progress.go)
}

// Handler runs one job. A nil error acknowledges it; an error schedules a
// retry with backoff (a dead letter after max_attempts runs). ctx is
// cancelled at the job's timeout (Config.JobTimeout) and at the end of the
// holder's shutdown grace; Handle must return soon after ctx is done.
type Handler interface {
	Handle(ctx context.Context, j *Job) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, j *Job) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, j *Job) error { return f(ctx, j) }
