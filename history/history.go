// Package history keeps what happens to a queue's run slots, in Redis, so
// that short-lived holders add up: the last slot events (a slot taken, a
// standby promoted, a holder retired, left early or died, dead letters) in
// a small capped stream, and two coverage totals in the queue's stats hash:
// how long fewer than k run slots were held, and the gaps between a kept
// slot's holders.
//
// Holders and standbys record; a Recorder is the one type they need:
//
//	r := &history.Recorder{Client: rdb, Queue: "thumbs", Keep: 4, Run: run, PID: os.Getpid(), Host: host}
//	gap, _, _ := r.Took(ctx, slot.Index(), history.ByStandby, slot.Inherited(), freeFor)
//	stop := r.Watch(slot.Name(), func() int64 { return deadLetters }, onErr)
//	defer stop()
//	defer r.Left(ctx, slot.Index(), history.WhyLifetime, jobsDone)
//
// Costs: one script call when a holder takes its slot and one when it
// leaves; while a holder or standby runs, its run-slot records are read
// every second (files, or one call with leases) and a script is called
// when they changed or every LookEvery; nothing per job. Readers
// (ReadCoverage, ReadEvents) only read.
//
// Accuracy: takes and leaves are recorded as they happen, on Redis's
// clock. A holder that dies (kill -9, a lost lease) is noticed by the next
// look of any holder or standby (within a second in file mode; with leases
// once its lease expires), or, when none runs, by its slot's next taker,
// which charges the time since the last look (at most LookEvery too much).
package history

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/internal/script"
	"github.com/baton-run/baton/lock"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// EventsKept is about how many events a queue's events stream keeps
// (XADD MAXLEN ~: Redis trims whole nodes, so a few more may stay). It
// holds events, not jobs: trimming it loses nothing but old news.
const EventsKept = 200

// LookEvery is the longest a running holder or standby goes without
// telling Redis what it sees of the run slots; it tells at once, within a
// second, when they change.
const LookEvery = 5 * time.Second

// trustWindow: a look does not overrule a take or leave this recent (the
// looker may have read the records before it).
const trustWindow = 2 * time.Second

// EventsKey is queue q's stream of slot events, under its hash tag.
func EventsKey(q string) string { return work.KeysFor(q).Stream + ":events" }

// CoverageKey is the hash of queue q's coverage state (which run slots are
// held since when; see scripts.go), under its hash tag.
func CoverageKey(q string) string { return work.KeysFor(q).Stream + ":coverage" }

// Fields of the stats hash (work.KeysFor(q).Stats) written here.
const (
	// StatBelowKMS: ms, all time, during which fewer than k run slots were
	// held, up to the last change recorded.
	StatBelowKMS = "below_k_ms"
	// StatGapPrefix + by + ":" + bucket index: takes of a kept run slot
	// (index < k) whose gap since its previous holder left was at most
	// GapBuckets[i] seconds; index len(GapBuckets) counts the rest.
	StatGapPrefix = "gap:"
	// StatGapSumPrefix + by: the sum of those gaps, ms.
	StatGapSumPrefix = "gap_sum_ms:"
)

// Who took a slot: the by of a gap.
const (
	ByStandby   = "standby"   // a standby promoted
	ByCandidate = "candidate" // a fresh start (cron, by hand, a scale-up) that found the slot free
)

// Why a holder left its run slot (Recorder.Left).
const (
	WhyLifetime = "lifetime" // its lifetime ended: a retirement
	WhyStopped  = "stopped"  // SIGTERM or SIGINT
	WhyError    = "error"    // it failed (Redis down too long, a worker that cannot start)
	WhyMaxJobs  = "max_jobs" // max_jobs reached
	WhyIdle     = "idle"     // idle above min_slots for idle_exit (scale down)
	// WhyEarly is what holders before WhyMaxJobs and WhyIdle wrote for
	// either; read, never written.
	WhyEarly = "early"
)

// whyText is how an event names why a holder left early.
var whyText = map[string]string{
	WhyMaxJobs: "max_jobs reached",
	WhyIdle:    "idle above min_slots",
	WhyEarly:   "max_jobs reached or idle",
}

