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
// moved from the head to the tail, whose stream has undelivered jobs, gives
// up to a quantum of them (deficit round robin), and leaves the ring when
// it has none. A capped key's jobs are read here, atomically with the count
// of its running jobs (its stream's pending entries): at most its cap, and a
// key at its cap is passed over, keeping its place. An uncapped key's
// stream is named in the reply instead, with how many to read: the holder
// reads those next with one plain XREADGROUP (readFed). It looks at most
// n + 32 keys per level. First it drops the index entries of the jobs the
// holder settled (keyForget), unless they name a newer entry of the job.
//
// In mode "pipe" (no caps, only the normal level in use) the script reads
// nothing: it takes turns only when the normal stream has nothing
// undelivered, and the XREADGROUP sent with it reads the jobs without a key.
//
// KEYS[1..3] the high, normal and low streams, KEYS[4..6] their rings,
// KEYS[7] the key jobs index; ARGV[1] group, ARGV[2] consumer, ARGV[3] most
// entries to read, ARGV[4] the key names' prefix, ARGV[5] the default cap
// (0: none), ARGV[6] a MessagePack array of key, cap strings ("" for none),
// ARGV[7] the mode ("" or "pipe"), then pairs of job id, entry id: index
// entries to drop.
// Returns {1 when a ring still holds keys, else 0, then per stream read:
// {stream, entries as XREADGROUP gives them}, then maybe {"feed", {stream,
// count, stream, count, …}}: uncapped keys' streams to read}; in mode
// "pipe", "levels" last when a high or low stream or ring exists (nothing
// done: the caller takes the two steps).
var keyTakeScript = redis.NewScript(keyStreamLua + keyTakeLua)

// keyParkScript parks keyed entries read from a level stream (a due retry
// or delayed job, a requeued dead letter, a give-back): each goes to the
// tail of its key's stream, with its runs made and its job id, its key in
// the ring when it was not, the job's index entry naming it; then the
// level stream's entry is acknowledged and deleted. Never run, never an
// attempt: it runs at its key's turn.
//
// KEYS[1..3] the high, normal and low streams, KEYS[4] the key jobs index;
// ARGV[1] group, ARGV[2] consumer, ARGV[3] the key names' prefix, then per
// entry: its level (1 high, 2 normal, 3 low), entry id, key, job id, runs
// made. Returns per entry: 0 parked, -1 no longer pending for this
// consumer (left alone), 2 another waiting job holds its job id (nothing
// written: dead-letter it).
var keyParkScript = redis.NewScript(keyParkLua)

const keyParkLua = entryLua + `
local names = {'high', 'normal', 'low'}
local out = {}
for i = 4, #ARGV, 5 do
  local li, e, k, job, runs = tonumber(ARGV[i]), ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local s, lvl = KEYS[li], names[li]
  local held = redis.call('HGET', KEYS[4], job)
  if held then
    -- stale when its entry is gone (settled, its index entry not yet
    -- dropped by its holder): only a live one is another job's
    local he, hl, hk = string.match(held, '^([^\n]*)\n([^\n]*)\n(.*)$')
    if he and #redis.call('XRANGE', ARGV[3] .. 's:' .. hl .. ':' .. hk, he, he) == 0 then held = nil end
  end
  if not pending(s, ARGV[1], e, ARGV[2]) then
    out[#out + 1] = -1
  elseif held then
    out[#out + 1] = 2
  else
    local f = fields(s, e, baton) or {}
    put(f, 'attempts', runs)
    put(f, 'orig', job)
    local ks = ARGV[3] .. 's:' .. lvl .. ':' .. k
    if redis.call('EXISTS', ks) == 0 then
      redis.call('XGROUP', 'CREATE', ks, ARGV[1], '0', 'MKSTREAM')
      redis.call('SADD', ARGV[3] .. 'streams', ks)
    end
    local ne = redis.call('XADD', ks, '*', unpack(f))
    redis.call('HSET', KEYS[4], job, ne .. '\n' .. lvl .. '\n' .. k)
    if redis.call('SADD', ARGV[3] .. 'in:' .. lvl, k) == 1 then
      redis.call('RPUSH', ARGV[3] .. 'ring:' .. lvl, k)
    end
    redis.call('XACK', s, ARGV[1], e)
    redis.call('XDEL', s, e)
    out[#out + 1] = 0
  end
end
return out
`

