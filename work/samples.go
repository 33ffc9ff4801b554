package work

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// SamplesKept is how many per-minute samples of the stats hash a queue
// keeps (baton:{q}:stats:minutes): an hour and a half, so that a chart of
// the last hour has a sample before its first minute.
const SamplesKept = 90

// SamplesKey is the list of per-minute samples of queue q's stats hash,
// newest first, under the queue's hash tag.
func SamplesKey(q string) string { return KeysFor(q).Stats + ":minutes" }

// sampleScript appends one sample of the stats hash per minute of Redis's
// clock, however many holders call it in that minute.
//
// KEYS[1] the stats hash, KEYS[2] the samples list; ARGV[1] samples kept.
// Each sample is {"t":<unix second of the minute>,"s":{field:"count",...}},
// counts as strings (Lua numbers are doubles). Returns 1 when it appended,
// 0 when this minute already has its sample.
var sampleScript = redis.NewScript(`
local now = redis.call('TIME')
local minute = tonumber(now[1]) - tonumber(now[1]) % 60
local head = redis.call('LINDEX', KEYS[2], 0)
if head then
  local t = tonumber(string.match(head, '^{"t":(%d+)'))
  if t and t >= minute then return 0 end
end
local s = redis.call('HGETALL', KEYS[1])
local m = {}
for i = 1, #s, 2 do m[s[i]] = s[i + 1] end
local body = '{}'
if #s > 0 then body = cjson.encode(m) end
redis.call('LPUSH', KEYS[2], '{"t":' .. minute .. ',"s":' .. body .. '}')
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[1]) - 1)
return 1
`)

// SampleStats appends this minute's sample of q's stats hash unless a
// holder already did: one script call, made once a minute by each holder
// (StartSampling), never per job. It reports whether it appended.
func SampleStats(ctx context.Context, rdb redis.Scripter, q string) (bool, error) {
	k := KeysFor(q)
	n, err := runScript(ctx, rdb, sampleScript, []string{k.Stats, SamplesKey(q)}, SamplesKept).Int()
	if err != nil {
		return false, fmt.Errorf("sample stats: %w", err)
	}
	return n == 1, nil
}

// StartSampling calls SampleStats each time the minute of the local clock
// changes (checked every second), in a goroutine that the returned func
// stops. stop waits for it at most stopWait: a call in flight to a Redis
// that does not answer ends only at the client's read timeout (go-redis
// ignores the context unless ContextTimeoutEnabled), and must not delay a
// holder's exit. onErr hears each failure (the caller logs it once); a
// failed minute is tried again the next second.
func StartSampling(rdb redis.Scripter, q string, onErr func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		last := int64(-1)
		for {
			if m := time.Now().Unix() / 60; m != last {
				cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := SampleStats(cctx, rdb, q)
				ccancel()
				if err == nil {
					last = m
				} else if onErr != nil && ctx.Err() == nil {
					onErr(err)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(stopWait):
		}
	}
}

// stopWait bounds how long stopping the sampler waits for a call in flight.
const stopWait = 200 * time.Millisecond

// Sample is the stats hash of a queue (the Stat* totals) at one minute.
type Sample struct {
	At    time.Time
	Stats map[string]int64
}

// ReadSamples returns q's samples, oldest first; malformed ones are left out.
func ReadSamples(ctx context.Context, rdb redis.Cmdable, q string) ([]Sample, error) {
	raw, err := rdb.LRange(ctx, SamplesKey(q), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read stats samples: %w", err)
	}
	out := make([]Sample, 0, len(raw))
	for _, r := range raw {
		var v struct {
			T int64             `json:"t"`
			S map[string]string `json:"s"`
		}
		if json.Unmarshal([]byte(r), &v) != nil {
			continue
		}
		s := Sample{At: time.Unix(v.T, 0), Stats: make(map[string]int64, len(v.S))}
		for f, c := range v.S {
			s.Stats[f], _ = strconv.ParseInt(c, 10, 64)
		}
		out = append(out, s)
	}
	slices.Reverse(out)
	return out, nil
}