// GapBuckets are the upper bounds, in seconds, of the gap histogram kept in
// Redis. Fixed: holders of different versions must agree.
var GapBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 15, 60, 300}

var gapBoundsMS = func() []any {
	out := make([]any, len(GapBuckets))
	for i, b := range GapBuckets {
		out[i] = int64(b * 1000)
	}
	return out
}()

// Recorder records one holder's or standby's slot history.
type Recorder struct {
	Client redis.UniversalClient // the queue's Redis
	Queue  string
	Keep   int      // k: run slots to keep covered (min_slots)
	Run    lock.Set // every run slot (all N, not only the k kept), for looks
	PID    int      // this process, named in its events
	Host   string   // this host, named in its events
}

func (r *Recorder) keys() []string {
	return []string{CoverageKey(r.Queue), work.KeysFor(r.Queue).Stats, EventsKey(r.Queue)}
}

// Took records that this process took run slot slot, by ByStandby or
// ByCandidate; died is the record it inherited from a holder that died
// holding the slot (lock.Slot.Inherited), or nil; free is how long this
// process saw the slot free before it took it (a promoted standby's looks:
// standby.Protocol.Took), negative when it does not know. It returns the
// slot's gap since its previous holder left, and false when that is
// unknown.
func (r *Recorder) Took(ctx context.Context, slot int, by string, died *lock.Record, free time.Duration) (time.Duration, bool, error) {
	dead := 0
	if died != nil {
		dead = max(died.PID, 1)
	}
	freeMS := int64(-1)
	if free >= 0 {
		freeMS = free.Milliseconds()
	}
	args := append([]any{r.Keep, r.Run.Size(), slot, by, r.PID, r.Host, dead, EventsKept, freeMS}, gapBoundsMS...)
	ms, err := script.Run(ctx, r.Client, takeScript, r.keys(), args...).Int64()
	if err != nil {
		return 0, false, fmt.Errorf("record the take of run-%d: %w", slot, err)
	}
	return time.Duration(ms) * time.Millisecond, ms >= 0, nil
}

// Left records that this process left run slot slot, why (Why*), having
// done jobs jobs.
func (r *Recorder) Left(ctx context.Context, slot int, why string, jobs int64) error {
	err := script.Run(ctx, r.Client, leaveScript, r.keys(), r.Keep, r.Run.Size(), slot, r.PID, r.Host, why, jobs, EventsKept).Err()
	if err != nil {
		return fmt.Errorf("record leaving run-%d: %w", slot, err)
	}
	return nil
}

// Look reads the run slots' records and tells Redis which are held. It
// returns what it sent.
func (r *Recorder) Look(ctx context.Context) (string, error) {
	seen, err := r.seen()
	if err != nil {
		return "", err
	}
	return seen, r.tell(ctx, seen)
}

func (r *Recorder) seen() (string, error) {
	recs, err := r.Run.Records()
	if err != nil {
		return "", fmt.Errorf("read run slots: %w", err)
	}
	b := make([]byte, len(recs))
	for i, rec := range recs {
		b[i] = '0'
		if rec.Held {
			b[i] = '1'
		}
	}
	return string(b), nil
}

func (r *Recorder) tell(ctx context.Context, seen string) error {
	err := script.Run(ctx, r.Client, lookScript, r.keys(), r.Keep, seen, r.PID, r.Host, EventsKept, trustWindow.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("record the run slots: %w", err)
	}
	return nil
}

// DeadLetters adds an event: slot's holder dead-lettered n jobs.
func (r *Recorder) DeadLetters(ctx context.Context, slot string, n int64) error {
	err := r.Client.XAdd(ctx, &redis.XAddArgs{Stream: EventsKey(r.Queue), MaxLen: EventsKept, Approx: true,
		Values: []any{"kind", KindDeadLetters, "slot", slot, "pid", r.PID, "host", r.Host, "jobs", n}}).Err()
	if err != nil {
		return fmt.Errorf("record dead letters: %w", err)
	}
	return nil
}

