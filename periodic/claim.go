package periodic

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/script"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// RecordsKey is the hash of a queue's periodic records, under the queue's
// hash tag: per entry name, the last tick claimed (unix ms); "<name>:job"
// the id of the last job enqueued and "<name>:enqueued" its tick (unix ms);
// "<name>:count:<outcome>" the ticks enqueued, missed and skipped, all
// time. The last claimed tick only moves forward.
func RecordsKey(queue string) string { return work.KeysFor(queue).Stream + ":periodic" }

// HostsKey is the hash of the entries' fingerprint each host's holders run
// with: host → "<fingerprint> <unix ms on Redis' clock>".
func HostsKey(queue string) string { return RecordsKey(queue) + ":hosts" }

// Fingerprint is a short digest of entries (checked by Check), the same
// for the same entries in any order.
func Fingerprint(entries []Entry) string {
	lines := make([]string, 0, len(entries))
	for _, e := range entries {
		line := fmt.Sprintf("%q %q %x %d %d %d %q %d %q", e.Name, e.Schedule, e.Payload, e.Priority, e.Timeout, e.MaxAttempts, e.CatchUp, e.CatchUpMax, e.Overlap)
		if e.Key != "" { // only then: entries without a key keep their fingerprint
			line += fmt.Sprintf(" key %q", e.Key)
		}
		lines = append(lines, line)
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:6])
}

// claimLua claims ticks of every entry given, each at most once, and
// enqueues their jobs exactly as work.Enqueue would: a normal job is one
// XADD to the stream (its id is its entry's); a job of another level takes
// its id from the normal stream's id space (an entry added and deleted) and
// goes to its level's stream with that id in "orig", the level's stream and
// group created first when missing. The job's fields are the entry's, plus
// "tick" (RFC 3339) and "periodic" (the entry's name).
//
// A tick is claimed only when it is not after Redis' clock (TIME) and after
// the entry's last claimed tick; the record moves to it in the same script,
// so a second claimant, a stale one or a replay of the same call after a
// lost reply finds the record and adds nothing. A tick with mode "o" that is
// later than ARGV[1] ms moves the record without a job (missed); so does
// one with mode "n" (a new entry's first tick: recorded, not missed). Each
// outcome that moves the record, but a new entry's, is counted
// ("<name>:count:<outcome>"). An
// entry with a unique key (overlap = "skip") skips a tick, moving the
// record without a job, while its key names a job; else its job takes the key, as Enqueue's UniqueKey does (the job's
// fields carry it, and settling the job frees it). Keys' types are checked
// before the first write: a wrong one fails the call and writes nothing.
// The fenced form (work.FencedScript) refuses the whole call unless the
// caller's lease still carries its token.
//
// Every few rounds a holder also notes, in KEYS[5], its host's entries'
// fingerprint and Redis' time, so that status can say when hosts disagree.
//
// KEYS[1] the records (hash), KEYS[2] the stream, KEYS[3] the high stream,
// KEYS[4] the low stream, KEYS[5] the hosts' fingerprints (hash: host →
// "<fingerprint> <unix ms>"), KEYS[6..] the unique keys of the entries that
// have one; ARGV[1] Late (ms); ARGV[2] the number of entries; ARGV[3] the
// host; ARGV[4] its entries' fingerprint ("": do not note it); then per
// entry: its name; its level ("normal", "high" or "low"); the index in KEYS
// of its unique key ("0": none); nf and nf field/value strings of its jobs;
// nc and nc claims, oldest first, each three strings: the tick (unix ms),
// the tick (RFC 3339), the mode ("e": enqueue however late, "o": only
// within ARGV[1], "n": the same, for a new entry). Returns {Redis' time (unix ms), then per entry {its last
// claimed tick (unix ms) or "", its last job's id or "", then one outcome
// per claim: "+<job id>" enqueued, "=" already claimed, "-" too late
// (record moved, no job), "." a new entry's tick too late (record moved,
// no job, not counted), "~" skipped for overlap (record moved, no job),
// ">" not due yet}}.
const claimLua = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local late = tonumber(ARGV[1])
local out = {now}
if ARGV[4] ~= '' then
  local ty = redis.call('TYPE', KEYS[5])['ok']
  if ty ~= 'none' and ty ~= 'hash' then
    return redis.error_reply('WRONGTYPE ' .. KEYS[5] .. ' holds a ' .. ty .. ', not a hash')
  end
  redis.call('HSET', KEYS[5], ARGV[3], ARGV[4] .. ' ' .. now)
end
local checked = false
local function check()
  if checked then return end
  checked = true
  for k, want in pairs({[KEYS[1]] = 'hash', [KEYS[2]] = 'stream', [KEYS[3]] = 'stream', [KEYS[4]] = 'stream'}) do
    local ty = redis.call('TYPE', k)['ok']
    if ty ~= 'none' and ty ~= want then
      error({err = 'WRONGTYPE ' .. k .. ' holds a ' .. ty .. ', not a ' .. want})
    end
  end
  for k = 6, #KEYS do
    local ty = redis.call('TYPE', KEYS[k])['ok']
    if ty ~= 'none' and ty ~= 'string' then
      error({err = 'WRONGTYPE ' .. KEYS[k] .. ' holds a ' .. ty .. ', not a string'})
    end
  end
