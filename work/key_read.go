package work

import (
	"context"
	_ "embed"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed keylua/take.lua
var keyTakeLua string

// keyTakeScript is a holder's read while keys have waiting jobs. Per level,
// high first: it reads the level stream's new entries (jobs without a key,
// as takeScript does); when fewer than asked came, the stream has nothing
// undelivered, and it takes turns over the level's ring for the rest: a key
// popped from the head, when under its cap, has its oldest job moved into
// the stream with a permit for the new entry, and goes back to the tail
// while it has jobs; a key at its cap is skipped (it keeps its place in the
// ring). It then reads the moved entries: exactly those, the script being
// atomic. It looks at most n + 32 keys per level. First it drops the
// permits the holder settled, unless their entries are pending again.
//
// A permit is valid while its entry is pending in the group: a key at its
// cap first drops the permits whose entries are not (settled by a holder
// that died before it dropped them), so a cap never counts a finished job
// for long, and never misses a running one.
//
// An uncapped key's jobs are not read here: they are added after the
// level's read, in the record form, and left undelivered, for the
// holder's plain XREADGROUP (readFed), and whichever holder reads one runs
// it (no permit). In mode "pipe" (no caps, only the normal level in use)
// the script reads nothing: it takes turns only when the normal stream has
// nothing undelivered, and the XREADGROUP sent with it reads the lot.
//
// KEYS[1..3] the high, normal and low streams, KEYS[4..6] their rings,
// KEYS[7] key jobs; ARGV[1] group, ARGV[2] consumer, ARGV[3] most entries
// to read, ARGV[4] the key names' prefix, ARGV[5] the default cap (0: none),
// ARGV[6] a MessagePack array of key, cap strings ("" for none), ARGV[7]
// the mode ("" or "pipe"), then triples of key, level, entry id: permits
// to drop.
// Returns {1 when a ring still holds keys, else 0, then per stream:
// {stream, entries as XREADGROUP gives them, 1 when they hold permits, 0
// when read first (jobs without a key)}, or {stream, entry ids, records, 2}
// (moved with permits, pending), or {stream, n}: n entries fed,
// undelivered}; in mode "pipe", "levels" last when a high or low stream or
// ring exists (nothing done: the caller takes the two steps).
var keyTakeScript = redis.NewScript(keyTakeLua)

// keyAdmitScript decides, for keyed entries read other than by
// keyTakeScript (a due retry or delayed job, a requeued dead letter, a
// give-back, a replay), whether each holds a permit; one that does not is
// parked: its record (its fields, runs made and job id) back in the key
// jobs hash, its job id at the head of its key's list (it waited already;
// those of one key parked by one call keep their order there), the key in
// the ring when its list was empty, then the entry acknowledged and
// deleted. Never run, never an attempt.
//
// KEYS[1..3] the high, normal and low streams, KEYS[4..6] their rings,
// KEYS[7] key jobs; ARGV[1] group, ARGV[2] consumer, ARGV[3] the key names'
// prefix, then per entry: its level (1 high, 2 normal, 3 low), entry id,
// key, job id, runs made. Returns per entry: 1 it holds a permit (run it),
// 0 parked, -1 no longer pending for this consumer (left alone), 2 another
// waiting job holds its job id (nothing written: dead-letter it).
var keyAdmitScript = redis.NewScript(entryLua + `
local names = {'high', 'normal', 'low'}
local out = {}
-- the job ids parked per key list, in entry order, pushed at the end
local park, lists = {}, {}
for i = 4, #ARGV, 5 do
  local li, e, k, job, runs = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local s, lvl = KEYS[li], names[tonumber(ARGV[i])]
  if not pending(s, ARGV[1], e, ARGV[2]) then
    out[#out + 1] = -1
  elseif redis.call('HEXISTS', ARGV[3] .. 'run:' .. k, lvl .. ':' .. e) == 1 then
    out[#out + 1] = 1
  elseif redis.call('HEXISTS', KEYS[7], job) == 1 then
    out[#out + 1] = 2
  else
    local f = fields(s, e, baton) or {}
    put(f, 'attempts', runs)
    put(f, 'orig', job)
    redis.call('HSET', KEYS[7], job, cmsgpack.pack(f))
    local q = ARGV[3] .. 'q:' .. lvl .. ':' .. k
    if not park[q] then
      park[q] = {}
      lists[#lists + 1] = {q, KEYS[3 + li], k}
    end
    table.insert(park[q], job)
    redis.call('XACK', s, ARGV[1], e)
    redis.call('XDEL', s, e)
    out[#out + 1] = 0
  end
end
-- LPUSH of c, b, a (last first) puts a, b, c at the head
for _, l in ipairs(lists) do
  local ids, last = park[l[1]], {}
  for i = #ids, 1, -1 do last[#last + 1] = ids[i] end
  if redis.call('LPUSH', l[1], unpack(last)) == #last then redis.call('RPUSH', l[2], l[3]) end
end
return out
`)

// keyPoll is how often a holder looks again while every waiting key is at
// its cap (sooner when one of its own jobs ends).
const keyPoll = 20 * time.Millisecond

// keyState is the runner's part in keys.
type keyState struct {
	on      atomic.Bool  // keys have waiting jobs: read with keyTakeScript
	pending atomic.Int64 // len(release), read without the lock
	limits  string       // KeyCaps.Limits packed for keyTakeScript; set once
	lost    error        // a failed read of fed jobs, for readNext to report; the reader's own
	levels  atomic.Bool  // a high or low key waited: no reading with the take script (takePiped)

	held    map[entryKey]string // admitted keyed entries → key; guarded by runner.mu
	release []any               // settled permits to drop (key, level, entry); guarded by runner.mu
}

func (r *runner) keyKeys() []string {
	k := r.keys
	return []string{k.High, k.Stream, k.Low, k.KeyRing(PriorityHigh), k.KeyRing(PriorityNormal), k.KeyRing(PriorityLow), k.KeyJobs()}
}

// levelIndex is p's place in keyKeys, from 1.
func levelIndex(p Priority) int {
	switch p {
	case PriorityHigh:
		return 1
	case PriorityLow:
		return 3
	}
	return 2
}

// readNext reads new entries: the plain read while no key waits (nothing
// more than before for a queue without keys), else keyTakeScript.
func (r *runner) readNext(ctx context.Context, n int64) ([]*Job, error) {
	if err := r.kk.lost; err != nil {
		r.kk.lost = nil
		return nil, err
	}
	if !r.kk.on.Load() && r.kk.pending.Load() == 0 {
		return r.readNew(ctx, n)
	}
	jobs, more, err := r.takeKeyed(ctx, n)
	if err != nil || len(jobs) > 0 {
		return jobs, err
	}
	r.kk.on.Store(more)
	if !more {
		// A second read: the lease is asked again (the take's round trip
		// took time), and the block is bounded by what it says.
		if !r.leaseHeld() {
			return nil, nil
		}
		return r.readNew(ctx, n)
	}
	// Every waiting key is at its cap: look again soon, or when a job of
	// this holder ends (its permit then returns).
	select {
	case <-r.space:
	case <-r.stopped:
	case <-time.After(keyPoll):
	}
	return nil, nil
}

// takeKeyed runs keyTakeScript: up to n entries, and whether keys still wait.
func (r *runner) takeKeyed(ctx context.Context, n int64) ([]*Job, bool, error) {
	r.mu.Lock()
	release := r.kk.release
	r.kk.release = nil
	r.kk.pending.Store(0)
	r.mu.Unlock()
	if len(release) == 0 && r.c.KeyCaps.uncapped() && !r.levels.Load() && !r.kk.levels.Load() {
		jobs, more, again, err := r.takePiped(ctx, n)
		if !again {
			return jobs, more, err
		}
	}
	args := append([]any{Group, r.c.Consumer, n, r.keys.keyBase(), r.c.KeyCaps.Default, r.kk.limits, ""}, release...)
	v, err := runScript(ctx, r.c.Client, keyTakeScript, r.keyKeys(), args...).Slice()
	if r.regrouped(ctx, err) {
		v, err = runScript(ctx, r.c.Client, keyTakeScript, r.keyKeys(), args...).Slice()
	}
	if err != nil {
		// The permits are dropped later: by the next call, or when their
		// key is at its cap.
		r.mu.Lock()
		r.kk.release = append(r.kk.release, release...)
		r.kk.pending.Store(int64(len(r.kk.release)))
		r.mu.Unlock()
		return nil, false, err
	}
	if len(v) == 0 {
		return nil, false, nil
	}
	more, _ := v[0].(int64)
	var jobs []*Job
	var fed []fedStream
	for _, s := range v[1:] {
		s, _ := s.([]any)
		if len(s) == 2 {
			name, _ := s[0].(string)
			n, _ := s[1].(int64)
			fed = append(fed, fedStream{name, n})
			continue
		}
		if len(s) == 4 {
			// moved jobs, as their entry ids and records: all admitted
			jobs = append(jobs, r.recordJobs(ctx, s)...)
			continue
		}
		if len(s) != 3 {
			continue
		}
		permits, _ := s[2].(int64) // 1: moved by this call, with permits
		from := len(jobs)
		jobs = append(jobs, r.scriptJobs([]any{s[:2]})...)
		if permits == 1 {
			for _, j := range jobs[from:] {
				j.admitted = j.Key != ""
			}
		}
	}
	more1 := more == 1
	if len(fed) > 0 && !r.leaseHeld() {
		// Lapsed since the script (stopped between the two): the fed jobs
		// stay undelivered for any holder, not pending under the slot's
		// consumer, which its next holder may have replayed already.
		// more: readNext then reads nothing else (it waits on stopped).
		return jobs, true, nil
	}
	if len(fed) > 0 {
		read, err := r.readFed(ctx, fed)
		jobs = append(jobs, read...)
		if err != nil {
			// Left undelivered (any holder's next read takes them), or
			// delivered into a lost reply: pending for this slot, unseen.
			// The reader looks at its own pending entries after an error
			// (read.go): now, or with the next read when jobs came.
			if len(jobs) == 0 {
				return nil, true, err
			}
			r.kk.lost = err
			more1 = true
		}
	}
	return jobs, more1, nil
}

// takePiped is takeKeyed in one round trip, for a holder whose keys have
// no cap while only the normal level is in use: keyTakeScript feeds
// uncapped keys' jobs to the normal stream (only when nothing there is
// undelivered) and the XREADGROUP sent with it reads them, or the jobs
// without a key that came first. again: use takeKeyed's two steps (other
// levels are in use, or the script had to be loaded).
func (r *runner) takePiped(ctx context.Context, n int64) (jobs []*Job, more, again bool, err error) {
	var take *redis.Cmd
	var read *redis.XStreamSliceCmd
	// Each command's own error is looked at below, not the pipeline's.
	_, _ = r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		take = keyTakeScript.EvalSha(ctx, p, r.keyKeys(), Group, r.c.Consumer, n, r.keys.keyBase(), 0, "", "pipe")
		read = p.XReadGroup(ctx, &redis.XReadGroupArgs{
			Group: Group, Consumer: r.c.Consumer, Streams: []string{r.keys.Stream, ">"}, Count: n, Block: -1,
		})
		return nil
	})
	jobs = r.streamJobs(read.Val())
	if err := read.Err(); err != nil && !isRedisNil(err) {
		if isNoGroup(err) {
			return jobs, true, len(jobs) == 0, nil // the two steps make the group
		}
		// what the script fed stays undelivered: any holder's next read
		return jobs, true, false, err
	}
	v, terr := take.Slice()
	if terr != nil {
		// NOSCRIPT: the two steps load it, or, when jobs without a key
		// came, this load (else keys would wait for those to run out)
		if len(jobs) > 0 && isNoScript(terr) {
			_ = keyTakeScript.Load(ctx, r.c.Client).Err()
		}
		return jobs, true, len(jobs) == 0, nil
	}
	if len(v) > 0 {
		m, _ := v[0].(int64)
		more = m == 1
	}
	for _, s := range v[min(1, len(v)):] {
		if s == "levels" {
			// A high or low key waits: its level's stream comes with its
			// first turn (and then readNew reads every level). Till then,
			// the two steps, high first; jobs read here were still next.
			r.kk.levels.Store(true)
			return jobs, true, len(jobs) == 0, nil
		}
	}
	return jobs, more, false, nil
}

