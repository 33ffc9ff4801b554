package work

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/rs/zerolog"
)

// benchWorkers are no-op persistent workers built on the example helpers.
var benchWorkers = []struct{ name, bin, code string }{
	{"python", "python3", "import sys; sys.path.insert(0, '../examples/python'); import baton_worker; baton_worker.serve(lambda payload, job: None)"},
	{"node", "node", "require('../examples/node/baton-worker.js').serve(() => {})"},
}

// benchPersistent is a warm persistent handler (its child started) running
// the no-op worker w, as a holder runs it: with a token, in a subreaper.
func benchPersistent(b *testing.B, bin, code string) *Persistent {
	b.Helper()
	path, err := exec.LookPath(bin)
	if err != nil {
		b.Fatalf("%s is needed for this benchmark", bin)
	}
	if err := proc.BecomeSubreaper(); err != nil {
		b.Fatal(err)
	}
	flag := "-c"
	if bin == "node" {
		flag = "-e"
	}
	p := &Persistent{Argv: []string{path, flag, code}, Logger: zerolog.Nop(), Holder: proc.NewToken()}
	b.Cleanup(func() { _ = p.Close(context.Background()) })
	if err := p.Handle(context.Background(), &Job{ID: "warm-up", Attempt: 1, Queue: "q"}); err != nil {
		b.Fatal(err)
	}
	return p
}

// BenchmarkRunPersistent is the whole loop in persistent mode with a no-op
// handler in Python and in Node, at concurrency 1: read, frame to the
// child, its result, ack. One op is one job; compare with BenchmarkRun/c1
// (in-process Go) and BenchmarkRunExec/c1 (one process per job).
func BenchmarkRunPersistent(b *testing.B) {
	for _, w := range benchWorkers {
		b.Run(w.name+"/c1", func(b *testing.B) {
			benchRun(b, 1, benchPersistent(b, w.bin, w.code))
		})
	}
}

// BenchmarkPersistentRoundTrip is the protocol alone, without Redis: one job
// frame (64-byte payload) to a no-op child and its result back. It reports
// the median and 99th percentile of one round trip: the latency persistent
// mode adds to a job.
func BenchmarkPersistentRoundTrip(b *testing.B) {
	for _, w := range benchWorkers {
		b.Run(w.name, func(b *testing.B) {
			p := benchPersistent(b, w.bin, w.code)
			j := &Job{ID: "1700000000000-0", Attempt: 1, Queue: "q", Payload: benchPayload}
			ctx := context.Background()
			took := make([]float64, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if err := p.Handle(ctx, j); err != nil {
					b.Fatal(err)
				}
				took = append(took, float64(time.Since(start))/float64(time.Microsecond))
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(took[len(took)/2], "p50-µs")
			b.ReportMetric(took[len(took)*99/100], "p99-µs")
		})
	}
}
