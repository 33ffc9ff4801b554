package work

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dead-letter reasons.
const (
	ReasonFailed    = "failed"    // the handler failed max_attempts times
	ReasonTimeout   = "timeout"   // the last run hit job_timeout
	ReasonCrashed   = "crashed"   // delivered max_attempts times, never finished: it kills its holder
	ReasonTooLarge  = "too_large" // payload over max_payload: never run
	ReasonMalformed = "malformed" // no payload field, a reserved field with a value baton never writes, or a job id another job holds: never run
	ReasonRejected  = "rejected"  // the handler said not to retry (ErrSkipRetry, reject_exit_codes)
	ReasonCancelled = "cancelled" // cancelled (baton cancel, Cancel): taken out waiting, or stopped running; never retried
)

// read feeds the workers: first this consumer's own pending entries, then,
// now and then, entries abandoned by consumers that are gone, then new ones.
func (r *runner) read(ctx context.Context) {
	limit := int64(-1)
	if r.c.MaxJobs > 0 {
		limit = max(int64(float64(r.c.MaxJobs)*(0.9+0.2*rand.Float64())), 1)
	}
	var count int64
	replay := true
	r.announce, r.inherited = true, true
	var nextClaim time.Time // zero: claim at once
	backoff := 50 * time.Millisecond
	for !r.draining() {
		free := r.window() - r.inflight.Load()
		if replay {
			// One at a time, and only once the last one is settled in Redis:
			// an entry counts a delivery when it is taken, and a job that
			// kills its holder must not count one for its neighbours, nor
			// take their unsent acks down with it.
			free = 1 - r.unsettled()
		}
		if limit > 0 {
			free = min(free, limit-count)
		}
		if r.paused.Load() {
			// Paused: read nothing until the keeper sees the resume (and
			// pokes), or stop; the timer is a backstop only.
			select {
			case <-r.space:
			case <-r.stopped:
			case <-time.After(keepEvery):
			}
			continue
		}
		if free <= 0 || !replay && !r.refill(free) {
			select {
			case <-r.space:
			case <-r.stopped:
			}
			continue
		}
		if !r.leaseHeld() {
			return
		}
		var jobs []*Job
		var err error
		granted := int64(0) // by the rate limiter; given back when not read
		if r.c.RateLimit.N > 0 {
			var wait time.Duration
			if granted, wait, err = r.take(ctx, free); err == nil && granted == 0 {
				select { // over the limit: the jobs wait in the queue
				case <-time.After(min(max(wait, time.Millisecond), time.Second)):
				case <-r.stopped:
				}
				continue
			}
			free = max(granted, 1)
		}
		switch {
		case err != nil: // the limiter failed: handled below as a Redis error
		case replay:
			jobs, err = r.replayOne(ctx)
			if err == nil && len(jobs) == 0 {
				r.giveBackRate(ctx, granted)
				replay, r.announce, r.inherited = false, false, false
				continue
			}
		case r.c.VisibilityTimeout > 0 && time.Now().After(nextClaim):
			jobs, err = r.claim(ctx, free)
			nextClaim = time.Now().Add(max(r.c.VisibilityTimeout/4, time.Second))
		default:
			jobs, err = r.readNext(ctx, free)
		}
		if err == nil && len(jobs) > 0 && !r.leaseHeld() {
			return // stopped (or SIGSTOPped) in the read past the lease: they stay pending
		}
		if err == nil {
			jobs, err = r.admit(ctx, jobs)
		}
		if granted > int64(len(jobs)) {
			r.giveBackRate(ctx, granted-int64(len(jobs)))
		}
		if err != nil {
			if isNoGroup(err) {
				err = r.ensureGroups(ctx)
			}
			// A reply lost with the connection may have left entries pending
			// for us: look at our own pending entries again once back.
			replay, r.keysListed = true, false
			if err != nil && !r.failing(err) {
				return
			}
			select {
			case <-time.After(backoff):
			case <-r.stopped:
				return
			}
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		r.recovered()
		backoff = 50 * time.Millisecond
		for _, j := range jobs {
			r.dispatch(j)
			if j.verdict == "" {
				count++
			}
		}
		if limit > 0 && count >= limit {
			return // stop reading; the workers finish what was read
		}
	}
}

// ensureGroups creates the normal stream and its consumer group when
// missing, and so for the high and low streams: all of them once the
// holder reads by level (its blocking read names all three, and fails while
// one is missing), else those that exist.
func (r *runner) ensureGroups(ctx context.Context) error {
	if err := ensureGroup(ctx, r.c.Client, r.keys.Stream); err != nil {
		return err
	}
	levels := r.levels.Load()
	for _, s := range []string{r.keys.High, r.keys.Low} {
		if !levels {
			if n, err := r.c.Client.Exists(ctx, s).Result(); err != nil || n == 0 {
				continue
			}
		}
		if err := ensureGroup(ctx, r.c.Client, s); err != nil {
			return err
		}
	}
	return nil
}

// dispatch hands a job to the workers, or straight to the settler when it
// must not run.
func (r *runner) dispatch(j *Job) {
	r.mu.Lock()
	r.active[j.key()] = j
	if r.cancels != nil {
		r.cancelReplayed(j)
	}
	r.mu.Unlock()
	r.inflight.Add(1)
	if j.verdict != "" {
		r.results <- result{job: j, dead: j.verdict}
		r.finished()
		return
	}
	r.jobs <- j
}

// entryKey names a stream entry of the queue: an entry id is unique in its
// stream, not across the queue's streams (its levels' and its keys'). With
// id "" it names the stream itself (streamAt).
type entryKey struct {
	level Priority
	key   string // the job's key when its entry is in its key's stream, else ""
	id    string
}

func (j *Job) key() entryKey {
	if j.inKey {
		return entryKey{j.Priority, j.Key, j.Entry}
	}
	return entryKey{level: j.Priority, id: j.Entry}
}

// at is the stream of e's entry, as an entryKey without id.
func (e entryKey) at() entryKey { return entryKey{level: e.level, key: e.key} }

// streamAt is the Redis key of the stream of entry e.
func (k Keys) streamAt(e entryKey) string {
	if e.key != "" {
		return k.KeyStream(e.level, e.key)
	}
	return k.StreamOf(e.level)
}

// stream is the Redis key of the stream j's entry is in: its key's stream
// (inKey), else its level's.
func (j *Job) stream(k Keys) string { return k.streamAt(j.key()) }

// forget drops a settled (or abandoned) entry from the active set.
// keyForget sees it first, while r.active still holds its job (for a key
// stream's entry, its job id).
func (r *runner) forget(keys ...entryKey) {
	r.mu.Lock()
	for _, k := range keys {
		r.keyForget(k)
		delete(r.active, k)
	}
	r.mu.Unlock()
	r.poke()
}

// unsettled counts entries read and not yet settled in Redis.
func (r *runner) unsettled() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return int64(len(r.active))
}

