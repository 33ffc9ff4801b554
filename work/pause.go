package work

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Pause is why a queue is paused: while Keys.Paused exists, no holder of
// the queue starts a job (each sees it within about keepEvery, from the
// keeper's round trip); running jobs finish, holders keep their slots,
// enqueue goes on, and due retries and delayed jobs still move into the
// stream. The key lives in Redis, so a pause outlives every holder, and a
// restart when Redis keeps an AOF; a pause for a while (Until) is the key's
// expiry, so it ends on Redis' clock with nobody there to resume it.
type Pause struct {
	User   string    `json:"user"`           // who paused it
	Host   string    `json:"host"`           // where baton pause ran
	At     time.Time `json:"at"`             // when, on the pausing host's clock
	Reason string    `json:"reason"`         // why; may be empty
	Until  time.Time `json:"until,omitzero"` // when it resumes by itself, from the key's TTL; zero: until resumed
}

// ErrBadPause is a pause for a time that is not positive.
var ErrBadPause = errors.New("pause: --for must be positive")

// Pause fields in Keys.Paused.
const (
	pauseUser   = "user"
	pauseHost   = "host"
	pauseAt     = "at" // unix ms
	pauseReason = "reason"
)

// PauseQueue pauses queue q, replacing any pause there is; d > 0 ends it
// after d on Redis' clock, d == 0 keeps it until Resume. One MULTI: the
// fields and the expiry are written together.
func PauseQueue(ctx context.Context, rdb redis.Cmdable, q string, p Pause, d time.Duration) error {
	if d < 0 || d > 0 && d < time.Millisecond {
		return ErrBadPause
	}
	k := KeysFor(q).Paused
	if p.At.IsZero() {
		p.At = time.Now()
	}
	_, err := rdb.TxPipelined(ctx, func(tx redis.Pipeliner) error {
		tx.Del(ctx, k)
		tx.HSet(ctx, k, pauseUser, p.User, pauseHost, p.Host, pauseAt, p.At.UnixMilli(), pauseReason, p.Reason)
		if d > 0 {
			tx.PExpire(ctx, k, d)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pause queue %s: %w", q, err)
	}
	return nil
}

// Resume ends queue q's pause; it reports whether the queue was paused.
func Resume(ctx context.Context, rdb redis.Cmdable, q string) (bool, error) {
	n, err := rdb.Del(ctx, KeysFor(q).Paused).Result()
	if err != nil {
		return false, fmt.Errorf("resume queue %s: %w", q, err)
	}
	return n > 0, nil
}

// ReadPause returns queue q's pause, or nil when it is not paused.
func ReadPause(ctx context.Context, rdb redis.Cmdable, q string) (*Pause, error) {
	var h *redis.MapStringStringCmd
	var ttl *redis.DurationCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		h = p.HGetAll(ctx, KeysFor(q).Paused)
		ttl = p.PTTL(ctx, KeysFor(q).Paused)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read pause of queue %s: %w", q, err)
	}
	return pauseOf(h.Val(), ttl.Val()), nil
}

// pauseOf reads a pause hash and its key's TTL (negative: none); nil when
// the hash is empty (not paused).
func pauseOf(h map[string]string, ttl time.Duration) *Pause {
	if len(h) == 0 {
		return nil
	}
	p := &Pause{User: h[pauseUser], Host: h[pauseHost], Reason: h[pauseReason]}
	if ms, err := strconv.ParseInt(h[pauseAt], 10, 64); err == nil {
		p.At = time.UnixMilli(ms)
	}
	if ttl > 0 {
		p.Until = time.Now().Add(ttl).Truncate(time.Millisecond)
	}
	return p
}

// By is who paused it, as user@host.
func (p *Pause) By() string { return p.User + "@" + p.Host }

// String says who paused the queue, when and why, in one line.
func (p *Pause) String() string {
	s := "paused by " + p.By() + " at " + p.At.Format(time.RFC3339)
	if !p.Until.IsZero() {
		s += " until " + p.Until.Format(time.RFC3339)
	}
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// pauseSeen is the keeper's view of the pause hash, read in its round
// trip: it sets the reader's flag and logs each change once, at info.
func (r *runner) pauseSeen(h map[string]string) {
	p := pauseOf(h, 0)
	was := r.paused.Swap(p != nil)
	switch {
	case p != nil && !was:
		r.c.Logger.Info().Str("by", p.By()).Time("at", p.At).Str("reason", p.Reason).
			Msg("queue paused: starting no jobs until it is resumed; running jobs finish")
	case p == nil && was:
		r.c.Logger.Info().Msg("queue resumed: starting jobs again")
		r.poke()
	}
}