// fedStream is a stream keyTakeScript fed, and how many entries.
type fedStream struct {
	name string
	n    int64
}

// readFed reads the entries keyTakeScript fed to the streams (uncapped
// keys' jobs, left undelivered), as many as it fed per stream, without
// blocking: another holder may have read some meanwhile. One round trip.
func (r *runner) readFed(ctx context.Context, fed []fedStream) ([]*Job, error) {
	cmds := make([]*redis.XStreamSliceCmd, len(fed))
	_, err := r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range fed {
			cmds[i] = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: Group, Consumer: r.c.Consumer, Streams: []string{s.name, ">"},
				Count: s.n, Block: -1,
			})
		}
		return nil
	})
	var jobs []*Job
	for _, c := range cmds {
		jobs = append(jobs, r.streamJobs(c.Val())...)
	}
	if isRedisNil(err) {
		err = nil
	}
	return jobs, err
}

// recordJobs makes the jobs keyTakeScript moved into stream s (now pending
// for this consumer) from their entry ids and records, the entries' fields
// as MessagePack (what the script gives back instead of the entries, one
// string each). A record that does not decode (never written by baton) is
// read from its entry instead.
func (r *runner) recordJobs(ctx context.Context, s []any) []*Job {
	name, _ := s[0].(string)
	ids, _ := s[1].([]any)
	recs, _ := s[2].([]any)
	level := r.levelOf(name)
	jobs := make([]*Job, 0, len(ids))
	for i, id := range ids {
		id, _ := id.(string)
		var rec string
		if i < len(recs) {
			rec, _ = recs[i].(string)
		}
		values, ok := decodeRecord(rec)
		if !ok {
			if m, err := r.c.Client.XRange(ctx, name, id, id).Result(); err == nil && len(m) == 1 {
				values = m[0].Values
			}
		}
		j := r.toJob(redis.XMessage{ID: id, Values: values}, 1, level)
		j.admitted = j.Key != ""
		jobs = append(jobs, j)
	}
	return jobs
}

