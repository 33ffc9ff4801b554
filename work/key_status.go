package work

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// KeyLoad is one key's jobs at one instant.
type KeyLoad struct {
	Key     string `json:"key"`
	Waiting int64  `json:"waiting"` // in its lists, all levels
	Running int64  `json:"running"` // its permits: jobs read and not yet settled
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
}

// maxKeysRead bounds the keys ReadKeys looks at (status on a huge queue).
const maxKeysRead = 100000

// ReadKeys reads the queue's keys without writing: the keys in the rings
// (with waiting jobs) and those holding permits (SCAN), each one's waiting
// and running jobs (one pipeline), judged against caps. It costs O(keys),
// for status only; holders never scan keys. nil when no key has jobs.
func ReadKeys(ctx context.Context, rdb redis.Cmdable, q string, caps KeyCaps, top int) (*KeyReport, error) {
	k := KeysFor(q)
	names := map[string]bool{}
	for _, ring := range k.rings() {
		ks, err := rdb.LRange(ctx, ring, 0, maxKeysRead-1).Result()
		if err != nil {
			return nil, fmt.Errorf("read keys: %w", err)
		}
		for _, n := range ks {
			names[n] = true
		}
	}
	prefix := k.keyBase() + "run:"
	var cursor uint64
	for len(names) < maxKeysRead {
		ks, next, err := rdb.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("read keys: %w", err)
		}
		for _, n := range ks {
			names[strings.TrimPrefix(n, prefix)] = true
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	type cmds struct {
		lists [3]*redis.IntCmd
		run   *redis.IntCmd
	}
	all := make(map[string]*cmds, len(names))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for n := range names {
			c := &cmds{run: p.HLen(ctx, k.KeyRun(n))}
			for i, level := range readOrder {
				c.lists[i] = p.LLen(ctx, k.KeyList(level, n))
			}
			all[n] = c
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read keys: %w", err)
	}
	rep := &KeyReport{}
	loads := make([]KeyLoad, 0, len(all))
	for n, c := range all {
		l := KeyLoad{Key: n, Running: c.run.Val(), Cap: caps.of(n)}
		for _, x := range c.lists {
			l.Waiting += x.Val()
		}
		if l.Waiting == 0 && l.Running == 0 {
			continue
		}
		l.AtCap = l.Cap > 0 && l.Running >= int64(l.Cap)
		rep.Waiting += l.Waiting
		rep.Running += l.Running
		if l.AtCap {
			rep.NAtCap++
		}
		loads = append(loads, l)
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
	return rep, nil
}

// locateKeyed fills in a job waiting in its key's list.
func locateKeyed(ctx context.Context, rdb redis.Cmdable, k Keys, loc *Location) error {
	key, err := runScript(ctx, rdb, recordFieldScript, []string{k.KeyJobs()}, loc.ID, keyField).Text()
	if err != nil {
		return fmt.Errorf("read waiting keyed job: %w", err)
	}
	level := PriorityNormal
	if p, err := runScript(ctx, rdb, recordFieldScript, []string{k.KeyJobs()}, loc.ID, priorityField).Text(); err == nil {
		level, _ = ParsePriority(p)
	}
	loc.State, loc.Key = StateWaiting, key
	if level != PriorityNormal {
		loc.Priority = level.String()
	}
	var running, waiting *redis.IntCmd
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		running = p.HLen(ctx, k.KeyRun(key))
		waiting = p.LLen(ctx, k.KeyList(level, key))
		return nil
	})
	loc.KeyRunning, loc.KeyWaiting = running.Val(), waiting.Val()
	return err
}

// Of returns key k's cap, 0 for none.
func (c KeyCaps) Of(k string) int { return c.of(k) }
