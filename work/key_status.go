package work

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyLoad is one key's jobs at one instant.
type KeyLoad struct {
	Key     string `json:"key"`
	Waiting int64  `json:"waiting"` // in its streams, not yet delivered, all levels
	Running int64  `json:"running"` // pending in its streams: read and not yet settled, all levels
	Cap     int    `json:"cap,omitempty"`
	AtCap   bool   `json:"at_cap,omitempty"`
}

// KeyReport is a queue's keys at one instant, for status: how many keys
// have jobs waiting or running, and the busiest.
type KeyReport struct {
	Keys    int       `json:"keys"`     // keys with jobs waiting or running
	Waiting int64     `json:"waiting"`  // keyed jobs waiting, all keys
	Running int64     `json:"running"`  // keyed jobs running, all keys
	AtCap   []string  `json:"at_cap"`   // keys at their cap (at most top of them)
	NAtCap  int       `json:"n_at_cap"` // how many keys are at their cap
	Top     []KeyLoad `json:"top"`      // the top keys by waiting, then running
	// Partial says that the queue has more key streams than one read
	// looks at (MaxKeyStreamsRead): the figures count those read only.
	Partial bool `json:"partial,omitempty"`
}

// MaxKeyStreamsRead bounds the key streams one ReadKeys or ReadCounts
// looks at: status on a queue with a million keys costs what 10,000 cost.
const MaxKeyStreamsRead = 10000

// keyStreamsPage is how many key streams one SSCAN and one pipeline take.
const keyStreamsPage = 1000

// keyStreamLoad is one key stream's jobs at one instant.
type keyStreamLoad struct {
	level            Priority
	key              string
	waiting, running int64
	name             string // the stream
	lastRunning      string // its newest pending entry ("" when none): its waiting ones come after
}

// readKeyStreams reads the key streams listed in KeyStreams, at most
// MaxKeyStreamsRead of them, in pages: one SSCAN and one pipeline of XLEN
// and the group's XPENDING summary per page. A stream's running jobs are
// its pending entries, its waiting ones the rest (XLEN − pending: a
// settled entry is deleted). A stream gone meanwhile counts nothing. more
// reports streams left unread. It never writes.
func readKeyStreams(ctx context.Context, rdb redis.Cmdable, k Keys) (loads []keyStreamLoad, more bool, err error) {
	seen := map[string]bool{}
	err = scanKeyStreams(ctx, rdb, k, keyStreamsPage, func(names []string) (bool, error) {
		var page []string
		for _, s := range names {
			if seen[s] {
				continue // SSCAN may return a member twice
			}
			if len(seen) == MaxKeyStreamsRead {
				more = true
				break
			}
			seen[s] = true
			page = append(page, s)
		}
		for _, l := range lookKeyStreams(ctx, rdb, k, page) {
			n, pending, err := streamLoad(l.n, l.pend)
			if err != nil {
				return false, fmt.Errorf("read key stream %s: %w", l.name, err)
			}
			if n > 0 || pending > 0 {
				loads = append(loads, keyStreamLoad{level: l.at.level, key: l.at.key, waiting: max(0, n-pending), running: pending,
					name: l.name, lastRunning: l.pend.Val().Higher})
			}
		}
		return !more, nil
	})
	if err != nil {
		return nil, false, err
	}
	return loads, more, nil
}