// keyPoll is how often a holder looks again while every waiting key is at
// its cap (sooner when one of its own jobs ends).
const keyPoll = 20 * time.Millisecond

// keyState is the runner's part in keys.
type keyState struct {
	on      atomic.Bool  // keys have waiting jobs: read with keyTakeScript
	pending atomic.Int64 // len(drop), read without the lock
	limits  string       // KeyCaps.Limits packed for keyTakeScript; set once
	lost    error        // a failed read of fed jobs, for readNext to report; the reader's own
	levels  atomic.Bool  // a high or low key waited: no reading with the take script (takePiped)
	plan    []any        // the key streams the last take named, for takePiped's next read; the reader's own

	held map[entryKey]string // entries read from key streams → job id; guarded by runner.mu
	drop []any               // index entries to drop (job id, entry id); guarded by runner.mu
}

// keyDropMost is the most index entries one take call drops.
const keyDropMost = 1000

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

// takeDrops takes the index entries to drop with the next take call.
func (r *runner) takeDrops() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.kk.drop
	if len(d) > 2*keyDropMost {
		d, r.kk.drop = d[:2*keyDropMost], d[2*keyDropMost:]
	} else {
		r.kk.drop = nil
	}
	r.kk.pending.Store(int64(len(r.kk.drop)))
	return d
}

// undrop gives back index entries a failed take call did not drop.
func (r *runner) undrop(d []any) {
	r.mu.Lock()
	r.kk.drop = append(r.kk.drop, d...)
	r.kk.pending.Store(int64(len(r.kk.drop)))
	r.mu.Unlock()
}

// takeKeyed runs keyTakeScript: up to n entries, and whether keys still wait.
func (r *runner) takeKeyed(ctx context.Context, n int64) ([]*Job, bool, error) {
	drop := r.takeDrops()
	if len(drop) == 0 && r.c.KeyCaps.uncapped() && !r.levels.Load() && !r.kk.levels.Load() {
		jobs, more, again, err := r.takePiped(ctx, n)
		if !again {
			return jobs, more, err
		}
	}
	r.kk.plan = nil // read with takePiped's next take, which this replaces
	args := append([]any{Group, r.c.Consumer, n, r.keys.keyBase(), r.c.KeyCaps.Default, r.kk.limits, ""}, drop...)
	v, err := r.write(ctx, keyTakeScript, r.keyKeys(), args...).Slice()
	if r.regrouped(ctx, err) {
		v, err = r.write(ctx, keyTakeScript, r.keyKeys(), args...).Slice()
	}
	if IsFenced(err) {
		// Redis says the lease is another's: read nothing more, as when
		// the holder's own clock says so (the index entries stay: they
		// name settled entries, which readers treat as gone).
		r.lapsed()
		return nil, true, nil
	}
	if err != nil {
		r.undrop(drop) // by the next call
		return nil, false, err
	}
	if len(v) == 0 {
		return nil, false, nil
	}
	more, _ := v[0].(int64)
	var read []any
	var fed []any
	for _, s := range v[1:] {
		s, _ := s.([]any)
		if len(s) == 2 && s[0] == "feed" {
			fed, _ = s[1].([]any)
			continue
		}
		read = append(read, s)
	}
	jobs := r.scriptJobs(read)
	return r.thenFed(ctx, jobs, fed, more == 1)
}

// thenFed reads the uncapped keys' streams a take named (fed: pairs of
// stream, count) after the jobs it read itself.
func (r *runner) thenFed(ctx context.Context, jobs []*Job, fed []any, more bool) ([]*Job, bool, error) {
	if len(fed) == 0 {
		return jobs, more, nil
	}
	if !r.leaseHeld() {
		// Lapsed since the script (stopped between the two): the fed jobs
		// stay undelivered for any holder, not pending under the slot's
		// consumer, which its next holder may have replayed already.
		// more: readNext then reads nothing else (it waits on stopped).
		return jobs, true, nil
	}
	read, err := r.readFed(ctx, fed)
	jobs = append(jobs, read...)
	if err != nil {
		// Left undelivered (the key keeps its place in the ring), or
		// delivered into a lost reply: pending for this slot, unseen.
		// The reader looks at its own pending entries after an error
		// (read.go): now, or with the next read when jobs came.
		if len(jobs) == 0 {
			return nil, true, err
		}
		r.kk.lost = err
		more = true
	}
	return jobs, more, nil
}

