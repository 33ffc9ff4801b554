package work

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Where a job can be, as Locate reports it.
const (
	StateWaiting   = "waiting"   // in the stream, not yet delivered
	StateRunning   = "running"   // delivered to a slot, not yet settled (or left by a holder that died)
	StateScheduled = "scheduled" // delayed by its producer
	StateRetrying  = "retrying"  // failed, due again later
	StateDead      = "dead"      // dead-lettered
	StateDone      = "done"      // finished successfully, within the retention (kept only when retention > 0)
	StateUnknown   = "unknown"   // done and not kept (retention 0, or its record expired or was dropped), or never enqueued here
)

// locateScan bounds how many stream entries Locate reads when the job is in
// the stream under a newer entry id than its own (a retry or a give-back).
const locateScan = 100000

// Location is where a job is now.
type Location struct {
	ID    string `json:"id"`
	State string `json:"state"`
	// Entry is the job's stream entry (waiting, running).
	Entry string `json:"entry,omitempty"`
	// Priority is the job's level when not normal (waiting, running).
	Priority string `json:"priority,omitempty"`
	// Ahead counts waiting entries before it in its stream (waiting), at
	// most the scan bound; jobs of a higher priority run first too.
	Ahead int64 `json:"ahead,omitempty"`
	// Consumer is the slot it runs on, e.g. "web1/run-2" (running).
	Consumer string `json:"consumer,omitempty"`
	// Since is how long ago it was last delivered or kept fresh (running).
	Idle time.Duration `json:"idle_ns,omitempty"`
	// Deliveries counts deliveries of this entry (running).
	Deliveries int64 `json:"deliveries,omitempty"`
	// Due is when it runs (scheduled) or runs again (retrying).
	Due time.Time `json:"due,omitzero"`
	// Attempts counts runs made (retrying, dead).
	Attempts int `json:"attempts,omitempty"`
	// Dead is its dead letter (dead).
	Dead *DeadLetter `json:"dead_letter,omitempty"`
	// DoneAt is when it was acknowledged as done, on Redis' clock (done).
	DoneAt time.Time `json:"done_at,omitzero"`
	// WaitingFor are the jobs it still waits for (blocked: After).
	WaitingFor []string `json:"waiting_for,omitempty"`
	// Key is the job's key while it is in its key's stream (waiting: for
	// its key's turn and cap; running); Entry is its entry there.
	Key string `json:"key,omitempty"`
	// KeyRunning and KeyWaiting count the jobs of its key running now
	// (pending in its key's streams, all levels) and waiting in its key's
	// stream of its level, itself included when waiting (with a key).
	KeyRunning int64 `json:"key_running,omitempty"`
	KeyWaiting int64 `json:"key_waiting,omitempty"`
}

// recordFieldScript reads one field of a packed retry or scheduled record.
//
// KEYS[1] the hash of records; ARGV[1] job id, ARGV[2] field.
// Returns the value, or false.
var recordFieldScript = redis.NewScript(recordFieldLua)

