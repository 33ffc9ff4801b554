package periodic

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/faultproxy"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/baton-run/baton/work"
	"github.com/redis/go-redis/v9"
)

// jobs returns the periodic jobs in every stream of queue q: tick → count,
// and the entries' fields in order.
func jobs(tb testing.TB, rdb *redis.Client, q string) (map[string]int, []map[string]any) {
	tb.Helper()
	ctx := context.Background()
	k := work.KeysFor(q)
	count := map[string]int{}
	var all []map[string]any
	for _, s := range []string{k.Stream, k.High, k.Low} {
		ms, err := rdb.XRange(ctx, s, "-", "+").Result()
		if err != nil {
			tb.Fatal(err)
		}
		for _, m := range ms {
			if t, ok := m.Values[work.TickField].(string); ok {
				count[t]++
				m.Values["_id"] = m.ID
				all = append(all, m.Values)
			}
		}
	}
	return count, all
}

func claimer(tb testing.TB, rdb redis.Cmdable, q string, fence *work.Fence, es ...Entry) *Claimer {
	tb.Helper()
	if err := Check(es); err != nil {
		tb.Fatal(err)
	}
	c, err := NewClaimer(rdb, q, "h", es, fence)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

func round(tb testing.TB, c *Claimer) []Outcome {
	tb.Helper()
	out, err := c.Round(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// setLast writes an entry's last claimed tick, as a holder long gone left it.
func setLast(tb testing.TB, rdb *redis.Client, q, name string, at time.Time) {
	tb.Helper()
	if err := rdb.HSet(context.Background(), RecordsKey(q), name, at.UnixMilli()).Err(); err != nil {
		tb.Fatal(err)
	}
}

// Three claimers on three connections race for every tick of @every 1s
// for about 4 s: each tick is enqueued exactly once and none is skipped.
func TestRaceOncePerTick(t *testing.T) {
	srv := redistest.Start(t)
	e := Entry{Name: "beat", Schedule: "@every 1s", Payload: []byte("hi")}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		c := claimer(t, srv.Client(), "q", nil, e)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = c.Round(context.Background())
				time.Sleep(time.Duration(50+i*30) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	count, _ := jobs(t, srv.Client(), "q")
	var ticks []time.Time
	for s, n := range count {
		if n != 1 {
			t.Errorf("tick %s enqueued %d times", s, n)
		}
		at, _ := time.Parse(time.RFC3339, s)
		ticks = append(ticks, at)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	if len(ticks) < 3 {
		t.Fatalf("only %d ticks in 4 s: %v", len(ticks), ticks)
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Errorf("gap of %s between ticks %v and %v", d, ticks[i-1], ticks[i])
		}
	}
}

// The job is the one enqueue would add: same fields, same id scheme, and a
// holder gives its handler the tick and the entry's name.
func TestJobAsEnqueueMakesIt(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	hi := Entry{Name: "hi", Schedule: "@every 1s", Payload: []byte("p1"), Priority: work.PriorityHigh, Timeout: 5 * time.Second, MaxAttempts: 3}
	plain := Entry{Name: "plain", Schedule: "@every 1s", Payload: []byte("p2")}
	c := claimer(t, rdb, "q", nil, hi, plain)
	round(t, c) // reads the records
	var outs []Outcome
	deadline := time.Now().Add(5 * time.Second)
	for len(outs) < 2 && time.Now().Before(deadline) {
		for _, o := range round(t, c) {
			if o.Kind == Enqueued {
				outs = append(outs, o)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, all := jobs(t, rdb, "q")
	if len(all) < 2 {
		t.Fatalf("jobs = %v", all)
	}
	for _, v := range all {
		switch v[work.PeriodicField] {
		case "hi":
			if v["orig"] == nil || v["payload"] != "p1" || v["max_attempts"] != "3" || v["timeout"] != "5000" || v["priority"] != "high" {
				t.Errorf("high job's fields = %v", v)
			}
		case "plain":
			if _, ok := v["orig"]; ok || v["payload"] != "p2" || len(v) != 4 {
				t.Errorf("plain job's fields = %v (want payload, tick, periodic)", v)
			}
		}
	}
	got := make(chan *work.Job, 4)
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error { got <- j; return nil })
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = work.Run(rctx, work.Config{Client: rdb, Queue: "q", Consumer: "h/run-0", Handler: h, Deadline: time.Now().Add(time.Minute)}, nil)
	}()
	seen := map[string]bool{}
	for len(seen) < 2 {
		select {
		case j := <-got:
			if j.Tick.IsZero() || j.Tick.UnixMilli()%1000 != 0 || j.Periodic == "" {
				t.Fatalf("job %s: tick %v periodic %q", j.ID, j.Tick, j.Periodic)
			}
			if j.Periodic == "hi" && (j.Priority != work.PriorityHigh || j.Timeout != 5*time.Second) {
				t.Fatalf("high job read as %+v", j)
			}
			seen[j.Periodic] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("handler saw %v", seen)
		}
	}
}

// A claim whose reply is lost is made again by the next round: it finds
// its tick claimed and adds nothing.
func TestLostReplyClaimsNothingTwice(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	p, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	via := redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1})
	defer via.Close()
	c := claimer(t, via, "q", nil, Entry{Name: "beat", Schedule: "@every 1h", CatchUp: CatchUpLatest})
	round(t, c)                                                // reads: no record
	setLast(t, rdb, "q", "beat", time.Now().Add(-3*time.Hour)) // a tick is due, however late
	c.entries[0].last = time.Now().Add(-3 * time.Hour)

	p.Delay(300 * time.Millisecond)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := c.Round(ctx)
		errc <- err
	}()
	// The script ran (the record moved): lose its reply on the way back.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, _ := rdb.HGet(context.Background(), RecordsKey("q"), "beat:job").Result(); v != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never ran")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Blackhole(true)
	if err := <-errc; err == nil {
		t.Fatal("the round succeeded: its reply was not lost")
	}
	p.Blackhole(false)
	p.Delay(0)
	p.Reset()
	for _, o := range round(t, c) {
		if o.Kind == Enqueued {
			t.Fatalf("the replayed claim enqueued again: %+v", o)
		}
	}
	if count, _ := jobs(t, rdb, "q"); len(count) != 1 {
		t.Fatalf("jobs by tick = %v, want one job", count)
	}
}

// A claimer frozen with an old view of the records, woken after others
// claimed the ticks since, enqueues none of them again.
func TestStaleClaimerClaimsNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	e := Entry{Name: "beat", Schedule: "@every 1s", CatchUp: CatchUpAll}
	stale := claimer(t, rdb, "q", nil, e)
	live := claimer(t, rdb, "q", nil, e)
	round(t, stale)
	round(t, live)
	deadline := time.Now().Add(10 * time.Second)
	n := 0
	for n < 3 && time.Now().Before(deadline) {
		for _, o := range round(t, live) {
			if o.Kind == Enqueued {
				n++
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n < 3 {
		t.Fatalf("live claimer enqueued %d ticks", n)
	}
	// The stale claimer still believes the record is where it left it (no
	// record at all); make it older yet, so it claims every tick since.
	stale.entries[0].last = time.Now().Add(-time.Minute)
	before, _ := jobs(t, rdb, "q")
	time.Sleep(10 * time.Millisecond)
	outs := round(t, stale)
	after, _ := jobs(t, rdb, "q")
	if len(outs) < 60 {
		t.Fatalf("the stale claimer tried %d ticks, want about 60", len(outs))
	}
	for tick, c := range after {
		if c != 1 {
			t.Errorf("tick %s enqueued %d times", tick, c)
		}
	}
	if len(after) > len(before)+1 { // the current second's tick may be new
		t.Fatalf("the stale claimer enqueued %d old ticks", len(after)-len(before))
	}
}

// A claimant whose lease no longer carries its token, or has expired on
// Redis' clock, enqueues nothing and moves no record.
func TestFencedClaimantEnqueuesNothing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	lease := "baton:{q}:lease:run:0"
	far := time.Now().Add(time.Hour).UnixMilli()
	if err := rdb.HSet(ctx, lease, "token", 7, "expires", far).Err(); err != nil {
		t.Fatal(err)
	}
	e := Entry{Name: "beat", Schedule: "@every 1h"}
	last := time.Now().Add(-3 * time.Hour)
	for _, tc := range []struct {
		name    string
		token   int64
		expires int64
	}{{"old token", 6, far}, {"expired lease", 7, time.Now().Add(-time.Second).UnixMilli()}} {
		if err := rdb.HSet(ctx, lease, "expires", tc.expires).Err(); err != nil {
			t.Fatal(err)
		}
		setLast(t, rdb, "q", "beat", last)
		c := claimer(t, rdb, "q", &work.Fence{Key: lease, Token: tc.token}, e)
		c.entries[0].known, c.entries[0].last = true, last
		if _, err := c.Round(ctx); !errors.Is(err, work.ErrFenced) {
			t.Fatalf("%s: err = %v, want fenced", tc.name, err)
		}
		if v, _ := rdb.HGet(ctx, RecordsKey("q"), "beat").Result(); v != strconv.FormatInt(last.UnixMilli(), 10) {
			t.Fatalf("%s: record moved to %s", tc.name, v)
		}
	}
	if count, _ := jobs(t, rdb, "q"); len(count) != 0 {
		t.Fatalf("fenced claimants enqueued %v", count)
	}
	// The lease's holder, with its token, claims.
	if err := rdb.HSet(ctx, lease, "expires", far).Err(); err != nil {
		t.Fatal(err)
	}
	c := claimer(t, rdb, "q", &work.Fence{Key: lease, Token: 7}, e)
	c.entries[0].known, c.entries[0].last = true, last
	if outs := round(t, c); len(outs) != 1 || outs[0].Kind != Enqueued {
		t.Fatalf("the lease's holder: %+v", outs)
	}
}

// Each catch_up value, after a long silence (no holder for three days of
// a daily schedule).
func TestCatchUp(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	// A daily tick six hours ago (never within Late of now).
	at := time.Now().UTC().Add(-6 * time.Hour)
	spec := fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())
	latest := mustSchedule(t, spec).Prev(time.Now())
	last := latest.Add(-3 * 24 * time.Hour) // three days missed
	for _, tc := range []struct {
		cu   CatchUp
		max  int
		want []time.Time
	}{
		{CatchUpNone, 0, nil},
		{CatchUpLatest, 0, []time.Time{latest}},
		{CatchUpAll, 0, []time.Time{latest.Add(-48 * time.Hour), latest.Add(-24 * time.Hour), latest}},
		{CatchUpAll, 2, []time.Time{latest.Add(-24 * time.Hour), latest}},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.cu, tc.max), func(t *testing.T) {
			q := fmt.Sprintf("q-%s-%d", tc.cu, tc.max)
			setLast(t, rdb, q, "daily", last)
			c := claimer(t, rdb, q, nil, Entry{Name: "daily", Schedule: spec, CatchUp: tc.cu, CatchUpMax: tc.max})
			round(t, c)
			round(t, c)
			round(t, c) // a second claim round changes nothing
			_, all := jobs(t, rdb, q)
			var got []time.Time
			for _, v := range all {
				at, _ := time.Parse(time.RFC3339, v[work.TickField].(string))
				got = append(got, at)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("ticks enqueued = %v, want %v", got, tc.want)
			}
			if v, _ := rdb.HGet(context.Background(), RecordsKey(q), "daily").Result(); v != strconv.FormatInt(latest.UnixMilli(), 10) {
				t.Fatalf("record = %s, want the latest tick %d", v, latest.UnixMilli())
			}
		})
	}
}

