package sim

import (
	"flag"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/baton-run/baton/standby"
)

// base is the default config (lifetime 5m, jitter 1m, standby_wait 15m, poll
// 500ms, grace 30s, job_timeout 1m) with a second standby slot, every minute.
func base() standby.Quantities {
	return standby.Quantities{
		Spawn: 1, Slots: 1, StandbySlots: 2,
		Lifetime: 5 * time.Minute, Jitter: time.Minute, StandbyWait: 15 * time.Minute,
		Poll: 500 * time.Millisecond, Grace: 30 * time.Second, HardMargin: 2 * time.Second,
		JobTimeout: time.Minute, Visibility: 10 * time.Minute,
	}
}

func schedule(tb testing.TB, specs ...string) *standby.Schedule {
	tb.Helper()
	s, err := standby.ParseSchedule(specs...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func run(tb testing.TB, c Config) *Result {
	tb.Helper()
	res, err := Run(c)
	if err != nil {
		tb.Fatal(err)
	}
	return res
}

func TestDefaultConfigIsCovered(t *testing.T) {
	res := run(t, Config{Schedule: schedule(t, "* * * * *"), Q: base(), Seed: 1})
	if res.Full != 1 || res.Any != 1 || res.Gaps != 0 || res.LongestBelow != 0 {
		t.Fatalf("full %v any %v gaps %d longest %v", res.Full, res.Any, res.Gaps, res.LongestBelow)
	}
	// Handovers take at most 1.1 × poll, and cost the strict measure a little.
	if res.HandoverMax > 550*time.Millisecond || res.FullStrict >= 1 || res.FullStrict < 0.999 {
		t.Fatalf("handover max %v, strict %v", res.HandoverMax, res.FullStrict)
	}
	// Every firing starts one candidate: most find both standby slots taken;
	// a holder retires every 5.5 minutes or so; the spare standby times out
	// now and then, as it should.
	if res.Firings < 43150 || res.Candidates != res.Firings ||
		res.Candidates != res.Direct+res.Standbys+res.Nothing || res.Promotions < 7000 ||
		res.Standbys != res.Promotions+res.Timeouts+2 && res.Standbys != res.Promotions+res.Timeouts+1 {
		t.Fatalf("%+v", res)
	}
	if len(res.Slots) != 1 || res.Slots[0].Held < 0.999 || len(res.Buckets) != Buckets || res.Buckets[0].Min != 1 {
		t.Fatalf("slots %+v buckets %+v", res.Slots, res.Buckets[0])
	}
}

func TestDeterministic(t *testing.T) {
	c := Config{Schedule: schedule(t, "*/2 * * * *"), Q: base(), Seed: 7, CrashRate: 1, HangRate: 0.2, Horizon: 5 * 24 * time.Hour}
	a, b := run(t, c), run(t, c)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two runs with one seed differ")
	}
	c.Seed = 8
	if reflect.DeepEqual(a, run(t, c)) {
		t.Fatal("two seeds gave the same run")
	}
}

func TestCrashesAndHangs(t *testing.T) {
	q := base()
	none := run(t, Config{Schedule: schedule(t, "* * * * *"), Q: q, Seed: 3})
	crashy := run(t, Config{Schedule: schedule(t, "* * * * *"), Q: q, Seed: 3, CrashRate: 2})
	hung := run(t, Config{Schedule: schedule(t, "* * * * *"), Q: q, Seed: 3, HangRate: 2})
	if crashy.Crashes < 1000 || crashy.Promotions <= none.Promotions {
		t.Fatalf("crashes %d promotions %d vs %d", crashy.Crashes, crashy.Promotions, none.Promotions)
	}
	// A standby takes a crashed holder's slot within a poll: crashes alone
	// leave no gap while a standby is there.
	if crashy.Full < 0.9999 {
		t.Fatalf("crash rate 2/h: full %v", crashy.Full)
	}
	// A hung holder keeps its slot, doing nothing, until its hard deadline.
	if hung.Hangs < 1000 || hung.Full > 0.95 {
		t.Fatalf("hangs %d full %v", hung.Hangs, hung.Full)
	}
}

// TestQueuedPollerLeaves is a regression test: when the standby whose poll
// was queued timed out first, no other standby polled again and the slot
// waited for the next firing.
func TestQueuedPollerLeaves(t *testing.T) {
	q := base()
	q.Spawn, q.Lifetime, q.Jitter, q.StandbyWait = 3, 85*time.Second, 8*time.Second, 6*time.Minute
	sc := schedule(t, "0-29 * * * *", "30-59 * * * *")
	for seed := uint64(0); seed < 5; seed++ {
		if res := run(t, Config{Schedule: sc, Q: q, Seed: seed, Horizon: 10 * 24 * time.Hour}); res.Gaps > 0 {
			t.Fatalf("seed %d: %d gaps, longest %v", seed, res.Gaps, res.LongestBelow)
		}
	}
}

func TestWarmup(t *testing.T) {
	q := base()
	q.Slots, q.StandbySlots, q.Spawn = 4, 6, 2
	q.C, q.Lines = 5*time.Minute, 1
	if got, want := Warmup(q), 10*time.Minute+time.Second; got != want {
		t.Fatalf("Warmup = %v, want %v", got, want)
	}
}

func TestRunErrors(t *testing.T) {
	for name, c := range map[string]Config{
		"no schedule":      {Q: base()},
		"no slots":         {Schedule: schedule(t, "* * * * *"), Q: standby.Quantities{Spawn: 1, Lifetime: time.Minute, Poll: time.Second}},
		"negative crashes": {Schedule: schedule(t, "* * * * *"), Q: base(), CrashRate: -1},
		"short horizon":    {Schedule: schedule(t, "@hourly"), Q: base(), Horizon: 30 * time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Run(c); err == nil {
				t.Fatal("no error")
			}
		})
	}
}