// oldestKeyed is how long the oldest job waiting in the key streams of
// loads has waited: each stream's first entry after its newest pending
// one (delivered entries come before undelivered ones, and settled ones
// are deleted), one XRANGE per stream with waiting jobs, pipelined in
// pages. An entry's id is when it entered the stream, as in oldestWaiting.
func oldestKeyed(ctx context.Context, rdb redis.Cmdable, loads []keyStreamLoad) (time.Duration, error) {
	var oldest time.Duration
	for page := range slices.Chunk(loads, keyStreamsPage) {
		var cmds []*redis.XMessageSliceCmd
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, l := range page {
				if l.waiting > 0 {
					from := "-"
					if l.lastRunning != "" {
						from = "(" + l.lastRunning
					}
					cmds = append(cmds, p.XRangeN(ctx, l.name, from, "+", 1))
				}
			}
			return nil
		})
		for _, c := range cmds {
			next, err := c.Result()
			var rerr redis.Error
			if err != nil && !errors.As(err, &rerr) {
				return 0, fmt.Errorf("read key stream: %w", err)
			}
			if len(next) == 1 {
				if ms, _, ok := cutDash(next[0].ID); ok {
					oldest = max(oldest, time.Since(time.UnixMilli(ms)))
				}
			}
		}
	}
	return oldest, nil
}

