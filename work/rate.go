package work

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Rate is a queue-wide limit: at most N jobs started per Per, across every
// holder of the queue (and every host), enforced in Redis.
type Rate struct {
	N   int
	Per time.Duration
}

// ParseRate reads "50/s", "300/m" or "1000/h"; "" is no limit (the zero Rate).
func ParseRate(s string) (Rate, error) {
	if s == "" {
		return Rate{}, nil
	}
	n, unit, ok := strings.Cut(s, "/")
	per := map[string]time.Duration{"s": time.Second, "m": time.Minute, "h": time.Hour}[unit]
	v, err := strconv.Atoi(n)
	if !ok || per == 0 || err != nil || v < 1 {
		return Rate{}, fmt.Errorf("%q: want a count of at least 1 per s, m or h, e.g. \"50/s\"", s)
	}
	return Rate{N: v, Per: per}, nil
}

func (r Rate) String() string {
	if r.N == 0 {
		return "none"
	}
	return strconv.Itoa(r.N) + "/" + map[time.Duration]string{time.Second: "s", time.Minute: "m", time.Hour: "h"}[r.Per]
}

// interval is the time one job takes of the budget, in microseconds.
func (r Rate) interval() int64 { return int64(r.Per/time.Microsecond) / int64(r.N) }

// burst is how many jobs may start at once after a quiet spell: a twentieth
// of a second's worth (at least one), so no second ever sees more than the
// rate plus a twentieth.
func (r Rate) burst() int64 {
	perSecond := float64(r.N) * float64(time.Second) / float64(r.Per)
	return max(1, int64(math.Ceil(perSecond/20)))
}

// rateScript is a GCRA limiter on Redis's own clock: KEYS[1] holds the
// "theoretical arrival time" of the next job, in microseconds. It also
// counts the jobs granted per second in KEYS[2], a ring of rateLogSeconds
// fields ("<unix second> <count>"), for status to show the current rate.
//
// KEYS[1] rate key, KEYS[2] rate log; ARGV[1] interval (µs per job),
// ARGV[2] burst, ARGV[3] jobs wanted (a negative count gives unused ones
// back).
// Returns {granted, ms to wait for the next one when none was granted}.
var rateScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval, burst, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), now)
local grant = 0
if want < 0 then
  tat = math.max(now, tat + want * interval)
else
  grant = math.min(want, math.floor((now + burst * interval - tat) / interval))
  if grant <= 0 then
    return {0, math.ceil((tat + interval - burst * interval - now) / 1000)}
  end
  tat = tat + grant * interval
end
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
local sec = tonumber(t[1])
local field = tostring(sec % ` + rateLogSeconds + `)
local old = redis.call('HGET', KEYS[2], field)
local at, n = 0, 0
if old then
  local sp = string.find(old, ' ', 1, true)
  at, n = tonumber(string.sub(old, 1, sp - 1)), tonumber(string.sub(old, sp + 1))
end
if at ~= sec then n = 0 end
n = math.max(0, n + (want < 0 and want or grant))
redis.call('HSET', KEYS[2], field, sec .. ' ' .. n)
redis.call('EXPIRE', KEYS[2], ` + rateLogSeconds + `)
return {grant, 0}
`)

// rateLogSeconds is the length of the rate log's ring, as Lua text.
const rateLogSeconds = "8"

// RecentRate is the jobs per second queue q's rate limiter granted over the
// last three complete seconds, read from its log; 0 when no holder
// with a rate limit ran lately.
func RecentRate(ctx context.Context, rdb redis.Cmdable, q string) (float64, error) {
	var now *redis.TimeCmd
	var log *redis.MapStringStringCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		log = p.HGetAll(ctx, KeysFor(q).RateLog)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return recentRate(now.Val().Unix(), log.Val()), nil
}

// recentRate averages the log's counts over the three seconds before now.
func recentRate(now int64, log map[string]string) float64 {
	const span = 3
	total := int64(0)
	for _, v := range log {
		sec, n, ok := strings.Cut(v, " ")
		s, err1 := strconv.ParseInt(sec, 10, 64)
		c, err2 := strconv.ParseInt(n, 10, 64)
		if ok && err1 == nil && err2 == nil && s >= now-span && s < now {
			total += c
		}
	}
	return float64(total) / span
}

// take asks the queue's limiter for up to want jobs; with none granted it
// says how long to wait.
func (r *runner) take(ctx context.Context, want int64) (int64, time.Duration, error) {
	res, err := runScript(ctx, r.c.Client, rateScript, []string{r.keys.Rate, r.keys.RateLog},
		r.c.RateLimit.interval(), r.c.RateLimit.burst(), want).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, 0, err
	}
	return res[0], time.Duration(res[1]) * time.Millisecond, nil
}

// giveBack returns jobs granted but not read (the queue had fewer).
func (r *runner) giveBackRate(ctx context.Context, n int64) {
	if n > 0 {
		_ = runScript(ctx, r.c.Client, rateScript, []string{r.keys.Rate, r.keys.RateLog},
			r.c.RateLimit.interval(), r.c.RateLimit.burst(), -n).Err()
	}
}