// Flags for a longer run of the property, e.g. the one docs/coverage.md reports:
//
//	go test ./internal/sim -run TestCheckImpliesCoverage -cases 4000 -days 15
var (
	propCases = flag.Int("cases", 300, "TestCheckImpliesCoverage: configs that pass check to simulate")
	propDays  = flag.Int("days", 3, "TestCheckImpliesCoverage: simulated days per config")
)

// TestCheckImpliesCoverage is the property that keeps check and simulate in
// agreement: a config that passes every relation (no FAIL, no WARN) keeps k
// holders at every instant after the warm-up of a crash-free run. The configs
// are drawn near the limits, so many pass by a small margin.
func TestCheckImpliesCoverage(t *testing.T) {
	cases := *propCases
	r := rand.New(rand.NewPCG(1, 2))
	tried := 0
	for n := 0; n < cases; tried++ {
		q, sc := randomConfig(r)
		if !passes(q) {
			continue
		}
		n++
		res := run(t, Config{Schedule: sc, Q: q, Seed: uint64(tried), Horizon: time.Duration(*propDays) * 24 * time.Hour})
		if res.Full != 1 {
			t.Errorf("passes check but has gaps: %v k=%d N_s=%d spawn=%d lifetime=%v jitter=%v S=%v grace=%v poll=%v: full %.6f, %d gaps, longest %v",
				sc, q.Slots, q.StandbySlots, q.Spawn, q.Lifetime, q.Jitter, q.StandbyWait, q.Grace, q.Poll, res.Full, res.Gaps, res.LongestBelow)
		}
	}
	t.Logf("%d of %d random configs pass check; each simulated for %d days", cases, tried, *propDays)
	if tried > 4*cases {
		t.Fatalf("only %d of %d random configs pass: the generator no longer explores the limits", cases, tried)
	}
}