// takePiped is takeKeyed for a holder whose keys have no cap while only
// the normal level is in use: the XREADGROUP sent with keyTakeScript reads
// the jobs without a key, and the script takes turns only when there are
// none. A large read (fast jobs: planAhead or more) sends with them the
// read of the key streams the last take named, and keeps what this take
// names for the next: one round trip a read, the turns a read behind. A
// small read (or one that brought nothing) reads them at once: two.
// again: use takeKeyed's two steps (other levels are in use, or the
// script had to be loaded).
func (r *runner) takePiped(ctx context.Context, n int64) (jobs []*Job, more, again bool, err error) {
	var plan, rest []any
	if n >= planAhead {
		plan, rest = fedPrefix(r.kk.plan, n)
	}
	r.kk.plan = nil
	for sweeps, tries := 0, 0; ; {
		var named []any
		// The turns name no more than fits beside the rest: a plan that
		// grew with every read smaller than the last would name keys
		// further and further behind their turn.
		jobs, named, more, again, err = r.takePipedOnce(ctx, n, n-fedCount(rest), plan)
		if err != nil || again {
			return jobs, more, again, err
		}
		// what did not fit this read first: their turn came first
		next := append(append([]any(nil), rest...), named...)
		switch {
		case len(next) == 0 && (len(jobs) > 0 || !more || sweeps >= sweepMost):
			return jobs, more, false, nil
		case len(next) == 0:
			// Every key the turns looked at had nothing waiting, and left
			// its ring (at most n + 32 a call): a drain's tail, where each
			// key drained comes round once more. Look further at once, not
			// after keyPoll: keys still waiting may be behind them.
			if !r.leaseHeld() {
				return nil, true, false, nil
			}
			// What it names next is read at once again (tries): the
			// keys a read found empty were another's, not these.
			sweeps, tries = sweeps+1, 0
			plan, rest = nil, nil
			continue
		case n < planAhead:
			jobs, more, err = r.thenFed(ctx, jobs, named, more)
			return jobs, more, false, err
		case len(jobs) > 0 || tries > 0:
			r.kk.plan = next
			return jobs, true, false, nil
		}
		// Nothing came (the first read of a run of turns, or what was
		// planned is gone): read what is planned now, with the next take.
		if !r.leaseHeld() {
			return nil, true, false, nil
		}
		tries++
		plan, rest = fedPrefix(next, n)
	}
}

// takePipedOnce is one round trip of takePiped: the take script (turns for
// up to turns jobs), the read of the normal stream, and the read of the
// key streams in plan. named is what this take names for the next read.
func (r *runner) takePipedOnce(ctx context.Context, n, turns int64, plan []any) (jobs []*Job, named []any, more, again bool, err error) {
	var take *redis.Cmd
	var read *redis.XStreamSliceCmd
	var fedReads []fedRead
	normal := n - fedCount(plan)
	// Each command's own error is looked at below, not the pipeline's.
	script, keys, args := r.fencedCall(keyTakeScript, r.keyKeys(), []any{Group, r.c.Consumer, max(turns, 0), r.keys.keyBase(), 0, "", "pipe"})
	_, _ = r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		take = script.EvalSha(ctx, p, keys, args...)
		if normal > 0 { // COUNT 0 would be all of them
			read = p.XReadGroup(ctx, &redis.XReadGroupArgs{
				Group: Group, Consumer: r.c.Consumer, Streams: []string{r.keys.Stream, ">"}, Count: normal, Block: -1,
			})
		}
		fedReads = r.queueFed(ctx, p, plan)
		return nil
	})
	if read != nil {
		jobs = r.streamJobs(read.Val())
		if err := read.Err(); err != nil && !isRedisNil(err) {
			if isNoGroup(err) {
				return jobs, nil, true, len(jobs) == 0, nil // the two steps make the group
			}
			return jobs, nil, true, false, err
		}
	}
	v, terr := take.Slice()
	if IsFenced(terr) {
		// What the reads brought stays pending for the slot's next holder;
		// nothing more is read (fedJobs' second round trip).
		r.lapsed()
		return nil, nil, true, false, nil
	}
	fed, ferr := r.fedJobs(ctx, fedReads)
	jobs = append(jobs, fed...)
	if ferr != nil {
		// As thenFed: pending for this slot and unseen, or undelivered.
		if len(jobs) == 0 {
			return nil, nil, true, false, ferr
		}
		r.kk.lost = ferr
	}
	if terr != nil {
		// NOSCRIPT: the two steps load it, or, when jobs came, this load
		// (else keys would wait for those to run out)
		if len(jobs) > 0 && isNoScript(terr) {
			_ = script.Load(ctx, r.c.Client).Err()
		}
		return jobs, nil, true, len(jobs) == 0, nil
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
			return jobs, nil, true, len(jobs) == 0, nil
		}
		if s, _ := s.([]any); len(s) == 2 && s[0] == "feed" {
			named, _ = s[1].([]any)
		}
	}
	return jobs, named, more, false, nil
}