// Watch looks at the run slots every second (every LookEvery when reading
// them is a Redis call: leases) and tells Redis when they changed, or
// LookEvery after it last told; when dead, unless nil, has grown since the
// last look, it adds a dead-letter event for slot. It runs in a goroutine
// that the returned func stops; stop waits for a call in flight at most
// 200ms. onErr hears each failure.
func (r *Recorder) Watch(slot string, dead func() int64, onErr func(error)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	every := time.Second
	if r.Run == nil || r.Run.Capabilities().Remote {
		every = LookEvery
	}
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		var told string
		var toldAt time.Time
		var deadSeen int64
		if dead != nil {
			deadSeen = dead()
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
			err := func() error {
				if dead != nil {
					if n := dead(); n > deadSeen {
						if err := r.DeadLetters(cctx, slot, n-deadSeen); err != nil {
							return err
						}
						deadSeen = n
					}
				}
				seen, err := r.seen()
				if err != nil || seen == told && time.Since(toldAt) < LookEvery {
					return err
				}
				if err := r.tell(cctx, seen); err != nil {
					return err
				}
				told, toldAt = seen, time.Now()
				return nil
			}()
			ccancel()
			if err != nil && onErr != nil && ctx.Err() == nil {
				onErr(err)
			}
		}
	}()
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Coverage is how well a queue's run slots were covered, all time.
type Coverage struct {
	Keep int `json:"k"` // k, as the reader was told
	// Held is how many run slots were held at the last change recorded
	// (-1: none recorded yet).
	Held int `json:"held"`
	// BelowK is how long fewer than k run slots were held, up to now.
	BelowK time.Duration `json:"below_k_ns"`
	// Gaps are the gaps between a kept slot's holders, by who took it
	// (ByStandby, ByCandidate).
	Gaps map[string]Gaps `json:"gaps,omitempty"`
}

// Gaps is a histogram of gaps between a slot's holders.
type Gaps struct {
	Count int64         `json:"count"`
	Sum   time.Duration `json:"sum_ns"`
	// Buckets[i] counts gaps of at most GapBuckets[i] seconds (and more
	// than the bucket before); the last, the rest.
	Buckets []int64 `json:"buckets"`
}

// Mean is the mean gap, 0 when none.
func (g Gaps) Mean() time.Duration {
	if g.Count == 0 {
		return 0
	}
	return g.Sum / time.Duration(g.Count)
}

// ReadCoverage reads queue q's coverage for k kept slots; stats is the
// queue's stats hash as work.ReadCounts read it. One round trip.
func ReadCoverage(ctx context.Context, rdb redis.Cmdable, q string, k int, stats map[string]int64) (*Coverage, error) {
	var now *redis.TimeCmd
	var st *redis.SliceCmd
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		st = p.HMGet(ctx, CoverageKey(q), "at", "held")
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read coverage: %w", err)
	}
	c := &Coverage{Keep: k, Held: -1, BelowK: time.Duration(stats[StatBelowKMS]) * time.Millisecond}
	v := st.Val()
	if at, ok := v[0].(string); ok {
		held, _ := v[1].(string)
		c.Held = strings.Count(held, "1")
		ms, _ := strconv.ParseInt(at, 10, 64)
		if since := now.Val().Sub(time.UnixMilli(ms)); c.Held < k && since > 0 {
			c.BelowK += since // not yet charged: nobody changed anything since
		}
	}
	for _, by := range []string{ByStandby, ByCandidate} {
		g := Gaps{Buckets: make([]int64, len(GapBuckets)+1), Sum: time.Duration(stats[StatGapSumPrefix+by]) * time.Millisecond}
		for i := range g.Buckets {
			g.Buckets[i] = stats[StatGapPrefix+by+":"+strconv.Itoa(i)]
			g.Count += g.Buckets[i]
		}
		if g.Count > 0 {
			if c.Gaps == nil {
				c.Gaps = map[string]Gaps{}
			}
			c.Gaps[by] = g
		}
	}
	return c, nil
}