// scanKeyStreams passes the names in KeyStreams to page, about size at a
// time (SSCAN: a name may come twice), until the set is done or page
// returns false.
func scanKeyStreams(ctx context.Context, rdb redis.Cmdable, k Keys, size int64, page func([]string) (bool, error)) error {
	var cursor uint64
	for {
		names, next, err := rdb.SScan(ctx, k.KeyStreams(), cursor, "", size).Result()
		if err != nil {
			return fmt.Errorf("read key streams: %w", err)
		}
		if goOn, err := page(names); err != nil || !goOn {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// keyStreamLook is one key stream's XLEN and its group's XPENDING summary,
// as lookKeyStreams asked them.
type keyStreamLook struct {
	name string
	at   entryKey // its level and key
	n    *redis.IntCmd
	pend *redis.XPendingCmd
}

// lookKeyStreams asks, in one pipeline, the length and the group's pending
// summary of each key stream named in names (other names, not this
// queue's key streams, are left out).
func lookKeyStreams(ctx context.Context, rdb redis.Cmdable, k Keys, names []string) []keyStreamLook {
	looks := make([]keyStreamLook, 0, len(names))
	if len(names) == 0 {
		return looks
	}
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range names {
			level, key, ok := k.keyOfStream(s)
			if !ok {
				continue // not a key stream's name: nothing of ours
			}
			looks = append(looks, keyStreamLook{name: s, at: entryKey{level: level, key: key}, n: p.XLen(ctx, s), pend: p.XPending(ctx, s, Group)})
		}
		return nil
	})
	return looks
}

// streamLoad is a stream's length and pending count from XLEN and the
// XPENDING summary: 0 for a stream (or group) that is gone, or a name that
// holds something else (a reply error: status reports what it can).
func streamLoad(xlen *redis.IntCmd, pend *redis.XPendingCmd) (n, pending int64, err error) {
	for _, e := range []error{xlen.Err(), pend.Err()} {
		var rerr redis.Error
		if e != nil && !isRedisNil(e) && !errors.As(e, &rerr) {
			return 0, 0, e // the connection, not the stream
		}
	}
	if xlen.Err() == nil {
		n = xlen.Val()
	}
	if pend.Err() == nil {
		pending = pend.Val().Count
	}
	return n, pending, nil
}

// ReadKeys reads the queue's keys without writing: the key streams listed
// in KeyStreams (at most MaxKeyStreamsRead of them), each one's waiting
// and running jobs (pipelined in pages), summed by key over the levels and
// judged against caps. It costs O(keys); status takes the same from the
// streams its counts read (Counts.Keys). nil when no key has jobs.
func ReadKeys(ctx context.Context, rdb redis.Cmdable, q string, caps KeyCaps, top int) (*KeyReport, error) {
	streams, more, err := readKeyStreams(ctx, rdb, KeysFor(q))
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	return keyReport(streams, more, caps, top), nil
}

// Keys is ReadKeys from the key streams ReadCounts read for c, with no
// Redis call: status reads them once.
func (c *Counts) Keys(caps KeyCaps, top int) *KeyReport {
	return keyReport(c.keyStreams, c.keysPartial, caps, top)
}

// keyReport sums streams by key and judges them against caps: the keys
// with jobs, the top busiest, those at their cap; more says streams were
// left unread. nil when no key has jobs.
func keyReport(streams []keyStreamLoad, more bool, caps KeyCaps, top int) *KeyReport {
	byKey := map[string]*KeyLoad{}
	for _, s := range streams {
		l := byKey[s.key]
		if l == nil {
			l = &KeyLoad{Key: s.key, Cap: caps.of(s.key)}
			byKey[s.key] = l
		}
		l.Waiting += s.waiting
		l.Running += s.running
	}
	if len(byKey) == 0 {
		return nil
	}
	rep := &KeyReport{Partial: more}
	loads := make([]KeyLoad, 0, len(byKey))
	for _, l := range byKey {
		l.AtCap = l.Cap > 0 && l.Running >= int64(l.Cap)
		rep.Waiting += l.Waiting
		rep.Running += l.Running
		if l.AtCap {
			rep.NAtCap++
		}
		loads = append(loads, *l)
	}
	rep.Keys = len(loads)
	slices.SortFunc(loads, func(a, b KeyLoad) int {
		return cmp.Or(cmp.Compare(b.Waiting, a.Waiting), cmp.Compare(b.Running, a.Running), strings.Compare(a.Key, b.Key))
	})
	for _, l := range loads {
		if l.AtCap && len(rep.AtCap) < top {
			rep.AtCap = append(rep.AtCap, l.Key)
		}
	}
	rep.Top = loads[:min(top, len(loads))]
	return rep
}

// keyIndexOf splits a value of the key index (KeyJobs): the job's entry
// id, level and key; ok false for anything else.
func keyIndexOf(v string) (entry string, level Priority, key string, ok bool) {
	entry, rest, ok1 := strings.Cut(v, "\n")
	lvl, key, ok2 := strings.Cut(rest, "\n")
	if !ok1 || !ok2 || entry == "" || key == "" {
		return "", 0, "", false
	}
	level, err := ParsePriority(lvl)
	return entry, level, key, err == nil
}

// locateKeyed fills in a keyed job from its index value (held): waiting
// or running in its key's stream, with its key's counts. found is false
// when that entry is not there (the index outlived the job's settle, or
// names nothing readable): the caller looks elsewhere.
func locateKeyed(ctx context.Context, rdb redis.Cmdable, k Keys, loc *Location, held string) (found bool, err error) {
	entry, level, key, ok := keyIndexOf(held)
	if !ok {
		return false, nil
	}
	stream := k.KeyStream(level, key)
	msgs, err := rdb.XRange(ctx, stream, entry, entry).Result()
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) {
			return false, nil // not a stream: nothing of this job
		}
		return false, fmt.Errorf("read keyed job: %w", err)
	}
	if len(msgs) != 1 {
		return false, nil
	}
	if o, _ := msgs[0].Values[jobField].(string); o != loc.ID && (o != "" || entry != loc.ID) {
		return false, nil
	}
	loc.Entry, loc.Key = entry, key
	if level != PriorityNormal {
		loc.Priority = level.String()
	}
	if err := inStream(ctx, rdb, stream, loc); err != nil {
		return true, fmt.Errorf("read keyed job: %w", err)
	}
	// The key's running jobs, all levels (the cap counts them all); its
	// waiting ones in this level's stream, where the job waits.
	var lens [3]*redis.IntCmd
	var pends [3]*redis.XPendingCmd
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, l := range readOrder {
			lens[l] = p.XLen(ctx, k.KeyStream(l, key))
			pends[l] = p.XPending(ctx, k.KeyStream(l, key), Group)
		}
		return nil
	})
	for _, l := range readOrder {
		n, pending, err := streamLoad(lens[l], pends[l])
		if err != nil {
			return true, fmt.Errorf("read keyed job: %w", err)
		}
		loc.KeyRunning += pending
		if l == level {
			loc.KeyWaiting = max(0, n-pending)
		}
	}
	return true, nil
}

// Of returns key k's cap, 0 for none.
func (c KeyCaps) Of(k string) int { return c.of(k) }