// sweepMost is the most take calls of one read that find only keys with
// nothing waiting, each of which leaves its ring: past it the read waits
// keyPoll.
const sweepMost = 64

// planAhead is the smallest read whose key streams are read with the next
// take (takePiped): a holder that reads this many at once runs fast jobs,
// for which a round trip counts; a smaller read's jobs wait for no turn.
const planAhead = 32

// fedCount is how many jobs fed (pairs of stream, count) asks for.
func fedCount(fed []any) int64 {
	var n int64
	for i := 1; i < len(fed); i += 2 {
		c, _ := fed[i].(int64)
		n += c
	}
	return n
}

// fedPrefix splits fed into the streams that fit in a read of n and the
// rest (a plan made for a larger read), which the next read takes first.
func fedPrefix(fed []any, n int64) (fit, rest []any) {
	var sum int64
	for i := 1; i < len(fed); i += 2 {
		c, _ := fed[i].(int64)
		if sum+c > n {
			return fed[:i-1], fed[i-1:]
		}
		sum += c
	}
	return fed, nil
}

// readFed reads the uncapped keys' streams keyTakeScript named (pairs of
// stream, count), without blocking, in one round trip. Another holder may
// have read some meanwhile.
func (r *runner) readFed(ctx context.Context, fed []any) ([]*Job, error) {
	var reads []fedRead
	_, _ = r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		reads = r.queueFed(ctx, p, fed)
		return nil
	})
	return r.fedJobs(ctx, reads)
}

// fedRead is one XREADGROUP of key streams queueFed queued.
type fedRead struct {
	cmd     *redis.XStreamSliceCmd
	streams []string
	count   int64
}

// queueFed queues on p the reads of the key streams in fed (pairs of
// stream, count): one XREADGROUP per count (a turn's count is its quantum
// but for the last keys).
func (r *runner) queueFed(ctx context.Context, p redis.Pipeliner, fed []any) []fedRead {
	var counts []int64
	streams := map[int64][]string{}
	for i := 0; i+1 < len(fed); i += 2 {
		s, _ := fed[i].(string)
		n, _ := fed[i+1].(int64)
		if s == "" || n <= 0 {
			continue
		}
		if _, ok := streams[n]; !ok {
			counts = append(counts, n)
		}
		streams[n] = append(streams[n], s)
	}
	reads := make([]fedRead, len(counts))
	for i, n := range counts {
		reads[i] = fedRead{cmd: r.queueRead(ctx, p, streams[n], n), streams: streams[n], count: n}
	}
	return reads
}

// queueRead queues on p one XREADGROUP of count from each of streams.
func (r *runner) queueRead(ctx context.Context, p redis.Pipeliner, streams []string, count int64) *redis.XStreamSliceCmd {
	names := append(make([]string, 0, 2*len(streams)), streams...)
	for range streams {
		names = append(names, ">")
	}
	return p.XReadGroup(ctx, &redis.XReadGroupArgs{Group: Group, Consumer: r.c.Consumer, Streams: names, Count: count, Block: -1})
}