func (r *runner) isActive(k entryKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.active[k]
	return ok
}

// failing notes a Redis error; it returns false, having stopped the runner,
// once Redis has been failing for RedisDownExit.
func (r *runner) failing(err error) bool {
	now := time.Now().UnixNano()
	if r.down.CompareAndSwap(0, now) {
		r.c.Logger.Warn().Err(err).Msg("redis failing; retrying")
		return true
	}
	if since := time.Duration(now - r.down.Load()); since > r.c.RedisDownExit {
		r.stop("redis", fmt.Errorf("%w for %s: %v", ErrRedisDown, r.c.RedisDownExit, err))
		return false
	}
	return true
}

func (r *runner) recovered() {
	if d := r.down.Swap(0); d != 0 {
		r.c.Logger.Info().Dur("down", time.Since(time.Unix(0, d))).Msg("redis reachable again")
	}
}

// readNew reads entries never delivered, blocking up to Block (or the deadline).
func (r *runner) readNew(ctx context.Context, n int64) ([]*Job, error) {
	block := r.c.Block
	if !r.c.Deadline.IsZero() {
		block = min(block, max(time.Until(r.c.Deadline), time.Millisecond))
	}
	if r.held != nil {
		block = min(block, max(r.heldFor, time.Millisecond))
	}
	if r.levels.Load() {
		return r.readLevels(ctx, n, block)
	}
	args := &redis.XReadGroupArgs{
		Group: Group, Consumer: r.c.Consumer, Streams: []string{r.keys.Stream, ">"},
		Count: n, Block: block,
	}
	res, err := r.c.Client.XReadGroup(ctx, args).Result()
	if r.regrouped(ctx, err) {
		res, err = r.c.Client.XReadGroup(ctx, args).Result()
	}
	if isRedisNil(err) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	if err != nil || len(res) == 0 {
		return nil, err
	}
	jobs := make([]*Job, 0, len(res[0].Messages))
	for _, m := range res[0].Messages {
		jobs = append(jobs, r.toJob(m, 1, PriorityNormal))
	}
	return jobs, nil
}

