package scale

import (
	"testing"
	"time"
)

func simConfig(arrivals string, horizon time.Duration) SimConfig {
	as, err := ParseArrivals(arrivals)
	if err != nil {
		panic(err)
	}
	return SimConfig{Policy: pol, Arrivals: as, JobTime: 5 * time.Millisecond, Concurrency: 1, Startup: 50 * time.Millisecond,
		Lifetime: 5 * time.Minute, Jitter: time.Minute, Horizon: horizon, Seed: 1}
}

func TestSimulateBurst(t *testing.T) {
	c := simConfig("20000@10s", time.Hour)
	on, err := Simulate(c, true)
	if err != nil {
		t.Fatal(err)
	}
	off, err := Simulate(c, false)
	if err != nil {
		t.Fatal(err)
	}
	if on.Jobs != 20000 || on.MostHolders != 4 || off.MostHolders != 1 {
		t.Fatalf("on %+v off %+v", on, off)
	}
	burstOn, burstOff := on.Drained-10*time.Second, off.Drained-10*time.Second
	if burstOff < 100*time.Second || burstOn*3 > burstOff {
		t.Fatalf("drained in %s with scaling, %s without: want ≥ 3× faster", burstOn, burstOff)
	}
	if tail := on.Settled - on.Drained; tail < pol.IdleExit || tail > pol.IdleExit+2*time.Second {
		t.Fatalf("back to k %s after drained, want idle_exit %s + at most 2s", tail, pol.IdleExit)
	}
	if on.Started != 3 || on.Left != 3 {
		t.Fatalf("started %d, left %d: want 3 and 3", on.Started, on.Left)
	}
}

// TestSimulateSteady: a load one holder serves at half its capacity starts
// no one.
func TestSimulateSteady(t *testing.T) {
	on, err := Simulate(simConfig("100/s", 10*time.Minute), true)
	if err != nil {
		t.Fatal(err)
	}
	if on.ScaleUps != 0 || on.MostHolders != 1 {
		t.Fatalf("steady load: %d scale-ups, %d holders at most", on.ScaleUps, on.MostHolders)
	}
}

func TestParseArrivals(t *testing.T) {
	for _, bad := range []string{"", "x", "0@1s", "20000@soon", "-5/s", "100/s@5m-1m", "100/s@x"} {
		if _, err := ParseArrivals(bad); err == nil {
			t.Errorf("ParseArrivals(%q): no error", bad)
		}
	}
	as, err := ParseArrivals("20000@10s, 50/s@1m-2m,7")
	if err != nil || len(as) != 3 || as[0].Jobs != 20000 || as[0].At != 10*time.Second || as[1].Rate != 50 || as[1].Until != 2*time.Minute || as[2].Jobs != 7 {
		t.Fatalf("%+v %v", as, err)
	}
}