// A new entry does not fire for a tick long past: its first round records
// that tick without a job, not as missed (no holder was to claim it: the
// entry did not exist), and its ticks fire from the next one on. It was
// counted missed: `baton periodic` and status showed "1 missed" for every
// entry just added.
func TestNewEntryStartsAtItsNextTick(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	at := time.Now().UTC().Add(-6 * time.Hour)
	e := Entry{Name: "daily", Schedule: fmt.Sprintf("%d %d * * *", at.Minute(), at.Hour())}
	c := claimer(t, rdb, "q", nil, e)
	round(t, c)
	outs := round(t, c)
	if len(outs) != 1 || outs[0].Kind != Recorded {
		t.Fatalf("outcomes = %+v, want the past tick recorded", outs)
	}
	if count, _ := jobs(t, rdb, "q"); len(count) != 0 {
		t.Fatalf("a new entry fired for a past tick: %v", count)
	}
	ctx := context.Background()
	st, err := List(ctx, rdb, "q", []Entry{e})
	if err != nil {
		t.Fatal(err)
	}
	if st[0].Missed != 0 || st[0].LastTick.IsZero() || !st[0].Unclaimed.IsZero() {
		t.Fatalf("status %+v: want no tick missed, the past tick recorded, none unclaimed", st[0])
	}
	counts, err := ReadCounts(ctx, rdb, "q")
	if err != nil || counts["daily"] == nil || counts["daily"].Ticks[Missed] != 0 {
		t.Fatalf("counts %+v (%v): want the entry, no tick missed", counts["daily"], err)
	}
}