// TestFailingRelationShowsGap is the other direction, one config per
// relation: each fails check on that relation and the simulation shows the
// gap. (visibility-timeout is about duplicate work, not coverage, and
// max-jobs depends on throughput: neither is simulated.)
func TestFailingRelationShowsGap(t *testing.T) {
	for _, tc := range []struct {
		relation string
		specs    []string
		edit     func(q *standby.Quantities)
		strict   bool // the gap is in handovers: measured without counting them
	}{
		{"standby-outwaits-lifetime", []string{"* * * * *"}, func(q *standby.Quantities) {
			q.StandbySlots, q.StandbyWait = 1, 4*time.Minute
		}, false},
		{"standby-outwaits-deadline", []string{"* * * * *"}, func(q *standby.Quantities) {
			q.StandbySlots, q.Jitter, q.Grace, q.JobTimeout, q.StandbyWait = 1, 0, time.Minute, 2*time.Minute, 5*time.Minute+30*time.Second
		}, false},
		// A candidate that starts during the standby's poll interval takes
		// the slot (1 handover in 100 at poll 1s); the standby passed over
		// then times out while the new holder runs.
		{"standby-survives-lost-handover", []string{"* * * * *"}, func(q *standby.Quantities) {
			q.StandbySlots, q.Grace, q.Poll, q.StandbyWait = 1, 0, time.Second, 10*time.Minute
		}, false},
		{"cron-beats-lifetime", []string{"@hourly"}, func(q *standby.Quantities) {}, false},
		{"replenishment", []string{"* * * * *"}, func(q *standby.Quantities) {
			q.Slots, q.StandbySlots, q.Lifetime, q.Jitter, q.Grace, q.StandbyWait = 4, 5, 3*time.Minute, 0, 0, 7*time.Minute
		}, false},
		{"standby-slots", []string{"* * * * *"}, func(q *standby.Quantities) {
			q.Slots, q.StandbySlots, q.Spawn, q.Jitter = 4, 2, 4, 0
		}, false},
		{"standby-spare", []string{"* * * * *"}, func(q *standby.Quantities) {
			q.Slots, q.StandbySlots, q.Spawn = 2, 2, 4
			q.Lifetime, q.Jitter, q.StandbyWait, q.Grace, q.JobTimeout = 83*time.Second, 0, 242*time.Second, 36*time.Second, 81*time.Second
		}, false},
		{"poll-interval", []string{"* * * * *"}, func(q *standby.Quantities) { q.Poll = 20 * time.Second }, true},
	} {
		t.Run(tc.relation, func(t *testing.T) {
			q := base()
			tc.edit(&q)
			sc := schedule(t, tc.specs...)
			q.C, q.Lines, q.PeakLines = sc.Gap(), sc.MinLines(), sc.PeakLines()
			failed := false
			for _, rel := range standby.Check(q) {
				if rel.Name == tc.relation {
					failed = rel.Status == standby.Fail
				}
			}
			if !failed {
				t.Fatalf("%s does not fail for this config", tc.relation)
			}
			res := run(t, Config{Schedule: sc, Q: q, Seed: 1, Horizon: 10 * 24 * time.Hour})
			measured := res.Full
			if tc.strict {
				measured = res.FullStrict
			}
			if measured == 1 || !tc.strict && res.LongestBelow < 10*time.Second {
				t.Fatalf("no gap: full %.6f strict %.6f, %d gaps", res.Full, res.FullStrict, res.Gaps)
			}
			t.Logf("full %.5f strict %.5f, %d gaps, longest %v", res.Full, res.FullStrict, res.Gaps, res.LongestBelow)
		})
	}
}

// TestStandbySpareMatters backs relation standby-spare across many configs:
// among random configs with k ≥ 2 that pass every other relation but have
// only N_s = k standby slots, a good share show gaps. It simulates a fifth
// of -cases, for -days each. Run longer with
//
//	go test ./internal/sim -run TestStandbySpareMatters -v -cases 1000 -days 10
func TestStandbySpareMatters(t *testing.T) {
	cases := max(*propCases/5, 20)
	r := rand.New(rand.NewPCG(3, 4))
	gapped := 0
	for n, tried := 0, 0; n < cases; tried++ {
		q, sc := randomConfig(r)
		if q.Slots < 2 {
			continue
		}
		q.StandbySlots = q.Slots
		only := true
		for _, rel := range standby.Check(q) {
			only = only && (rel.Status == standby.Pass || rel.Name == "standby-spare")
		}
		if !only {
			continue
		}
		n++
		if res := run(t, Config{Schedule: sc, Q: q, Seed: uint64(tried), Horizon: time.Duration(*propDays) * 24 * time.Hour}); res.Gaps > 0 {
			gapped++
		}
	}
	t.Logf("%d of %d configs that fail only standby-spare (N_s = k) show gaps in %d days", gapped, cases, *propDays)
	if gapped == 0 {
		t.Fatal("no config failing standby-spare showed a gap: is the relation still needed?")
	}
}

// BenchmarkThirtyDays simulates 30 days of the default config.
func BenchmarkThirtyDays(b *testing.B) {
	sc := schedule(b, "* * * * *")
	for i := 0; i < b.N; i++ {
		if _, err := Run(Config{Schedule: sc, Q: base(), Seed: uint64(i), CrashRate: 0.1}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkThirtyDaysBusy simulates 30 days of 64 slots fed 16 candidates a minute.
func BenchmarkThirtyDaysBusy(b *testing.B) {
	sc := schedule(b, "* * * * *")
	q := base()
	q.Slots, q.StandbySlots, q.Spawn = 64, 80, 16
	for i := 0; i < b.N; i++ {
		if _, err := Run(Config{Schedule: sc, Q: q, Seed: uint64(i), CrashRate: 0.1}); err != nil {
			b.Fatal(err)
		}
	}
}