// Kinds of events.
const (
	KindTook        = "took"         // a candidate took a free run slot
	KindPromoted    = "promoted"     // a standby took a run slot
	KindRetired     = "retired"      // a holder left at the end of its lifetime
	KindLeft        = "left"         // a holder left before (Why says why)
	KindDied        = "died"         // a holder was gone without leaving (kill -9, a lost lease, healed when frozen)
	KindDeadLetters = "dead_letters" // a holder dead-lettered jobs
)

// Event is one slot event.
type Event struct {
	At   time.Time `json:"at"` // on Redis's clock
	Kind string    `json:"kind"`
	Slot string    `json:"slot"` // e.g. run-3
	PID  int       `json:"pid,omitempty"`
	Host string    `json:"host,omitempty"`
	// Gap is how long the slot was free before this take (took, promoted);
	// nil when unknown.
	Gap *time.Duration `json:"gap_ns,omitempty"`
	// DiedPID is the pid of a previous holder that died holding the slot
	// (took, promoted).
	DiedPID int    `json:"died_pid,omitempty"`
	Why     string `json:"why,omitempty"`     // left: Why*
	Jobs    int64  `json:"jobs,omitempty"`    // retired, left: jobs done; dead_letters: jobs dead-lettered
	SeenBy  string `json:"seen_by,omitempty"` // died: pid@host of the holder or standby that noticed
}

// String is one line, without the time.
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: pid %d", e.Slot, e.PID)
	if e.Host != "" {
		b.WriteString(" on " + e.Host)
	}
	switch e.Kind {
	case KindTook:
		b.WriteString(" took the slot")
	case KindPromoted:
		b.WriteString(" was promoted from standby")
	case KindRetired:
		fmt.Fprintf(&b, " retired after %d jobs", e.Jobs)
	case KindLeft:
		why := e.Why
		if t, ok := whyText[why]; ok {
			why = t
		}
		fmt.Fprintf(&b, " left early (%s) after %d jobs", why, e.Jobs)
	case KindDied:
		b.WriteString(" was gone without leaving (killed, lost its lease, or frozen and healed)")
		if e.SeenBy != "" {
			b.WriteString("; seen by " + e.SeenBy)
		}
	case KindDeadLetters:
		fmt.Fprintf(&b, " dead-lettered %d jobs ('baton dead list')", e.Jobs)
	default:
		b.WriteString(" " + e.Kind)
	}
	if e.DiedPID > 0 {
		fmt.Fprintf(&b, " after pid %d died holding it", e.DiedPID)
	}
	if e.Gap != nil {
		fmt.Fprintf(&b, "; the slot was free for %s", e.Gap.Round(time.Millisecond))
	}
	return b.String()
}

// ReadEvents returns queue q's last n events, oldest first.
func ReadEvents(ctx context.Context, rdb redis.Cmdable, q string, n int) ([]Event, error) {
	msgs, err := rdb.XRevRangeN(ctx, EventsKey(q), "+", "-", int64(n)).Result()
	if err != nil {
		return nil, fmt.Errorf("read slot events: %w", err)
	}
	out := make([]Event, 0, len(msgs))
	for i := len(msgs) - 1; i >= 0; i-- {
		out = append(out, parse(msgs[i]))
	}
	return out, nil
}

func parse(m redis.XMessage) Event {
	str := func(f string) string { s, _ := m.Values[f].(string); return s }
	num := func(f string) int64 { n, _ := strconv.ParseInt(str(f), 10, 64); return n }
	e := Event{Kind: str("kind"), Slot: str("slot"), PID: int(num("pid")), Host: str("host"), DiedPID: int(num("died_pid")),
		Why: str("why"), Jobs: num("jobs"), SeenBy: str("seen_by")}
	if ms, _, ok := strings.Cut(m.ID, "-"); ok {
		n, _ := strconv.ParseInt(ms, 10, 64)
		e.At = time.UnixMilli(n)
	}
	if str("gap_ms") != "" {
		g := time.Duration(num("gap_ms")) * time.Millisecond
		e.Gap = &g
	}
	return e
}
