// Package cronfire notices when cron stops starting baton on a host. Each
// candidate cron starts touches a file in the lock dir (Mark: one syscall,
// no Redis connection, so a losing candidate stays as cheap as before);
// every holder publishes its host's last firing to Redis (Start), where
// status and metrics read it (Read) and say when a host has gone silent for
// longer than its schedule allows.
package cronfire

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/baton-run/baton/internal/script"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// path is the file whose modification time is the host's last firing.
func path(lockDir, queue string) string { return filepath.Join(lockDir, queue+".cron") }

// Key is the hash of the hosts' last firings of queue: host → unix ms.
func Key(queue string) string { return work.KeysFor(queue).Stream + ":cron" }

// Mark records that cron started a candidate now, and reports whether it
// could. It never fails a candidate: a lock dir not made yet (the first
// run) is left alone.
func Mark(lockDir, queue string) bool {
	p, now := path(lockDir, queue), time.Now()
	err := os.Chtimes(p, now, now)
	if errors.Is(err, fs.ErrNotExist) {
		err = os.WriteFile(p, nil, 0o644)
	}
	return err == nil
}

// Last is the host's last firing as Mark left it; zero when none.
func Last(lockDir, queue string) time.Time {
	fi, err := os.Stat(path(lockDir, queue))
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}

// publishScript raises a host's last firing, never lowers it (holders of one
// host may read the file at different moments).
// KEYS[1] the hash; ARGV[1] the host, ARGV[2] its last firing (unix ms).
// Returns 1 when raised, else 0.
var publishScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0') or 0
if tonumber(ARGV[2]) > cur then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
`)

// Publish writes host's last firing t unless Redis has a later one.
func Publish(ctx context.Context, rdb Client, queue, host string, t time.Time) error {
	if err := script.Run(ctx, rdb, publishScript, []string{Key(queue)}, host, t.UnixMilli()).Err(); err != nil {
		return fmt.Errorf("publish cron's last firing: %w", err)
	}
	return nil
}

// Client is what the package needs of a go-redis client.
type Client interface {
	redis.Cmdable
	redis.Scripter
}

// Every is how often a holder looks at its host's last firing: one stat a
// second, and a Redis call only when cron fired since, so that a healthy
// host's published firing is never more than C + Every old.
const Every = time.Second

// Start publishes the host's last firing now and every Every until the
// returned func is called (it stops the goroutine and waits for it).
func Start(rdb Client, lockDir, queue, host string, log zerolog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var sent time.Time
		warned := false
		tick := time.NewTicker(Every)
		defer tick.Stop()
		for {
			if t := Last(lockDir, queue); !t.IsZero() && !t.Equal(sent) {
				if err := Publish(ctx, rdb, queue, host, t); err != nil {
					if !warned && ctx.Err() == nil {
						log.Warn().Err(err).Msg("cannot publish cron's last firing on this host; retrying")
					}
					warned = true
				} else {
					sent, warned = t, false
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); wg.Wait() }
}

// Fire is one host's last firing.
type Fire struct {
	Host string    `json:"host"`
	Last time.Time `json:"last_fire"`
	// Silent is set when the last firing is older than the limit Read was
	// given: cron has stopped starting baton there.
	Silent bool `json:"silent"`
}

// Read returns every host's last firing of queue, by host name, judging
// silence on Redis' clock: a host is silent when it has not fired for more
// than limit. It writes nothing.
func Read(ctx context.Context, rdb redis.Cmdable, queue string, limit time.Duration) ([]Fire, error) {
	var now *redis.TimeCmd
	var all *redis.MapStringStringCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		all = p.HGetAll(ctx, Key(queue))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read cron's last firings: %w", err)
	}
	var out []Fire
	for h, v := range all.Val() {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		t := time.UnixMilli(ms)
		out = append(out, Fire{Host: h, Last: t, Silent: now.Val().Sub(t) > limit})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, nil
}

// Margin is added to twice the schedule's longest gap (2 C) before a host
// counts as silent. A healthy host's published firing is at most C + Every
// plus a candidate's start old, so 2 C + Margin misses one firing and a
// late one; the second left of issue 25's 2 C + 5 s is for whoever asks
// (a status run takes tens of ms).
const Margin = 4 * time.Second

// Forget removes hosts' last firings of queue (a host taken out of service:
// status would call it silent forever) and returns those that were there.
// A host whose cron still starts baton comes back at its next firing.
func Forget(ctx context.Context, rdb redis.Cmdable, queue string, hosts ...string) ([]string, error) {
	var cmds []*redis.IntCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, h := range hosts {
			cmds = append(cmds, p.HDel(ctx, Key(queue), h))
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("forget cron's last firings: %w", err)
	}
	var gone []string
	for i, c := range cmds {
		if c.Val() > 0 {
			gone = append(gone, hosts[i])
		}
	}
	return gone, nil
}