// recordField is where an entry that keyTakeScript adds holds the job's
// fields: its record, packed as it waited (next to orig, which those that
// look for a job's entry read).
const recordField = "record"

// entryValues are an entry's fields, and whether they were packed: an
// entry keyTakeScript added holds them in its record field (the same
// unpacking as entryLua's unpacked). One that does not decode, or whose
// record names another job than its orig (the scripts read the job id
// from orig), is left as it is (no payload: dead-lettered as malformed).
func entryValues(v map[string]any) (map[string]any, bool) {
	if len(v) != 2 { // first: a plain job's entry pays no lookup
		return v, false
	}
	rec, ok := v[recordField].(string)
	orig, _ := v[jobField].(string)
	if !ok || orig == "" {
		return v, false
	}
	d, ok := decodeRecord(rec)
	if !ok || d[jobField] != orig {
		return v, false
	}
	return d, true
}

// decodeRecord decodes a waiting keyed job's record: a MessagePack array
// of field and value strings (appendFields, or cmsgpack.pack of a Lua
// table of strings), as a stream entry's values.
func decodeRecord(rec string) (map[string]any, bool) {
	b := []byte(rec)
	size := func(n int) (int, bool) {
		if len(b) < n {
			return 0, false
		}
		v := 0
		for _, c := range b[:n] {
			v = v<<8 | int(c)
		}
		b = b[n:]
		return v, true
	}
	if len(b) == 0 {
		return nil, false
	}
	n, ok := 0, true
	c := b[0]
	b = b[1:]
	switch {
	case c&0xf0 == 0x90:
		n = int(c & 0x0f)
	case c == 0xdc:
		n, ok = size(2)
	case c == 0xdd:
		n, ok = size(4)
	default:
		ok = false
	}
	if !ok || n%2 != 0 || n > len(b) {
		return nil, false
	}
	values := make(map[string]any, n/2)
	var field string
	for i := range n {
		var l int
		ok := len(b) > 0
		if ok {
			c := b[0]
			b = b[1:]
			switch {
			case c&0xe0 == 0xa0:
				l = int(c & 0x1f)
			case c == 0xd9 || c == 0xc4:
				l, ok = size(1)
			case c == 0xda || c == 0xc5:
				l, ok = size(2)
			case c == 0xdb || c == 0xc6:
				l, ok = size(4)
			default:
				ok = false // not a string: let the entry say
			}
		}
		if !ok || l > len(b) {
			return nil, false
		}
		str := string(b[:l])
		b = b[l:]
		if i%2 == 0 {
			field = str
		} else {
			values[field] = str
		}
	}
	return values, len(b) == 0
}