// Locate says where job id of queue q is: a few reads for a job in its
// key's stream (found by the key index), the retry or scheduled sets, the
// dead letters, the stream under its own id, or the done records (kept
// only with a retention); a bounded scan for a job back in the stream
// under a newer entry, made only when it has no done record. It never
// writes.
func Locate(ctx context.Context, rdb redis.Cmdable, q, id string) (*Location, error) {
	if _, _, ok := cutDash(id); !ok {
		return nil, fmt.Errorf("%q is not a job id (they look like 1700000000000-0)", id)
	}
	k := KeysFor(q)
	loc := &Location{ID: id, State: StateUnknown}
	var retry, sched, done *redis.FloatCmd
	var letter, left, keyed *redis.StringCmd
	var own *redis.XMessageSliceCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		retry = p.ZScore(ctx, k.Retry, id)
		sched = p.ZScore(ctx, k.Scheduled, id)
		done = p.ZScore(ctx, k.Done, id)
		letter = p.HGet(ctx, k.DeadIndex, id)
		own = p.XRange(ctx, k.Stream, id, id)
		left = p.HGet(ctx, k.BlockedLeft(), id)
		keyed = p.HGet(ctx, k.KeyJobs(), id)
		return nil
	})
	if err != nil && !isRedisNil(err) {
		return nil, err
	}
	if left.Err() != nil && keyed.Err() == nil {
		// In its key's stream, unless the index outlived its settle
		// (key_status.go): then it is wherever the settle put it.
		if found, err := locateKeyed(ctx, rdb, k, loc, keyed.Val()); found || err != nil {
			return loc, err
		}
	}
	switch {
	case left.Err() == nil:
		return loc, blockedAt(ctx, rdb, k, loc, left.Val())
	case retry.Err() == nil:
		loc.State, loc.Due = StateRetrying, time.UnixMilli(int64(retry.Val()))
		if a, err := runScript(ctx, rdb, recordFieldScript, []string{k.RetryJobs}, id, attemptsField).Text(); err == nil {
			loc.Attempts, _ = strconv.Atoi(a)
		}
		return loc, nil
	case sched.Err() == nil:
		loc.State, loc.Due = StateScheduled, time.UnixMilli(int64(sched.Val()))
		return loc, nil
	case letter.Err() == nil:
		if d, err := GetDead(ctx, rdb, q, id); err == nil {
			loc.State, loc.Attempts, loc.Dead = StateDead, d.Attempts, d
			return loc, nil
		}
	}
	entry := ""
	if msgs := own.Val(); len(msgs) == 1 {
		if o, _ := msgs[0].Values[jobField].(string); o == "" || o == id {
			entry = id
		}
	}
	if entry != "" {
		loc.Entry = entry
		return loc, inStream(ctx, rdb, k.Stream, loc)
	}
	// A done record is written only by the job's own successful ack: no
	// need to scan the streams for a newer entry of it.
	if done.Err() == nil {
		loc.State, loc.DoneAt = StateDone, time.UnixMilli(int64(done.Val()))
		return loc, nil
	}
	for _, level := range readOrder {
		stream := k.StreamOf(level)
		if entry, err = findEntry(ctx, rdb, stream, id); err != nil {
			return loc, err
		}
		if entry != "" {
			loc.Entry = entry
			if level != PriorityNormal {
				loc.Priority = level.String()
			}
			return loc, inStream(ctx, rdb, stream, loc)
		}
	}
	return loc, nil
}

// findEntry scans the stream, newest entries first being the likeliest, for
// the entry that carries job id; "" when none within locateScan entries.
func findEntry(ctx context.Context, rdb redis.Cmdable, stream, id string) (string, error) {
	end := "+"
	for read := 0; read < locateScan; {
		msgs, err := rdb.XRevRangeN(ctx, stream, end, "-", 1000).Result()
		if err != nil || len(msgs) == 0 {
			return "", err
		}
		for _, m := range msgs {
			if o, _ := m.Values[jobField].(string); o == id {
				return m.ID, nil
			}
		}
		read += len(msgs)
		end = "(" + msgs[len(msgs)-1].ID
	}
	return "", nil
}

// inStream fills in a job found in the stream: running (pending) or waiting.
func inStream(ctx context.Context, rdb redis.Cmdable, stream string, loc *Location) error {
	pend, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: Group, Start: loc.Entry, End: loc.Entry, Count: 1}).Result()
	if err != nil && !isNoGroup(err) {
		return err
	}
	if len(pend) == 1 {
		p := pend[0]
		loc.State, loc.Consumer, loc.Idle, loc.Deliveries = StateRunning, p.Consumer, p.Idle, p.RetryCount
		return nil
	}
	loc.State = StateWaiting
	start := "-"
	if groups, err := rdb.XInfoGroups(ctx, stream).Result(); err == nil {
		for _, g := range groups {
			if g.Name == Group {
				start = "(" + g.LastDeliveredID
			}
		}
	}
	// Waiting entries before it: those after the group's last delivered id.
	for read := int64(0); read < locateScan; {
		msgs, err := rdb.XRangeN(ctx, stream, start, "("+loc.Entry, 1000).Result()
		if err != nil {
			return err
		}
		loc.Ahead += int64(len(msgs))
		if len(msgs) < 1000 {
			return nil
		}
		read += int64(len(msgs))
		start = "(" + msgs[len(msgs)-1].ID
	}
	return nil
}
