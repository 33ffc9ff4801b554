package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Errors of the dead-letter calls.
var (
	ErrNoDeadLetter = errors.New("no such dead letter")
	ErrNoPayload    = errors.New("dead letter has no payload (a malformed entry): nothing to requeue")
)

// DeadLetter is a job that will not run again unless requeued.
type DeadLetter struct {
	ID       string    `json:"id"`     // id in the dead-letter stream
	Reason   string    `json:"reason"` // failed, timeout, crashed, too_large, malformed
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"`  // the last error: a tail of the job's stderr, bounded
	JobID    string    `json:"job_id"` // the job's last entry id
	Orig     string    `json:"orig"`   // the job's first entry id: when it was enqueued
	FailedAt time.Time `json:"failed_at"`
	Payload  []byte    `json:"payload"` // nil for a malformed entry
}

// Enqueued is when the job was first enqueued (from its first entry id).
func (d *DeadLetter) Enqueued() time.Time {
	ms, _, _ := cutDash(d.Orig)
	return time.UnixMilli(ms)
}

func cutDash(id string) (int64, string, bool) {
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			ms, err := strconv.ParseInt(id[:i], 10, 64)
			return ms, id[i+1:], err == nil
		}
	}
	return 0, "", false
}

func toDeadLetter(m redis.XMessage) DeadLetter {
	str := func(k string) string { s, _ := m.Values[k].(string); return s }
	d := DeadLetter{ID: m.ID, Reason: str("reason"), Error: str("error"), JobID: str("id"), Orig: str("orig")}
	d.Attempts, _ = strconv.Atoi(str("attempts"))
	if ms, err := strconv.ParseInt(str("failed_at"), 10, 64); err == nil {
		d.FailedAt = time.UnixMilli(ms)
	}
	if p, ok := m.Values[PayloadField].(string); ok {
		d.Payload = []byte(p)
	}
	return d
}

// ListDead returns up to n dead letters of queue q, oldest first, after the
// id after ("" from the first; n ≤ 0: all).
func ListDead(ctx context.Context, rdb redis.Cmdable, q, after string, n int64) ([]DeadLetter, error) {
	start := "-"
	if after != "" {
		start = "(" + after
	}
	var msgs []redis.XMessage
	var err error
	if n > 0 {
		msgs, err = rdb.XRangeN(ctx, KeysFor(q).Dead, start, "+", n).Result()
	} else {
		msgs, err = rdb.XRange(ctx, KeysFor(q).Dead, start, "+").Result()
	}
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(msgs))
	for i, m := range msgs {
		out[i] = toDeadLetter(m)
	}
	return out, nil
}

// GetDead returns one dead letter, or ErrNoDeadLetter.
func GetDead(ctx context.Context, rdb redis.Cmdable, q, id string) (*DeadLetter, error) {
	msgs, err := rdb.XRange(ctx, KeysFor(q).Dead, id, id).Result()
	if err != nil {
		return nil, deadIDErr(id, err)
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%s: %w", id, ErrNoDeadLetter)
	}
	d := toDeadLetter(msgs[0])
	return &d, nil
}

// RequeueDead puts a dead letter back as a new job, its attempts starting
// over, and removes the dead letter, in one step. It returns the new job id.
func RequeueDead(ctx context.Context, rdb redis.Scripter, q, id string) (string, error) {
	k := KeysFor(q)
	v, err := requeueScript.Run(ctx, rdb, []string{k.Dead, k.Stream}, id).Result()
	if err != nil {
		return "", deadIDErr(id, err)
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case int64:
		if v == 1 {
			return "", fmt.Errorf("%s: %w", id, ErrNoPayload)
		}
	}
	return "", fmt.Errorf("%s: %w", id, ErrNoDeadLetter)
}

// PurgeDead deletes dead letters by id and returns how many there were.
func PurgeDead(ctx context.Context, rdb redis.Cmdable, q string, ids ...string) (int64, error) {
	n, err := rdb.XDel(ctx, KeysFor(q).Dead, ids...).Result()
	if err != nil {
		return 0, deadIDErr(ids[0], err)
	}
	return n, nil
}

// PurgeAllDead deletes every dead letter of q and returns how many there were.
func PurgeAllDead(ctx context.Context, rdb redis.Cmdable, q string) (int64, error) {
	k := KeysFor(q).Dead
	var n *redis.IntCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.XLen(ctx, k)
		p.Del(ctx, k)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n.Val(), nil
}

// deadIDErr turns Redis's complaint about a malformed id into a clear one.
func deadIDErr(id string, err error) error {
	if _, _, ok := cutDash(id); !ok {
		if _, perr := strconv.ParseUint(id, 10, 64); perr != nil {
			return fmt.Errorf("%q is not a dead-letter id (they look like 1700000000000-0): %w", id, ErrNoDeadLetter)
		}
	}
	return err
}