// regrouped reports whether err says a stream or its group is missing
// (the stream was deleted, Redis lost it, or the group was destroyed) and
// it was created again just now: the read is then made again at once,
// rather than after the reader's backoff, so that an idle holder is back in
// its blocking read and a new job wakes it.
func (r *runner) regrouped(ctx context.Context, err error) bool {
	if !isNoGroup(err) || ctx.Err() != nil {
		return false
	}
	if err := r.ensureGroups(ctx); err != nil {
		r.c.Logger.Debug().Err(err).Msg("create missing stream or consumer group")
		return false
	}
	return true
}

// pendingPage is how many of its own pending entries replayOne lists at once.
const pendingPage = 32

// levels are the priorities whose streams the reader reads, in read order.
func (r *runner) levelsRead() []Priority {
	if r.levels.Load() {
		return readOrder[:]
	}
	return readOrder[1:2]
}

// replayOne takes the oldest of this consumer's pending entries that is not
// already running here, high ones first, then those in key streams. XCLAIM
// to itself counts a delivery, and the delivery count is how a job that
// kills its holder every time is caught.
func (r *runner) replayOne(ctx context.Context) ([]*Job, error) {
	for _, p := range r.levelsRead() {
		jobs, err := r.replayLevel(ctx, entryKey{level: p})
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
	}
	if !r.keysListed {
		// Once per replay phase: the key streams where this consumer has
		// entries pending (a queue without keys: one SSCAN of nothing).
		list, err := r.keyStreamsPending(ctx, true)
		if err != nil {
			return nil, err
		}
		r.keysReplay, r.keysListed = list, true
	}
	for len(r.keysReplay) > 0 {
		jobs, err := r.replayLevel(ctx, r.keysReplay[0])
		if err != nil || len(jobs) > 0 {
			return jobs, err
		}
		r.keysReplay = r.keysReplay[1:] // nothing more of ours there
	}
	return nil, nil
}