// admit returns the jobs to dispatch: a keyed entry read without a permit
// is parked in its key's list (keyAdmitScript); the admitted keyed entries
// are remembered, so that their permits are dropped once settled. Jobs
// without a key pass through untouched, with no Redis call.
func (r *runner) admit(ctx context.Context, jobs []*Job) ([]*Job, error) {
	var args []any
	var ask []*Job
	keyed := false
	for _, j := range jobs {
		if j.Key == "" {
			continue
		}
		keyed = true
		if !j.admitted && j.verdict == "" {
			ask = append(ask, j)
			args = append(args, levelIndex(j.Priority), j.Entry, j.Key, j.ID, j.Attempt-1)
		}
	}
	if !keyed {
		return jobs, nil
	}
	if len(ask) > 0 {
		v, err := runScript(ctx, r.c.Client, keyAdmitScript, r.keyKeys(), append([]any{Group, r.c.Consumer, r.keys.keyBase()}, args...)...).Slice()
		if err != nil {
			return nil, err // they stay pending: replayed after the error
		}
		parked := map[*Job]bool{}
		for i, j := range ask {
			switch n, _ := v[i].(int64); n {
			case 1:
				j.admitted = true
			case 2:
				j.verdict, j.problem = ReasonMalformed, "another job waiting for its key holds its job id "+j.ID
				j.ID = j.Entry
			default:
				parked[j] = true
				if n == 0 {
					r.kk.on.Store(true)
				}
			}
		}
		kept := jobs[:0]
		for _, j := range jobs {
			if !parked[j] {
				kept = append(kept, j)
			}
		}
		jobs = kept
	}
	r.mu.Lock()
	for _, j := range jobs {
		if j.admitted && r.c.KeyCaps.of(j.Key) > 0 {
			if r.kk.held == nil {
				r.kk.held = map[entryKey]string{}
			}
			r.kk.held[j.key()] = j.Key
		}
	}
	r.mu.Unlock()
	return jobs, nil
}

