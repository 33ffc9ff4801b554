package periodic

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Status is one entry as List reads it.
type Status struct {
	Name     string    `json:"name"`
	Schedule string    `json:"schedule"`
	TimeZone string    `json:"time_zone"`
	CatchUp  CatchUp   `json:"catch_up"`
	Next     time.Time `json:"next_tick"`
	// LastTick is the last tick claimed (enqueued or, too late, only
	// recorded); zero when the entry never fired.
	LastTick time.Time `json:"last_tick,omitzero"`
	// LastJob is the id of the last job enqueued, LastJobTick its tick.
	LastJob     string    `json:"last_job,omitempty"`
	LastJobTick time.Time `json:"last_job_tick,omitzero"`
	// Overlap is the entry's overlap; Skipped counts the ticks it skipped.
	Overlap string `json:"overlap"`
	Skipped int64  `json:"skipped"`
	// Missed counts the ticks claimed too late to enqueue (catch_up none;
	// not a new entry's first tick, recorded only).
	Missed int64 `json:"missed"`
	// Unclaimed is the first tick after the last claimed one (for an entry
	// never claimed, its latest tick) when it is more than Late past: no
	// holder of the queue ran then. Zero otherwise.
	Unclaimed time.Time `json:"unclaimed_tick,omitzero"`
}

// Counts are one entry's totals as Redis keeps them, for metrics.
type Counts struct {
	LastTick time.Time        // zero: never claimed
	Ticks    map[string]int64 // by outcome: Enqueued, Missed, Skipped
}

// ReadCounts reads queue q's periodic records: every entry that ever
// claimed a tick, by name (including entries since removed from the
// config). It writes nothing.
func ReadCounts(ctx context.Context, rdb redis.Cmdable, q string) (map[string]*Counts, error) {
	r, err := rdb.HGetAll(ctx, RecordsKey(q)).Result()
	if err != nil {
		return nil, fmt.Errorf("read periodic records: %w", err)
	}
	out := map[string]*Counts{}
	get := func(name string) *Counts {
		c := out[name]
		if c == nil {
			c = &Counts{Ticks: map[string]int64{Enqueued: 0, Missed: 0, Skipped: 0}}
			out[name] = c
		}
		return c
	}
	for k, v := range r {
		name, rest, _ := strings.Cut(k, ":")
		switch {
		case rest == "":
			get(name).LastTick = msTime(v, time.UTC)
		case strings.HasPrefix(rest, "count:"):
			n, _ := strconv.ParseInt(v, 10, 64)
			get(name).Ticks[strings.TrimPrefix(rest, "count:")] = n
		}
	}
	return out, nil
}

// List reads queue q's records for entries (checked by Check) in one round
// trip, with Redis' clock for the next ticks. It writes nothing.
func List(ctx context.Context, rdb redis.Cmdable, q string, entries []Entry) ([]Status, error) {
	var now *redis.TimeCmd
	var recs *redis.MapStringStringCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		recs = p.HGetAll(ctx, RecordsKey(q))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read periodic records: %w", err)
	}
	r := recs.Val()
	out := make([]Status, 0, len(entries))
	for _, e := range entries {
		s, err := parseSchedule(e.Schedule)
		if err != nil {
			return nil, fmt.Errorf("periodic entry %q: schedule: %w", e.Name, err)
		}
		st := Status{Name: e.Name, Schedule: s.String(), TimeZone: s.loc.String(), CatchUp: e.CatchUp, Next: s.Next(now.Val())}
		st.LastTick = msTime(r[e.Name], s.loc)
		st.LastJob = r[e.Name+":job"]
		st.LastJobTick = msTime(r[e.Name+":enqueued"], s.loc)
		st.Overlap = e.Overlap
		st.Skipped, _ = strconv.ParseInt(r[e.Name+":count:skipped"], 10, 64)
		st.Missed, _ = strconv.ParseInt(r[e.Name+":count:missed"], 10, 64)
		due := s.Prev(now.Val()) // a new entry: its latest tick
		if !st.LastTick.IsZero() {
			due = s.Next(st.LastTick) // the first tick after the last claimed
		}
		if !due.IsZero() && now.Val().Sub(due) > Late {
			st.Unclaimed = due
		}
		out = append(out, st)
	}
	return out, nil
}

func msTime(v string, loc *time.Location) time.Time {
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms).In(loc)
}

// HostEntries is what one host's holders last noted of their entries.
type HostEntries struct {
	Host        string        `json:"host"`
	Fingerprint string        `json:"fingerprint"` // Fingerprint of its entries
	Age         time.Duration `json:"age"`         // since noted, on Redis' clock
}

// ReadHosts reads the fingerprints the holders of queue q noted (about every
// 10 s while they run) no longer than within ago, sorted by host. It
// writes nothing.
func ReadHosts(ctx context.Context, rdb redis.Cmdable, q string, within time.Duration) ([]HostEntries, error) {
	var now *redis.TimeCmd
	var hosts *redis.MapStringStringCmd
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		hosts = p.HGetAll(ctx, HostsKey(q))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read periodic hosts: %w", err)
	}
	var out []HostEntries
	for h, v := range hosts.Val() {
		print, at, _ := strings.Cut(v, " ")
		ms, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			continue
		}
		if age := now.Val().Sub(time.UnixMilli(ms)); age <= within {
			out = append(out, HostEntries{Host: h, Fingerprint: print, Age: age})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Host < out[j].Host })
	return out, nil
}

// ForgetHosts removes hosts' entries' fingerprints from queue q's record
// (a host taken out of service), and reports how many were there.
func ForgetHosts(ctx context.Context, rdb redis.Cmdable, q string, hosts ...string) (int64, error) {
	n, err := rdb.HDel(ctx, HostsKey(q), hosts...).Result()
	if err != nil {
		return 0, fmt.Errorf("forget periodic hosts: %w", err)
	}
	return n, nil
}
