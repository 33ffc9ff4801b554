package work

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The holder's side of batches: a member (an entry with a batch field) is
// acknowledged by batchAckScript and dead-lettered by batchDeadScript,
// which count it in its batch in the same step. Jobs without a batch never
// reach this file: they cost nothing more.

// jobBatch is a job's batch fields, behind one pointer so that a job
// without a batch carries only that: the batch it is a member of ("" for
// none), and for a callback its summary as JSON (Job.Batch).
type jobBatch struct{ member, summary string }

// inBatch is the batch j is a member of, "" for none.
func (j *Job) inBatch() string {
	if j.bat == nil {
		return ""
	}
	return j.bat.member
}

// batchAcks is the batch members of one level waiting to be acknowledged;
// the settler's own.
type batchAcks struct {
	entries []any // triples: entry id, job id, batch number (1-based, in ids)
	ids     []string
	hist    histogram
}

// add queues member j for the next batch ack.
func (b *batchAcks) add(j *Job, dur time.Duration) {
	n := 0
	for i, id := range b.ids {
		if id == j.inBatch() {
			n = i + 1
		}
	}
	if n == 0 {
		b.ids = append(b.ids, j.inBatch())
		n = len(b.ids)
	}
	id := j.ID
	if id == j.Entry {
		id = "" // the usual case: one string less to send
	}
	b.entries = append(b.entries, j.Entry, id, n)
	b.hist.add(dur)
}

// ackBatchMembers acknowledges and counts the members in b in one script
// call (the members of the stream at: an entryKey without id), then
// forwards callbacks the call put in the outbox.
func (r *runner) ackBatchMembers(at entryKey, b *batchAcks) {
	if len(b.entries) == 0 {
		return
	}
	n := len(b.entries) / 3
	defer func() {
		r.survived(recover(), n)
		for i := 0; i < len(b.entries); i += 3 {
			at.id = b.entries[i].(string)
			r.forget(at)
		}
		b.entries, b.ids = b.entries[:0], b.ids[:0]
	}()
	k := r.keys
	keys := make([]string, 0, 7+4*len(b.ids))
	keys = append(keys, k.streamAt(at), k.Stats, k.Done, k.batchOutbox(), k.Dead, k.DeadIndex, k.Stream)
	for _, id := range b.ids {
		keys = append(keys, k.batch(id), k.batchSettled(id), k.batchDeadIDs(id), k.batchSignal(id))
	}
	args := []any{Group, r.c.Queue, 0, 0, 0}
	if r.c.Retention > 0 {
		args[2], args[3] = r.c.Retention.Milliseconds(), r.c.RetentionMax
	}
	args, pairs := b.hist.pairs(args)
	args[4] = pairs
	args = append(args, len(b.ids))
	for _, id := range b.ids {
		args = append(args, id)
	}
	args = append(args, b.entries...)
	var res []any
	err := r.redisRetry(func(ctx context.Context) error {
		var err error
		res, err = r.write(ctx, batchAckScript, keys, args...).Slice()
		return err
	})
	if err != nil {
		r.moveFailed(err, n, "could not acknowledge finished batch jobs; they stay pending and will run again")
		return
	}
	if len(res) == 2 {
		acked, _ := res[0].(int64)
		r.st.Done.Add(acked)
		if out, _ := res[1].(int64); out > 0 {
			r.forwardBatches()
		}
	}
}

// batchDead turns deadLetter's script call into batchDeadScript's for a
// batch member: its batch's keys and id added last.
func (r *runner) batchDead(j *Job, keys []string, args []any) ([]string, []any) {
	return append(keys, r.keys.batchKeys(j.inBatch())...), append(args, r.c.Queue, j.inBatch())
}

// batchKeys are the keys batchDeadLua and batchCancelLua take last: B, S,
// D, G of batch id, the outbox, the queue's normal stream.
func (k Keys) batchKeys(id string) []string {
	return []string{k.batch(id), k.batchSettled(id), k.batchDeadIDs(id), k.batchSignal(id), k.batchOutbox(), k.Stream}
}

// recordBatch is the batch field of a retry or scheduled record ("" for
// none): a cancel reads it to count a member it dead-letters.
func recordBatch(ctx context.Context, rdb redis.Cmdable, records, id string) string {
	s, _ := runScript(ctx, rdb, recordFieldScript, []string{records}, id, batchField).Text()
	return s
}

// forwardBatches forwards the callbacks of complete batches bound for
// another queue (ForwardBatches); a failure is logged, and the next holder
// or settle tries again.
func (r *runner) forwardBatches() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := ForwardBatches(ctx, r.c.Client, r.c.Queue)
	if err != nil {
		r.c.Logger.Warn().Err(err).Msg("could not forward a batch's callback to its queue; the next holder tries again")
	} else if n > 0 {
		r.c.Logger.Info().Int("batches", n).Msg("forwarded batch callbacks to their queues")
	}
}

// batchOf reads a member's batch field and a callback's batch fields into
// j (one map lookup each for any other job), and says what is wrong with a
// value baton never writes.
func (j *Job) batchOf(v map[string]any) (field string, val any, why string) {
	if b, ok := v[batchField]; ok {
		s, _ := b.(string)
		if !ValidBatchID(s) {
			return batchField, b, "want a batch id such as b1a2b3c4d5e6f7"
		}
		j.bat = &jobBatch{member: s}
	}
	if b, ok := v[batchCallbackField]; ok {
		s, _ := b.(string)
		if !ValidBatchID(s) {
			return batchCallbackField, b, "want a batch id such as b1a2b3c4d5e6f7"
		}
		raw, _ := v[batchSummaryField].(string)
		var sum BatchSummary
		if err := json.Unmarshal([]byte(raw), &sum); err != nil {
			return batchSummaryField, raw, fmt.Sprintf("want the batch's summary (JSON): %v", err)
		}
		if j.bat == nil {
			j.bat = new(jobBatch)
		}
		j.Batch, j.bat.summary = &sum, raw
	}
	return "", nil, ""
}

// batchEnv is BATON_BATCH and BATON_BATCH_SUMMARY for a batch's callback,
// else nil.
func (j *Job) batchEnv() []string {
	if j.Batch == nil {
		return nil
	}
	return []string{"BATON_BATCH=" + j.Batch.ID, "BATON_BATCH_SUMMARY=" + j.bat.summary}
}

// batchFrame adds a callback's batch id and summary to its job frame.
func (j *Job) batchFrame(f *frame) {
	if j.Batch != nil {
		f.Batch, f.BatchSummary = j.Batch.ID, json.RawMessage(j.bat.summary)
	}
}