// keyForget notes the permit of a settled (or abandoned) entry to drop;
// runner.mu held. keyTakeScript drops it only if the entry is no longer
// pending, so an abandoned entry keeps its permit.
func (r *runner) keyForget(k entryKey) {
	if len(r.kk.held) == 0 {
		return
	}
	if key, ok := r.kk.held[k]; ok {
		delete(r.kk.held, k)
		r.kk.release = append(r.kk.release, key, k.level.String(), k.id)
		r.kk.pending.Store(int64(len(r.kk.release)))
	}
}

// flushKeyPermits drops the permits of jobs settled since the last read,
// as the holder leaves.
func (r *runner) flushKeyPermits() {
	if r.kk.pending.Load() == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, _, err := r.takeKeyed(ctx, 0); err != nil {
		r.c.Logger.Debug().Err(err).Msg("drop settled key permits; their keys drop them when at their cap")
	}
}

// keysSeen is the keeper's view of the rings (one EXISTS in its pipeline).
func (r *runner) keysSeen(n int64) {
	if n > 0 {
		r.kk.on.Store(true)
	}
}

// packLimits packs caps for keyTakeScript.
func packLimits(l map[string]int) string {
	if len(l) == 0 {
		return ""
	}
	b := appendArrayHeader(nil, 2*len(l))
	for k, n := range l {
		b = appendPackedString(b, k)
		b = appendPackedString(b, strconv.Itoa(n))
	}
	return string(b)
}
