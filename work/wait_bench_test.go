package work

import (
	"context"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/redistest"
)

// BenchmarkWaitAfterAck reports how long Wait takes to return after the
// job's handler returned (the ack, its notify and the BLPOP's wake-up):
// p50 and p99 over b.N jobs, one at a time.
func BenchmarkWaitAfterAck(b *testing.B) {
	rdb := redistest.Start(b).Client()
	ctx := context.Background()
	var returned atomic.Int64
	release := make(chan struct{})
	c := testConfig(rdb, HandlerFunc(func(ctx context.Context, j *Job) error {
		<-release
		returned.Store(time.Now().UnixNano())
		return nil
	}))
	runFor(b, c)
	lat := make([]time.Duration, 0, b.N)
	for range b.N {
		id := put(b, rdb, "x")[0]
		w := waitAsync(b, rdb, "q", id, ctx)
		release <- struct{}{}
		got := within(b, w, 10*time.Second)
		if got.err != nil {
			b.Fatal(got.err)
		}
		lat = append(lat, time.Since(time.Unix(0, returned.Load())))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
}
