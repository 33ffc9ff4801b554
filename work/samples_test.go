package work

import (
	"context"
	"fmt"
	"testing"

	"github.com/baton-run/baton/internal/redistest"
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