// fedJobs are the jobs the reads queueFed queued brought. A read that
// names a key stream deleted since (its jobs all settled, by another
// holder that read them meanwhile: NOGROUP) reads nothing at all: its
// streams are read again one per XREADGROUP (while the lease is held),
// and a deleted one read nothing and is no error.
func (r *runner) fedJobs(ctx context.Context, reads []fedRead) ([]*Job, error) {
	var jobs []*Job
	var err error
	var again []fedRead
	for _, f := range reads {
		jobs = append(jobs, r.streamJobs(f.cmd.Val())...)
		e := f.cmd.Err()
		switch {
		case e == nil || isRedisNil(e):
		case isNoGroup(e):
			if len(f.streams) > 1 {
				again = append(again, f)
			}
		case err == nil:
			err = e
		}
	}
	// A round trip more: the lease is asked again first, as before any
	// read (what the holder read after a lapse would be pending, unseen,
	// under the slot's consumer, which its next holder replayed already).
	if len(again) == 0 || !r.leaseHeld() {
		return jobs, err
	}
	var cmds []*redis.XStreamSliceCmd
	_, _ = r.c.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, f := range again {
			for _, s := range f.streams {
				cmds = append(cmds, r.queueRead(ctx, p, []string{s}, f.count))
			}
		}
		return nil
	})
	for _, c := range cmds {
		jobs = append(jobs, r.streamJobs(c.Val())...)
		if e := c.Err(); e != nil && !isRedisNil(e) && !isNoGroup(e) && err == nil {
			err = e
		}
	}
	return jobs, err
}

// admit returns the jobs to dispatch: a job read from its key's stream
// runs (its pending entry is its permit), and is remembered so that its
// index entry is dropped once it is settled; a keyed entry read from a
// level stream is parked in its key's stream (keyParkScript). Jobs without
// a key pass through untouched, with no Redis call.
func (r *runner) admit(ctx context.Context, jobs []*Job) ([]*Job, error) {
	var args []any
	var ask []*Job
	keyed := false
	for _, j := range jobs {
		if j.Key == "" {
			continue
		}
		keyed = true
		if !j.inKey && j.verdict == "" {
			ask = append(ask, j)
			args = append(args, levelIndex(j.Priority), j.Entry, j.Key, j.ID, j.Attempt-1)
		}
	}
	if !keyed {
		return jobs, nil
	}
	if len(ask) > 0 {
		keys := []string{r.keys.High, r.keys.Stream, r.keys.Low, r.keys.KeyJobs()}
		v, err := r.write(ctx, keyParkScript, keys, append([]any{Group, r.c.Consumer, r.keys.keyBase()}, args...)...).Slice()
		if err != nil {
			return nil, err // they stay pending: replayed after the error
		}
		parked := map[*Job]bool{}
		for i, j := range ask {
			switch n, _ := v[i].(int64); n {
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
		if j.inKey {
			if r.kk.held == nil {
				r.kk.held = map[entryKey]string{}
			}
			r.kk.held[j.key()] = j.ID
		}
	}
	r.mu.Unlock()
	return jobs, nil
}

// keyForget notes the index entry of a settled (or abandoned) key stream
// entry to drop; runner.mu held. keyTakeScript drops it unless the job was
// parked again since, under a newer entry.
func (r *runner) keyForget(k entryKey) {
	if len(r.kk.held) == 0 {
		return
	}
	if id, ok := r.kk.held[k]; ok {
		delete(r.kk.held, k)
		r.kk.drop = append(r.kk.drop, id, k.id)
		r.kk.pending.Store(int64(len(r.kk.drop)))
	}
}

// flushKeyDrops drops the index entries of jobs settled since the last
// read, as the holder leaves.
func (r *runner) flushKeyDrops() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for r.kk.pending.Load() > 0 && ctx.Err() == nil {
		if _, _, err := r.takeKeyed(ctx, 0); err != nil {
			r.c.Logger.Debug().Err(err).Msg("drop settled jobs' key index entries; `baton job` checks their entries")
			return
		}
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
