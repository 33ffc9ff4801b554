package work

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

func TestParseRate(t *testing.T) {
	for in, want := range map[string]Rate{"50/s": {50, time.Second}, "300/m": {300, time.Minute}, "1/h": {1, time.Hour}, "": {}} {
		if got, err := ParseRate(in); err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"0/s", "50", "50/d", "-1/s", "x/s", "/s"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q): want an error", bad)
		}
	}
}

// Two holders share one limit of 40/s: over 2s they start about 80 jobs,
// never more than 40 + a twentieth in any one second; the rest wait in the
// queue, unfailed and uncounted.
func TestRateLimitAcrossHolders(t *testing.T) {
	rdb := redistest.Start(t).Client()
	enqueue(t, rdb, "q", 1000)
	var mu sync.Mutex
	var starts []time.Time
	h := HandlerFunc(func(context.Context, *Job) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	begin := time.Now()
	for i, consumer := range []string{"h/run-0", "h/run-1"} {
		c := testConfig(rdb, h)
		c.Consumer, c.Concurrency, c.RateLimit = consumer, 1+i*3, Rate{N: 40, Per: time.Second}
		wg.Add(1)
		go func() { defer wg.Done(); _ = Run(ctx, c, nil) }()
	}
	time.Sleep(3 * time.Second)
	for time.Now().Unix() < begin.Unix()+4 { // three complete seconds of work
		time.Sleep(10 * time.Millisecond)
	}
	recent, err := RecentRate(ctx, rdb, "q")
	cancel()
	wg.Wait()
	// A loaded machine only lowers the rate: the lower bounds are loose.
	if err != nil || recent < 20 || recent > 42 {
		t.Errorf("recent rate %.1f/s (%v), want about 40/s", recent, err)
	}
	// The limiter's own log: no second of Redis' clock granted more than
	// 40 + the burst.
	for field, v := range rdb.HGetAll(ctx, KeysFor("q").RateLog).Val() {
		var sec, n int
		if _, err := fmt.Sscanf(v, "%d %d", &sec, &n); err != nil || n > 42 {
			t.Errorf("rate log %s = %q: want at most 42 grants in a second", field, v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// Judge the last two seconds: the first one includes the holders' start.
	from := begin.Add(time.Second)
	in := func(a, b time.Time) (n int) {
		for _, s := range starts {
			if !s.Before(a) && s.Before(b) {
				n++
			}
		}
		return n
	}
	if n := in(from, from.Add(2*time.Second)); n < 50 || n > 88 {
		t.Fatalf("%d jobs started in 2s at 40/s, want about 80", n)
	}
	// Handlers start a little after their grant, unevenly under load: a
	// second of starts may hold a few grants of the second before.
	for at := from; at.Before(from.Add(time.Second)); at = at.Add(50 * time.Millisecond) {
		if n := in(at, at.Add(time.Second)); n > 46 {
			t.Fatalf("%d jobs started in the second from %v, want at most 46", n, at.Sub(begin))
		}
	}
	if p := pending(t, rdb, "q"); p != 0 {
		t.Fatalf("%d pending after the holders stopped: waiting jobs must not be taken", p)
	}
}

func TestRecentRate(t *testing.T) {
	log := map[string]string{"0": "96 10", "1": "97 20", "2": "98 30", "3": "99 40", "4": "100 999", "5": "93 50", "6": "garbage"}
	if r := recentRate(100, log); r != (20+30+40)/3.0 {
		t.Fatalf("rate %v: want the three complete seconds before now, not now's", r)
	}
}