// Hosts whose configs disagree (a rolling deploy: @every 1s on one, @every
// 2s and another payload on the other) still claim each tick of the name
// at most once: the record is per name and only moves forward.
func TestConfigsDisagreeOncePerTick(t *testing.T) {
	srv := redistest.Start(t)
	old := claimer(t, srv.Client(), "q", nil, Entry{Name: "beat", Schedule: "@every 1s", Payload: []byte("old")})
	neu := claimer(t, srv.Client(), "q", nil, Entry{Name: "beat", Schedule: "@every 2s", Payload: []byte("new")})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range []*Claimer{old, neu} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = c.Round(context.Background())
				time.Sleep(70 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	count, all := jobs(t, srv.Client(), "q")
	if len(count) < 3 {
		t.Fatalf("only %d ticks: %v", len(count), count)
	}
	for tick, n := range count {
		if n != 1 {
			t.Errorf("tick %s enqueued %d times", tick, n)
		}
	}
	payloads := map[any]int{}
	for _, v := range all {
		payloads[v["payload"]]++
	}
	t.Logf("%d ticks, payloads %v", len(count), payloads)
}

// overlap = "skip": while the previous tick's job is queued (here: nobody
// runs it), ticks are recorded and counted, not enqueued; once the job is
// done, the next tick is enqueued again.
func TestOverlapSkip(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	c := claimer(t, rdb, "q", nil, Entry{Name: "beat", Schedule: "@every 1s", Overlap: OverlapSkip})
	kinds := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for kinds[Skipped] < 2 && time.Now().Before(deadline) {
		for _, o := range round(t, c) {
			kinds[o.Kind]++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if kinds[Enqueued] != 1 || kinds[Skipped] < 2 {
		t.Fatalf("outcomes %v, want 1 enqueued then skipped ticks", kinds)
	}
	if n, _ := rdb.HGet(ctx, RecordsKey("q"), "beat:count:skipped").Int(); n != kinds[Skipped] {
		t.Fatalf("skipped count %d, want %d", n, kinds[Skipped])
	}
	ls, err := List(ctx, rdb, "q", c.entriesOf())
	if err != nil || len(ls) != 1 || ls[0].Skipped != int64(kinds[Skipped]) || ls[0].Overlap != OverlapSkip {
		t.Fatalf("List = %+v, %v", ls, err)
	}
	// A holder runs and acknowledges the job: the key is freed.
	done := make(chan struct{}, 8)
	h := work.HandlerFunc(func(ctx context.Context, j *work.Job) error { done <- struct{}{}; return nil })
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = work.Run(rctx, work.Config{Client: rdb, Queue: "q", Consumer: "h/run-0", Handler: h, Deadline: time.Now().Add(time.Minute)}, nil)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the job never ran")
	}
	for time.Now().Before(deadline.Add(10 * time.Second)) {
		for _, o := range round(t, c) {
			if o.Kind == Enqueued {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("no tick enqueued after the job was done")
}

// entriesOf returns the claimer's entries, for List.
func (c *Claimer) entriesOf() []Entry {
	var es []Entry
	for _, e := range c.entries {
		es = append(es, e.Entry)
	}
	return es
}

// Through Redis, New York's last repeated hour (the first Sunday of
// November, 1 November in 2026): a holder back after it with catch_up =
// "all" enqueues both 01:30s of that day, each once, and more rounds add
// nothing.
func TestDSTRepeatedHourClaimedOncePerInstant(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatalf("load America/New_York (install tzdata): %v", err)
	}
	var day time.Time // the last fall-back day before today
	for y := time.Now().Year(); day.IsZero() || !day.AddDate(0, 0, 1).Before(time.Now()); y-- {
		day = time.Date(y, 11, 1, 0, 0, 0, 0, time.UTC)
		day = day.AddDate(0, 0, (7-int(day.Weekday()))%7)
	}
	setLast(t, rdb, "q", "night", time.Date(day.Year(), day.Month(), day.Day()-1, 1, 30, 0, 0, ny))
	c := claimer(t, rdb, "q", nil, Entry{Name: "night", Schedule: "CRON_TZ=America/New_York 30 1 * * *", CatchUp: CatchUpAll, CatchUpMax: MaxCatchUp})
	round(t, c)
	round(t, c)
	round(t, c)
	count, _ := jobs(t, rdb, "q")
	for _, want := range []time.Time{day.Add(5*time.Hour + 30*time.Minute), day.Add(6*time.Hour + 30*time.Minute)} {
		if n := count[want.In(ny).Format(time.RFC3339)]; n != 1 {
			t.Errorf("tick %s (%s) enqueued %d times, want once; ticks: %v", want.In(ny).Format(time.RFC3339), want, n, count)
		}
	}
	for tick, n := range count {
		if n != 1 {
			t.Errorf("tick %s enqueued %d times", tick, n)
		}
	}
}

// overlap = "allow" (the default): ticks are enqueued while the previous
// tick's job still waits (nobody runs it here), one job per tick.
func TestOverlapAllow(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	c := claimer(t, rdb, "q", nil, Entry{Name: "beat", Schedule: "@every 1s"})
	kinds := map[string]int{}
	for deadline := time.Now().Add(10 * time.Second); kinds[Enqueued] < 3 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		for _, o := range round(t, c) {
			kinds[o.Kind]++
		}
	}
	count, _ := jobs(t, rdb, "q")
	if kinds[Enqueued] < 3 || kinds[Skipped] != 0 || len(count) != kinds[Enqueued] {
		t.Fatalf("outcomes %v, %d ticks queued; want 3 enqueued ticks, queued together, none skipped", kinds, len(count))
	}
}
