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
// "theoretical arrival time" of the next job, in microseconds.
//
// KEYS[1] rate key; ARGV[1] interval (µs per job), ARGV[2] burst, ARGV[3]
// jobs wanted (a negative count gives unused ones back).
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
return {grant, 0}
`)

// take asks the queue's limiter for up to want jobs; with none granted it
// says how long to wait.
func (r *runner) take(ctx context.Context, want int64) (int64, time.Duration, error) {
	res, err := runScript(ctx, r.c.Client, rateScript, []string{r.keys.Rate},
		r.c.RateLimit.interval(), r.c.RateLimit.burst(), want).Int64Slice()
	if err != nil || len(res) != 2 {
		return 0, 0, err
	}
	return res[0], time.Duration(res[1]) * time.Millisecond, nil
}

// giveBack returns jobs granted but not read (the queue had fewer).
func (r *runner) giveBackRate(ctx context.Context, n int64) {
	if n > 0 {
		_ = runScript(ctx, r.c.Client, rateScript, []string{r.keys.Rate},
			r.c.RateLimit.interval(), r.c.RateLimit.burst(), -n).Err()
	}
}