// replayLevel replays one entry of the stream at (an entryKey without id:
// a level's stream, or a key's).
func (r *runner) replayLevel(ctx context.Context, at entryKey) ([]*Job, error) {
	stream := r.keys.streamAt(at)
	start := "-"
	for {
		pend, err := r.c.Client.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: stream, Group: Group, Consumer: r.c.Consumer, Start: start, End: "+", Count: pendingPage,
		}).Result()
		if err != nil || len(pend) == 0 {
			if isNoGroup(err) && (at.level != PriorityNormal || at.key != "") {
				err = nil // that level's (or key's) stream is gone: nothing pending there
			}
			return nil, err
		}
		for _, p := range pend {
			if r.isActive(entryKey{at.level, at.key, p.ID}) {
				continue
			}
			// MinIdle: only if nobody touched it since XPENDING listed it. A
			// holder that claimed it meanwhile (after visibility_timeout)
			// keeps it, and it is not run twice at once.
			msgs, err := r.c.Client.XClaim(ctx, &redis.XClaimArgs{
				Stream: stream, Group: Group, Consumer: r.c.Consumer, Messages: []string{p.ID}, MinIdle: p.Idle,
			}).Result()
			if err != nil {
				return nil, err
			}
			if len(msgs) == 0 {
				// Claimed by another holder meanwhile, or deleted while
				// pending (Redis 7 drops it from the pending list then).
				continue
			}
			if msgs[0].Values == nil {
				// Deleted while pending, as Redis 6 reports it: clear it.
				if err := r.c.Client.XAck(ctx, stream, Group, p.ID).Err(); err != nil {
					return nil, err
				}
				continue
			}
			if r.announce {
				r.announceReplay(ctx, stream, start, len(pend))
			}
			r.c.Logger.Debug().Str("entry", p.ID).Int64("deliveries", p.RetryCount+1).Msg("replaying own pending entry")
			j := r.toJobIn(msgs[0], int(p.RetryCount)+1, at.level, at.key)
			if r.inherited { // after a lost reply, our own unstarted entries: no crash
				r.countCrashed(ctx, j)
			}
			return []*Job{j}, nil
		}
		start = "(" + pend[len(pend)-1].ID
	}
}

// announceReplay logs, once per holder and at info, that the slot's previous
// holder left entries pending (it was killed, or passed its hard deadline):
// they run again now. The count comes from the page already read when it
// holds them all; only on this path, never the normal one, does it cost one
// more round trip (XPENDING's summary).
func (r *runner) announceReplay(ctx context.Context, stream, start string, page int) {
	r.announce = false
	n := int64(page)
	if start != "-" || page == pendingPage {
		sum, err := r.c.Client.XPending(ctx, stream, Group).Result()
		if err == nil {
			n = sum.Consumers[r.c.Consumer]
		}
	}
	r.c.Logger.Info().Int64("entries", n).Msg("replaying entries left pending by this slot's previous holder")
}

// claim takes up to n entries that other consumers left pending and untouched
// for VisibilityTimeout: their holders are gone for good (a host that died, a
// slot count that shrank). One entry per call, so each counts one delivery.
// The level streams first, then the key streams with entries pending.
func (r *runner) claim(ctx context.Context, n int64) ([]*Job, error) {
	var jobs []*Job
	for _, level := range r.levelsRead() {
		more, err := r.claimLevel(ctx, entryKey{level: level}, &r.claimFrom[level], n-int64(len(jobs)))
		jobs = append(jobs, more...)
		if err != nil && !(isNoGroup(err) && level != PriorityNormal) {
			return jobs, err
		}
	}
	if int64(len(jobs)) >= n || !r.keyStreams.Load() {
		return jobs, nil
	}
	list, err := r.keyStreamsPending(ctx, false)
	if err != nil {
		return jobs, err
	}
	for _, at := range list {
		if int64(len(jobs)) >= n {
			break
		}
		from := "0-0" // a key stream is short: from its start each time
		more, err := r.claimLevel(ctx, at, &from, n-int64(len(jobs)))
		jobs = append(jobs, more...)
		if err != nil && !isNoGroup(err) { // NOGROUP: deleted meanwhile
			return jobs, err
		}
	}
	return jobs, nil
}

