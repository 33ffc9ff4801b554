package work

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/internal/proc"
	"github.com/baton-run/baton/internal/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Micro-benchmarks of the job loop's hot paths, for before/after comparisons
// with benchstat (see docs/benchmarks.md):
//
//	go test -run '^$' -bench . -count 10 ./work/ > old.txt
//
// The side-by-side figures against asynq live in the bench/ module.

// benchBatch is how many entries one read or one ack handles: Config.Batch's default.
const benchBatch = 128

var benchPayload = bytes.Repeat([]byte("p"), 64)

// benchFill replaces queue q with n fresh entries and an empty group.
func benchFill(tb testing.TB, rdb *redis.Client, q string, n int) {
	tb.Helper()
	ctx := context.Background()
	k := KeysFor(q)
	if err := rdb.Del(ctx, k.Stream, k.Stats).Err(); err != nil {
		tb.Fatal(err)
	}
	if err := EnsureGroup(ctx, rdb, k); err != nil {
		tb.Fatal(err)
	}
	for done := 0; done < n; done += 1000 {
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := done; i < min(done+1000, n); i++ {
				p.XAdd(ctx, &redis.XAddArgs{Stream: k.Stream, Values: []any{PayloadField, benchPayload}})
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

func benchRunner(rdb *redis.Client, q string) *runner {
	c := Config{Client: rdb, Queue: q, Consumer: "bench/run-0", Logger: zerolog.Nop()}
	c.defaults()
	return &runner{c: c, keys: KeysFor(q)}
}

// BenchmarkReadBatch is one XREADGROUP of a full batch turned into Jobs.
func BenchmarkReadBatch(b *testing.B) {
	rdb := redistest.Start(b).Client()
	r := benchRunner(rdb, "q")
	ctx := context.Background()
	const perFill = 100 // batches per refill, which is not timed
	b.ReportAllocs()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		if i%perFill == 0 {
			b.StopTimer()
			benchFill(b, rdb, "q", perFill*benchBatch)
			b.StartTimer()
		}
		jobs, err := r.readNew(ctx, benchBatch)
		if err != nil || len(jobs) != benchBatch {
			b.Fatalf("read %d jobs: %v", len(jobs), err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkAckBatch is one call of the ack script (XACK + XDEL + HINCRBY)
// for a full batch of pending entries.
func BenchmarkAckBatch(b *testing.B) {
	rdb := redistest.Start(b).Client()
	r := benchRunner(rdb, "q")
	ctx := context.Background()
	const perFill = 100
	var pendingIDs [][]any
	b.ReportAllocs()
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		if i%perFill == 0 {
			b.StopTimer()
			benchFill(b, rdb, "q", perFill*benchBatch)
			pendingIDs = pendingIDs[:0]
			for range perFill {
				jobs, err := r.readNew(ctx, benchBatch)
				if err != nil {
					b.Fatal(err)
				}
				args := []any{Group, len(jobs), 0, 0, 1} // no histogram, no retention
				for _, j := range jobs {
					args = append(args, j.Entry)
				}
				pendingIDs = append(pendingIDs, args)
			}
			b.StartTimer()
		}
		n, err := ackScript.Run(ctx, rdb, []string{r.keys.Stream, r.keys.Stats, r.keys.Done, r.keys.Waiters, r.keys.Results}, pendingIDs[i%perFill]...).Int()
		if err != nil || n != benchBatch {
			b.Fatalf("acked %d: %v", n, err)
		}
	}
	b.ReportMetric(float64(b.N*benchBatch)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkRun is the whole loop with a no-op handler: read, hand to a
// worker, ack. One op is one job.
func BenchmarkRun(b *testing.B) {
	for _, conc := range []int{1, 10} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			benchRun(b, conc, HandlerFunc(func(context.Context, *Job) error { return nil }))
		})
	}
}

// BenchmarkRunRetention is BenchmarkRun with a retention: each ack batch
// also records its jobs as done (ZADD, trims, PEXPIRE in the same script).
func BenchmarkRunRetention(b *testing.B) {
	for _, conc := range []int{1, 10} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			benchRun(b, conc, HandlerFunc(func(context.Context, *Job) error { return nil }), func(c *Config) { c.Retention = time.Hour })
		})
	}
}

// BenchmarkRunExec is the whole loop in exec mode: one /bin/true per job.
// Against BenchmarkExecSpawn it shows what the loop adds to each job.
func BenchmarkRunExec(b *testing.B) {
	for _, conc := range []int{1, 2} {
		b.Run("c"+strconv.Itoa(conc), func(b *testing.B) {
			benchRun(b, conc, benchExec(b))
		})
	}
}

// benchRun runs b.N jobs through Run with h; the clock runs from the call
// of Run until b.N jobs are done (polled every 50µs). At concurrency 1 it
// also reports the median gap between one job's return and the next one's
// start: what the loop adds to every job, free of the handler's own noise.
func benchRun(b *testing.B, conc int, h Handler, opts ...func(*Config)) {
	rdb := redistest.Start(b).Client()
	benchFill(b, rdb, "q", b.N)
	benchRunOn(b, rdb, conc, h, opts...)
}

// benchRunOn is benchRun on rdb, filled with b.N jobs in queue "q".
func benchRunOn(b *testing.B, rdb *redis.Client, conc int, h Handler, opts ...func(*Config)) {
	var (
		mu   sync.Mutex
		last time.Time
		gaps []float64
	)
	if conc == 1 {
		inner := h
		h = HandlerFunc(func(ctx context.Context, j *Job) error {
			now := time.Now()
			mu.Lock()
			if !last.IsZero() {
				gaps = append(gaps, float64(now.Sub(last))/float64(time.Microsecond))
			}
			mu.Unlock()
			err := inner.Handle(ctx, j)
			mu.Lock()
			last = time.Now()
			mu.Unlock()
			return err
		})
	}
	st := new(Stats)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	done := make(chan struct{})
	b.ReportAllocs()
	b.ResetTimer()
	c := Config{Client: rdb, Queue: "q", Consumer: "bench/run-0", Handler: h, Concurrency: conc, Logger: zerolog.Nop()}
	for _, o := range opts {
		o(&c)
	}
	go func() { errc <- Run(ctx, c, st) }()
	go func() {
		defer close(done)
		for st.Done.Load() < int64(b.N) {
			time.Sleep(50 * time.Microsecond)
		}
	}()
	select {
	case <-done:
	case err := <-errc:
		b.Fatalf("Run stopped after %d of %d jobs: %v", st.Done.Load(), b.N, err)
	}
	b.StopTimer()
	cancel()
	<-errc
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	if len(gaps) > 0 {
		slices.Sort(gaps)
		b.ReportMetric(gaps[len(gaps)/2], "gap-µs")
	}
}

// benchExec is the exec handler as a holder runs it: with a token, in a
// child subreaper, so each job pays for the look at orphans.
func benchExec(b *testing.B) *Exec {
	if err := proc.BecomeSubreaper(); err != nil {
		b.Fatal(err)
	}
	return &Exec{Argv: []string{"/bin/true"}, Logger: zerolog.Nop(), Holder: proc.NewToken()}
}

// BenchmarkExecSpawn is one exec-mode job: /bin/true with the payload on
// stdin, in its own process group, with Pdeathsig.
func BenchmarkExecSpawn(b *testing.B) {
	x := benchExec(b)
	j := &Job{ID: "1-0", Payload: benchPayload, Attempt: 1, Queue: "q", Slot: "bench/run-0"}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := x.Handle(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkForkExecBare is the ceiling for BenchmarkExecSpawn: os/exec runs
// /bin/true with the same stdin and nothing else.
func BenchmarkForkExecBare(b *testing.B) {
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command("/bin/true")
		cmd.Stdin = bytes.NewReader(benchPayload)
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEnqueue is EnqueueMany of 1,000 jobs (what `baton enqueue` sends
// per round trip), per kind of job; ns/op is per job. server-ns/job is the
// time Redis spent on the calls (INFO commandstats), the rest is the client's
// and the round trips'.
func BenchmarkEnqueue(b *testing.B) {
	srv := redistest.Start(b)
	rdb := srv.Client()
	ctx := context.Background()
	kinds := []struct {
		name string
		opt  func(i int) []Option
	}{
		{"xadd", nil}, // the bar: bare pipelined XADDs, 1,000 per round trip
		{"plain", func(int) []Option { return nil }},
		{"unique", func(i int) []Option { return []Option{UniqueKey("job-" + strconv.Itoa(i))} }},
		{"in", func(int) []Option { return []Option{In(time.Hour)} }},
		{"priority", func(int) []Option { return []Option{WithPriority(PriorityHigh)} }},
	}
	for _, kind := range kinds {
		b.Run(kind.name, func(b *testing.B) {
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			msgs := make([]Message, 1000)
			n := 0
			fill := func() {
				for i := range msgs {
					msgs[i] = Message{Payload: benchPayload}
					if kind.opt != nil {
						msgs[i].Options = kind.opt(n)
					}
					n++
				}
			}
			if kind.opt == nil {
				stream := KeysFor("bench").Stream
				rdb.ConfigResetStat(ctx)
				b.ResetTimer()
				for done := 0; done < b.N; done += len(msgs) {
					_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
						for range msgs {
							p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{PayloadField, benchPayload}})
						}
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
				return
			}
			fill()
			if _, err := EnqueueMany(ctx, rdb, "bench", msgs); err != nil { // loads the script
				b.Fatal(err)
			}
			rdb.ConfigResetStat(ctx)
			b.ResetTimer()
			for done := 0; done < b.N; done += len(msgs) {
				if kind.name != "plain" { // plain jobs are all alike
					b.StopTimer()
					fill()
					b.StartTimer()
				}
				if _, err := EnqueueMany(ctx, rdb, "bench", msgs); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			info, err := rdb.Info(ctx, "commandstats").Result()
			if err != nil {
				b.Fatal(err)
			}
			var usec float64
			for _, line := range strings.Split(info, "\r\n") {
				// evalsha's time includes the commands its script calls
				if _, rest, ok := strings.Cut(line, ",usec="); ok && (strings.HasPrefix(line, "cmdstat_evalsha:") || kind.name == "plain" && strings.HasPrefix(line, "cmdstat_xadd:")) {
					v, _, _ := strings.Cut(rest, ",")
					u, _ := strconv.ParseFloat(v, 64)
					usec += u
				}
			}
			b.ReportMetric(usec*1000/float64(b.N), "server-ns/job")
		})
	}
}