end
local function enqueue(level, fields)
  if level == 'normal' then
    return redis.call('XADD', KEYS[2], '*', unpack(fields))
  end
  local to = KEYS[3]
  if level == 'low' then to = KEYS[4] end
  if redis.call('EXISTS', to) == 0 then
    redis.call('XGROUP', 'CREATE', to, '` + work.Group + `', '0', 'MKSTREAM')
  end
  local id = redis.call('XADD', KEYS[2], '*', 'orig', '')
  redis.call('XDEL', KEYS[2], id)
  redis.call('XADD', to, '*', 'orig', id, unpack(fields))
  return id
end
local i = 5
for _ = 1, tonumber(ARGV[2]) do
  local name, level, uk, nf = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
  local fields = {}
  for f = 1, nf do fields[f] = ARGV[i + 3 + f] end
  i = i + 4 + nf
  local nc = tonumber(ARGV[i])
  i = i + 1
  local recs = redis.call('HGET', KEYS[1], name) or ''
  local rec = tonumber(recs)
  local res = {}
  for _ = 1, nc do
    local ticks, text, mode = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local tick = tonumber(ticks)
    i = i + 3
    if tick > now then
      res[#res + 1] = '>'
    elseif rec and rec >= tick then
      res[#res + 1] = '='
    else
      check()
      if mode == 'n' and now - tick > late then
        redis.call('HSET', KEYS[1], name, ticks)
        res[#res + 1] = '.'
      elseif mode == 'o' and now - tick > late then
        redis.call('HSET', KEYS[1], name, ticks)
        redis.call('HINCRBY', KEYS[1], name .. ':count:missed', 1)
        res[#res + 1] = '-'
      elseif uk > 0 and redis.call('GET', KEYS[uk]) then
        redis.call('HSET', KEYS[1], name, ticks)
        redis.call('HINCRBY', KEYS[1], name .. ':count:skipped', 1)
        res[#res + 1] = '~'
      else
        local f = {unpack(fields)}
        f[#f + 1] = 'tick'
        f[#f + 1] = text
        f[#f + 1] = 'periodic'
        f[#f + 1] = name
        local id = enqueue(level, f)
        if uk > 0 then redis.call('SET', KEYS[uk], id) end
        redis.call('HSET', KEYS[1], name, ticks, name .. ':job', id, name .. ':enqueued', ticks)
        redis.call('HINCRBY', KEYS[1], name .. ':count:enqueued', 1)
        res[#res + 1] = '+' .. id
      end
      rec, recs = tick, ticks
    end
  end
  out[#out + 1] = {recs, redis.call('HGET', KEYS[1], name .. ':job') or '', unpack(res)}
end
return out
`

var (
	claimScript  = redis.NewScript(claimLua)
	fencedScript = work.FencedScript(claimLua)
)

// Client is what the package needs of a go-redis client (a *redis.Client,
// a failover or a cluster client).
type Client interface {
	redis.Cmdable
	redis.Scripter
}

// Outcome kinds of a claim.
const (
	Enqueued = "enqueued" // this call claimed the tick and enqueued its job
	Claimed  = "claimed"  // the tick was already claimed (by anyone): nothing done
	Missed   = "missed"   // claimed too late for its policy: recorded, no job
	Recorded = "recorded" // a new entry's first tick, too late: recorded, no job, not counted (it fires from its next tick)
	Skipped  = "skipped"  // overlap = "skip" and the previous job still queued: recorded, no job, counted
	NotYet   = "not_yet"  // after Redis' clock: nothing done
)

// Outcome is what one claim did.
type Outcome struct {
	Entry string
	Tick  time.Time
	Kind  string // Enqueued, Claimed, Missed, Recorded, Skipped or NotYet
	Job   string // the job's id when Enqueued
}

// entryState is one entry as a claimer keeps it; owned by the claimer's
// goroutine.
type entryState struct {
	Entry
	sched  *Schedule
	level  string
	fields []string
	unique int       // its unique key's index in KEYS (1-based), 0: none
	known  bool      // last was read from Redis at least once
	last   time.Time // last claimed tick, zero: no record
	job    string    // last job enqueued
}

// Claimer claims the ticks of a queue's entries. Not safe for concurrent
// use: one goroutine owns it.
type Claimer struct {
	rdb     Client
	keys    []string
	fence   *work.Fence
	entries []*entryState
	offset  time.Duration // Redis' clock minus ours, at the last reply
	host    string
	print   string // the entries' Fingerprint
	rounds  int    // rounds that succeeded
}

// printEvery is how often, in rounds, a claimer notes its fingerprint.
const printEvery = 10

// NewClaimer returns a claimer for queue q's entries (already checked by
// Check) on host (named in the fingerprints status compares). With fence set (fleet mode), every call is refused once the lease
// no longer carries its token.
func NewClaimer(rdb Client, q, host string, entries []Entry, fence *work.Fence) (*Claimer, error) {
	k := work.KeysFor(q)
	c := &Claimer{rdb: rdb, keys: []string{RecordsKey(q), k.Stream, k.High, k.Low, HostsKey(q)}, fence: fence, host: host, print: Fingerprint(entries)}
	for _, e := range entries {
		s, err := parseSchedule(e.Schedule)
		if err != nil {
			return nil, fmt.Errorf("periodic entry %q: schedule: %w", e.Name, err)
		}
		var opts []work.Option
		if e.MaxAttempts > 0 {
			opts = append(opts, work.MaxAttempts(e.MaxAttempts))
		}
		if e.Timeout > 0 {
			opts = append(opts, work.Timeout(e.Timeout))
		}
		opts = append(opts, work.WithPriority(e.Priority))
		if e.Key != "" {
			opts = append(opts, work.Key(e.Key))
		}
		unique := 0
		if e.Overlap == OverlapSkip {
			opts = append(opts, work.UniqueKey(UniqueKey(e.Name)))
			c.keys = append(c.keys, work.KeysFor(q).Unique(UniqueKey(e.Name)))
			unique = len(c.keys)
		}
		f, level, err := work.EntryFields(e.Payload, opts...)
		if err != nil {
			return nil, fmt.Errorf("periodic entry %q: %w", e.Name, err)
		}
		if e.CatchUpMax < 1 {
			e.CatchUpMax = DefaultCatchUpMax
		}
		c.entries = append(c.entries, &entryState{Entry: e, sched: s, level: level.String(), fields: f, unique: unique})
	}
	return c, nil
}

// Now is the time on Redis' clock as of the last reply.
func (c *Claimer) Now() time.Time { return time.Now().Add(c.offset) }

// Round makes one call for every entry: it claims the ticks due by Redis'
// clock (as estimated from the last reply) after each entry's last claimed
// tick, and reads every record. An entry whose record was never read only
// reads it: its ticks are claimed from the next round on. An error leaves
// the claimer as it was: a call whose reply was lost is made again, and
// finds its ticks claimed.
func (c *Claimer) Round(ctx context.Context) ([]Outcome, error) {
	now := c.Now()
	print := ""
	if c.rounds%printEvery == 0 {
		print = c.print
	}
	args := []any{Late.Milliseconds(), len(c.entries), c.host, print}
	claims := make([][]tickClaim, len(c.entries))
	for n, e := range c.entries {
		if e.known {
			claims[n] = due(e.sched, e.CatchUp, e.CatchUpMax, e.last, now)
		}
		args = append(args, e.Name, e.level, e.unique, len(e.fields))
		for _, f := range e.fields {
			args = append(args, f)
		}
		args = append(args, len(claims[n]))
		for _, t := range claims[n] {
			args = append(args, t.at.UnixMilli(), t.at.Format(time.RFC3339), t.mode)
		}
	}
	keys, s := c.keys, claimScript
	if c.fence != nil {
		keys, s = append(append([]string(nil), keys...), c.fence.Key), fencedScript
		args = append(args, c.fence.Token)
	}
	sent := time.Now()
	res, err := script.Run(ctx, c.rdb, s, keys, args...).Slice()
	if err != nil {
		if work.IsFenced(err) {
			return nil, fmt.Errorf("claim periodic ticks: %w", work.ErrFenced)
		}
		return nil, fmt.Errorf("claim periodic ticks: %w", err)
	}
	if len(res) != len(c.entries)+1 {
		return nil, fmt.Errorf("claim periodic ticks: %d replies for %d entries", len(res)-1, len(c.entries))
	}
	back := time.Now()
	c.rounds++
	redisNow, _ := res[0].(int64)
	c.offset = time.UnixMilli(redisNow).Sub(sent.Add(back.Sub(sent) / 2))
	var out []Outcome
	for n, e := range c.entries {
		r, _ := res[n+1].([]any)
		if len(r) < 2 {
			return out, fmt.Errorf("claim periodic ticks: entry %q: short reply", e.Name)
		}
		rec, _ := r[0].(string)
		e.known, e.last = true, time.Time{}
		if ms, err := strconv.ParseInt(rec, 10, 64); err == nil {
			e.last = time.UnixMilli(ms).In(e.sched.loc)
		}
		e.job, _ = r[1].(string)
		for i, t := range claims[n] {
			o := Outcome{Entry: e.Name, Tick: t.at}
			v := ""
			if i+2 < len(r) {
				v, _ = r[i+2].(string)
			}
			switch {
			case strings.HasPrefix(v, "+"):
				o.Kind, o.Job = Enqueued, v[1:]
			case v == "=":
				o.Kind = Claimed
			case v == "-":
				o.Kind = Missed
			case v == ".":
				o.Kind = Recorded
			case v == "~":
				o.Kind = Skipped
			default:
				o.Kind = NotYet
			}
			out = append(out, o)
		}
	}
	return out, nil
}