// claimLevel claims up to n entries of the stream at (an entryKey without
// id), from the XAUTOCLAIM cursor *from.
func (r *runner) claimLevel(ctx context.Context, at entryKey, from *string, n int64) ([]*Job, error) {
	stream := r.keys.streamAt(at)
	var jobs []*Job
	for calls := 0; int64(len(jobs)) < n && calls < 100; calls++ {
		msgs, next, err := r.c.Client.XAutoClaim(ctx, &redis.XAutoClaimArgs{
			Stream: stream, Group: Group, Consumer: r.c.Consumer,
			MinIdle: r.c.VisibilityTimeout, Start: *from, Count: 1,
		}).Result()
		if err != nil {
			return jobs, err
		}
		*from = next
		for _, m := range msgs {
			pend, err := r.c.Client.XPendingExt(ctx, &redis.XPendingExtArgs{
				Stream: stream, Group: Group, Start: m.ID, End: m.ID, Count: 1,
			}).Result()
			if err != nil {
				return jobs, err
			}
			deliveries := 1
			if len(pend) == 1 {
				deliveries = int(pend[0].RetryCount)
			}
			j := r.toJobIn(m, deliveries, at.level, at.key)
			r.c.Logger.Warn().Str("job", j.ID).Str("entry", j.Entry).Msg("claimed a job abandoned by a consumer that is gone")
			r.countCrashed(ctx, j)
			jobs = append(jobs, j)
		}
		if next == "0-0" {
			break
		}
	}
	return jobs, nil
}

// countCrashed adds a cut-short delivery to the failed runs of kind
// crashed: a job the slot's previous holder left pending, or one claimed
// from a consumer that is gone; not when it is dead-lettered now (its last
// run then counts under its dead reason). One command, only on this rare
// path; a failure to count is logged, never fatal.
func (r *runner) countCrashed(ctx context.Context, j *Job) {
	if j.verdict != "" {
		return
	}
	if err := r.c.Client.HIncrBy(ctx, r.keys.Stats, StatFailedPrefix+FailedCrashed, 1).Err(); err != nil {
		r.c.Logger.Debug().Err(err).Msg("could not count a crashed run")
	}
}

// maxAttempts is the job's own max_attempts, or the queue's.
func (r *runner) maxAttempts(j *Job) int {
	if j.maxAttempts > 0 {
		return j.maxAttempts
	}
	return r.c.MaxAttempts
}

// toJob turns a stream entry into a job and decides whether it may run:
// Attempt counts every delivery, including runs made before a retry.
func (r *runner) toJob(m redis.XMessage, deliveries int, level Priority) *Job {
	return r.toJobIn(m, deliveries, level, "")
}

// toJobIn is toJob for an entry of key's stream (key "": of level's
// stream). Such a job is inKey: it runs (its pending entry is its permit); its
// entry must name that key, else it is dead-lettered as malformed, under
// its own entry id, from that stream.
func (r *runner) toJobIn(m redis.XMessage, deliveries int, level Priority, key string) *Job {
	j := r.entryJob(m, deliveries, level, key)
	if key == "" {
		return j
	}
	if j.verdict == "" && j.Key != key {
		j.ID, j.verdict, j.problem = j.Entry, ReasonMalformed, fmt.Sprintf("entry in key %q's stream has %s %q", key, keyField, j.Key)
	}
	// The stream it is in, whatever the entry says: it is settled there.
	j.Key, j.inKey = key, true
	return j
}

func (r *runner) entryJob(m redis.XMessage, deliveries int, level Priority, key string) *Job {
	j := &Job{ID: m.ID, Entry: m.ID, Queue: r.c.Queue, Slot: r.c.Consumer, Attempt: deliveries, Priority: level, Fence: r.fence, inKey: key != ""}
	p, ok := m.Values[PayloadField].(string)
	if !ok {
		j.verdict, j.problem = ReasonMalformed, fmt.Sprintf("entry has no %q field", PayloadField)
		return j
	}
	j.Payload = []byte(p)
	if why := j.reserved(m.Values, level); why != "" {
		// Under its own entry id: an orig it carries is not trusted.
		j.ID, j.verdict, j.problem = j.Entry, ReasonMalformed, why
		return j
	}
	j.tickOf(m.Values)
	// fed to the stream by its uncapped key's turn: it needs no permit
	switch {
	case len(p) > r.c.MaxPayload:
		j.verdict, j.problem = ReasonTooLarge, fmt.Sprintf("payload of %d bytes is over max_payload (%d)", len(p), r.c.MaxPayload)
	case j.Attempt > r.maxAttempts(j):
		j.verdict, j.problem = ReasonCrashed, fmt.Sprintf("delivered %d times without finishing: it kills or hangs its holder", j.Attempt-1)
		j.Attempt--
	}
	return j
}

