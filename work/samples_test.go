package work

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestSampleStats: one sample per minute of Redis's clock however often it
// is called, holding the stats hash as it was; the list stays capped.
func TestSampleStats(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	k := KeysFor("s")
	rdb.HSet(ctx, k.Stats, StatDone, 103, StatDeadPrefix+"failed", 3, StatDurSumUS, "123456789012345678")
	if ok, err := SampleStats(ctx, rdb, "s"); err != nil || !ok {
		t.Fatalf("first sample: appended %v, %v", ok, err)
	}
	if ok, err := SampleStats(ctx, rdb, "s"); err != nil || ok {
		t.Fatalf("second sample in the same minute: appended %v, %v; want false", ok, err)
	}
	got, err := ReadSamples(ctx, rdb, "s")
	if err != nil || len(got) != 1 {
		t.Fatalf("samples: %v, %v", got, err)
	}
	s := got[0]
	if s.Stats[StatDone] != 103 || s.Stats[StatDeadPrefix+"failed"] != 3 || s.Stats[StatDurSumUS] != 123456789012345678 {
		t.Errorf("sample holds %v", s.Stats)
	}
	if s.At.Unix()%60 != 0 {
		t.Errorf("sample at %v: not a whole minute", s.At)
	}

	// Older samples beyond SamplesKept are trimmed by the next append.
	rdb.Del(ctx, SamplesKey("s"))
	for i := range SamplesKept + 10 {
		rdb.LPush(ctx, SamplesKey("s"), fmt.Sprintf(`{"t":%d,"s":{}}`, 60*(i+1)))
	}
	if ok, err := SampleStats(ctx, rdb, "s"); err != nil || !ok {
		t.Fatalf("sample after old ones: %v, %v", ok, err)
	}
	got, _ = ReadSamples(ctx, rdb, "s")
	if len(got) != SamplesKept || got[len(got)-1].Stats[StatDone] != 103 || got[0].At.Unix() != 60*12 {
		t.Errorf("%d samples kept, newest %v, oldest at %d", len(got), got[len(got)-1].Stats, got[0].At.Unix())
	}
}

// TestStartSampling: a holder's sampler appends at once, and stops at once
// even while Redis does not answer.
func TestStartSampling(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	stop := StartSampling(rdb, "s", func(err error) { t.Errorf("sampling: %v", err) })
	deadline := time.Now().Add(5 * time.Second)
	for rdb.LLen(context.Background(), SamplesKey("s")).Val() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no sample in 5s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	// A Redis that accepts connections and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	mute := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), ReadTimeout: time.Minute, MaxRetries: -1})
	defer mute.Close()
	stop = StartSampling(mute, "s", nil)
	time.Sleep(200 * time.Millisecond) // the first call is in flight
	began := time.Now()
	stop()
	if d := time.Since(began); d > time.Second {
		t.Errorf("stop took %v with a call in flight", d)
	}
}
