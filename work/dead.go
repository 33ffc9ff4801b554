package work

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// Errors of the dead-letter calls.
var (
	ErrNoDeadLetter = errors.New("no such dead letter")
	ErrNoPayload    = errors.New("dead letter has no payload (a malformed entry): nothing to requeue")
)

// DeadLetter is a job that will not run again unless requeued.
type DeadLetter struct {
	ID       string    `json:"id"`     // the letter's own id in the dead-letter stream
	JobID    string    `json:"job_id"` // the job's id for life: the id enqueue returned
	Reason   string    `json:"reason"` // failed, timeout, crashed, too_large, malformed, rejected, cancelled
	Attempts int       `json:"attempts"`
	Error    string    `json:"error"` // the last error: a tail of the job's stderr, bounded
	Entry    string    `json:"entry"` // the job's last stream entry id
	FailedAt time.Time `json:"failed_at"`
	Payload  []byte    `json:"payload"` // nil for a malformed entry
	// Fields are the producer's own fields of the job, if any.
	Fields map[string]string `json:"fields,omitempty"`
}

// MarshalJSON writes the payload as text when it is valid UTF-8, else as
// base64, and says which in payload_encoding ("text" or "base64"); a letter
// without a payload has neither.
func (d DeadLetter) MarshalJSON() ([]byte, error) {
	type plain DeadLetter
	out := struct {
		plain
		Payload  *string `json:"payload"`
		Encoding string  `json:"payload_encoding,omitempty"`
	}{plain: plain(d)}
	if d.Payload != nil {
		p, enc := string(d.Payload), "text"
		if !utf8.Valid(d.Payload) {
			p, enc = base64.StdEncoding.EncodeToString(d.Payload), "base64"
		}
		out.Payload, out.Encoding = &p, enc
	}
	return json.Marshal(out)
}

// Enqueued is when the job was first enqueued (from its id).
func (d *DeadLetter) Enqueued() time.Time {
	ms, _, _ := cutDash(d.JobID)
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
	d := DeadLetter{ID: m.ID, JobID: str(jobField), Reason: str(deadReason), Error: str(deadError), Entry: str(deadEntry)}
	if d.JobID == "" {
		d.JobID = d.Entry
	}
	d.Attempts, _ = strconv.Atoi(str(attemptsField))
	if ms, err := strconv.ParseInt(str(deadFailedAt), 10, 64); err == nil {
		d.FailedAt = time.UnixMilli(ms)
	}
	for k, v := range m.Values {
		switch k {
		case PayloadField:
			p, _ := v.(string)
			d.Payload = []byte(p)
		case jobField, attemptsField, deadReason, deadError, deadEntry, deadFailedAt:
		default:
			if d.Fields == nil {
				d.Fields = map[string]string{}
			}
			d.Fields[k], _ = v.(string)
		}
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
	return toDeadLetters(msgs, err)
}

// ListDeadNewest returns up to n dead letters of queue q, newest first.
func ListDeadNewest(ctx context.Context, rdb redis.Cmdable, q string, n int64) ([]DeadLetter, error) {
	return toDeadLetters(rdb.XRevRangeN(ctx, KeysFor(q).Dead, "+", "-", n).Result())
}

// toDeadLetters reads a range of the dead-letter stream.
func toDeadLetters(msgs []redis.XMessage, err error) ([]DeadLetter, error) {
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(msgs))
	for i, m := range msgs {
		out[i] = toDeadLetter(m)
	}
	return out, nil
}

// letterID resolves id, a job's id for life or a letter's own id, to the
// letter's id.
func letterID(ctx context.Context, rdb redis.Cmdable, k Keys, id string) (string, error) {
	did, err := rdb.HGet(ctx, k.DeadIndex, id).Result()
	switch {
	case err == nil:
		return did, nil
	case isRedisNil(err):
		return id, nil
	}
	return "", err
}

// GetDead returns the dead letter of a job, by the job's id (the one
// enqueue returned) or the letter's own id, or ErrNoDeadLetter.
func GetDead(ctx context.Context, rdb redis.Cmdable, q, id string) (*DeadLetter, error) {
	k := KeysFor(q)
	did, err := letterID(ctx, rdb, k, id)
	if err != nil {
		return nil, err
	}
	msgs, err := rdb.XRange(ctx, k.Dead, did, did).Result()
	if err != nil {
		return nil, deadIDErr(id, err)
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("%s: %w", id, ErrNoDeadLetter)
	}
	d := toDeadLetter(msgs[0])
	return &d, nil
}

// RequeueDead puts a dead letter back as the same job, with the same id and
// its attempts starting over, and removes the letter, in one step. id is the
// job's id or the letter's; it returns the job's id.
func RequeueDead(ctx context.Context, rdb redis.Cmdable, q, id string) (string, error) {
	k := KeysFor(q)
	did, err := letterID(ctx, rdb, k, id)
	if err != nil {
		return "", err
	}
	if d, err := GetDead(ctx, rdb, q, did); err == nil && d.Fields[afterField] != "" {
		// Blocked again on what it waits for, its cancel request (if one
		// is left) taken out first, as requeueScript does.
		if err := rdb.HDel(ctx, k.Cancel, d.JobID).Err(); err != nil {
			return "", fmt.Errorf("clear cancel request of job %s: %w", d.JobID, err)
		}
		return requeueChained(ctx, rdb, q, d)
	}
	v, err := runScript(ctx, rdb, requeueScript, []string{k.Dead, k.DeadIndex, k.Stream, k.High, k.Low, k.Cancel}, did).Result()
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

// PurgeDead deletes dead letters by job id or letter id and returns how many
// there were.
func PurgeDead(ctx context.Context, rdb redis.Cmdable, q string, ids ...string) (int64, error) {
	k := KeysFor(q)
	dids := make([]string, 0, len(ids))
	for _, id := range ids {
		did, err := letterID(ctx, rdb, k, id)
		if err != nil {
			return 0, err
		}
		dids = append(dids, did)
	}
	var n *redis.IntCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.XDel(ctx, k.Dead, dids...)
		p.HDel(ctx, k.DeadIndex, ids...)
		return nil
	})
	if err != nil {
		return 0, deadIDErr(ids[0], err)
	}
	return n.Val(), nil
}

// PurgeAllDead deletes every dead letter of q and returns how many there were.
func PurgeAllDead(ctx context.Context, rdb redis.Cmdable, q string) (int64, error) {
	k := KeysFor(q)
	var n *redis.IntCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		n = p.XLen(ctx, k.Dead)
		p.Del(ctx, k.Dead, k.DeadIndex)
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