// maxRunsField is the largest attempts field read: more runs than any
// max_attempts allows, and far from overflowing a count.
const maxRunsField = 1<<31 - 1

// reserved reads the fields baton reserves into j, and says what is wrong
// with a value baton never writes ("" when nothing is). A producer's raw
// XADD may carry them, and nothing it writes there may overflow a count,
// panic, or take another job's id: such an entry is dead-lettered as
// malformed, unrun, under its own entry id.
func (j *Job) reserved(v map[string]any, level Priority) string {
	bad := func(field string, val any, why string) string {
		s := fmt.Sprint(val)
		if len(s) > 64 {
			s = s[:64] + "…"
		}
		return fmt.Sprintf("bad %q field %q: %s", field, s, why)
	}
	if a, ok := v[attemptsField]; ok {
		s, _ := a.(string)
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 || n > maxRunsField {
			return bad(attemptsField, a, fmt.Sprintf("want the runs made, 0 to %d", maxRunsField))
		}
		j.Attempt += int(n)
	}
	if o, ok := v[jobField]; ok {
		s, _ := o.(string)
		switch id, ok := parseStreamID(s); {
		case s == "": // none (an id reserved in a script, or an old entry)
		case !ok:
			return bad(jobField, o, "want a job id such as 1700000000000-0")
		case level == PriorityNormal && !j.inKey && j.Entry != "" && !id.atMost(j.Entry):
			// A job's id is issued from this stream's ids before its entry
			// is added; a newer one could be a later job's. (A key stream
			// adds under the job id when it can, else under its own clock.)
			return bad(jobField, o, "newer than the entry "+j.Entry)
		default:
			j.ID = s
		}
	}
	j.unique, _ = v[uniqueField].(string)
	if a, ok := v[maxAttemptsField]; ok {
		s, _ := a.(string)
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxJobAttempts {
			return bad(maxAttemptsField, a, fmt.Sprintf("want 1 to %d", maxJobAttempts))
		}
		j.maxAttempts = n
	}
	if t, ok := v[timeoutField]; ok {
		d, ok := jobTimeout(t)
		if !ok {
			return bad(timeoutField, t, "want milliseconds")
		}
		j.Timeout = d
	}
	if l, ok := v[priorityField]; ok {
		if s, _ := l.(string); s != "high" && s != "normal" && s != "low" {
			return bad(priorityField, l, "want high, normal or low")
		}
	}
	if k, ok := v[keyField]; ok {
		s, _ := k.(string)
		if err := ValidKey(s); err != nil {
			return bad(keyField, k, err.Error())
		}
		j.Key = s
	}
	if field, val, why := j.batchOf(v); why != "" {
		return bad(field, val, why)
	}
	return j.traceOf(v)
}

// streamPos is a stream entry id, <ms>-<seq>, read as numbers.
type streamPos struct{ ms, seq uint64 }

// parseStreamID reads a full stream id, as XADD returns them.
func parseStreamID(s string) (streamPos, bool) {
	ms, seq, ok := strings.Cut(s, "-")
	if !ok {
		return streamPos{}, false
	}
	a, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return streamPos{}, false
	}
	b, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return streamPos{}, false
	}
	return streamPos{a, b}, true
}

// atMost reports whether id is not newer than the entry id e.
func (id streamPos) atMost(e string) bool {
	o, ok := parseStreamID(e)
	return ok && (id.ms < o.ms || id.ms == o.ms && id.seq <= o.seq)
}
