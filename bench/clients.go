package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/work"
)

// The clients group: jobs per second a producer adds in batches of 1,000
// (one round trip each), 100,000 jobs a run: baton's Go client
// (work.EnqueueMany, what baton enqueue runs), its Python and Node clients
// (clients/python, clients/node, the same Lua), rq's own batched enqueue
// (Queue.enqueue_many in one pipeline) and BullMQ's (Queue.addBulk); plain
// jobs, and baton's at high priority (through the enqueue script). Each
// producer first sends 5 batches untimed (its connection, the scripts,
// the JIT's first compilations), then times itself from its first batch
// to its last reply, so the interpreter's start is not counted.

// clientFiles are the producers' programs, written to a temp dir. Each
// prints its jobs per second.
var clientFiles = map[string]string{
	"baton_py.py": `import os, sys, time
sys.path.insert(0, os.environ["BENCH_CLIENT"])
import redis, baton_client

c = baton_client.Client(redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))
n, p = int(os.environ["BENCH_N"]), os.environ["BENCH_PAYLOAD"].encode()
opts = {"priority": "high"} if os.environ["BENCH_KIND"] == "high" else {}
chunk = [p] * 1000
for _ in range(5):
    c.enqueue_many("warm", chunk, **opts)  # the connection and the script, not timed
start = time.perf_counter()
for i in range(0, n, 1000):
    c.enqueue_many("bench", chunk[:min(1000, n - i)], **opts)
print(n / (time.perf_counter() - start))
`,
	"baton_node.js": `const { Client } = require(process.env.BENCH_CLIENT);
(async () => {
  const c = new Client(process.env.BENCH_REDIS_URL);
  const n = Number(process.env.BENCH_N), p = Buffer.from(process.env.BENCH_PAYLOAD);
  const opts = process.env.BENCH_KIND === "high" ? { priority: "high" } : {};
  const chunk = new Array(1000).fill(p);
  // the connection, the script and the JIT's first compilations, not timed
  for (let i = 0; i < 5; i++) await c.enqueueMany("warm", chunk, opts);
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i += 1000) await c.enqueueMany("bench", chunk.slice(0, Math.min(1000, n - i)), opts);
  console.log(n / (Number(process.hrtime.bigint() - start) / 1e9));
  await c.close();
})().catch((e) => { console.error(e); process.exit(1); });
`,
	"rq_batch.py": `import os, time, redis, rq

r = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
q = rq.Queue("bench", connection=r)
n, p = int(os.environ["BENCH_N"]), os.environ["BENCH_PAYLOAD"].encode()
with r.pipeline() as pipe:  # the connection, not timed
    q.enqueue_many([rq.Queue.prepare_data("rqjobs.noop", (p,)) for _ in range(1000)], pipeline=pipe)
    pipe.execute()
start = time.perf_counter()
for i in range(0, n, 1000):
    with r.pipeline() as pipe:
        q.enqueue_many([rq.Queue.prepare_data("rqjobs.noop", (p,)) for _ in range(min(1000, n - i))], pipeline=pipe)
        pipe.execute()
print(n / (time.perf_counter() - start))
`,
	"bullmq_batch.js": `const { Queue } = require("bullmq");
(async () => {
  const q = new Queue("bench", { connection: { url: process.env.BENCH_REDIS_URL } });
  const n = Number(process.env.BENCH_N), p = process.env.BENCH_PAYLOAD;
  // the connection, BullMQ's scripts and the JIT's first compilations, not timed
  for (let w = 0; w < 5; w++) await q.addBulk(Array.from({ length: 1000 }, () => ({ name: "warm", data: { p } })));
  const start = process.hrtime.bigint();
  for (let i = 0; i < n; i += 1000) {
    const jobs = [];
    for (let k = 0; k < Math.min(1000, n - i); k++) jobs.push({ name: "noop", data: { p } });
    await q.addBulk(jobs);
  }
  console.log(n / (Number(process.hrtime.bigint() - start) / 1e9));
  await q.close();
})().catch((e) => { console.error(e); process.exit(1); });
`,
}

// clientJobs is how many jobs one run of the clients group adds.
func (b *bench) clientJobs() int {
	if b.cfg.Quick {
		return 5 * b.cfg.Jobs
	}
	return 100000
}

func (b *bench) clients(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "baton-bench-clients-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for name, src := range clientFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			return err
		}
	}
	pyClient, err := filepath.Abs(filepath.Join("..", "clients", "python"))
	if err != nil {
		return err
	}
	nodeClient, err := filepath.Abs(filepath.Join("..", "clients", "node"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(pyClient, "baton_client", "__init__.py")); err != nil {
		return errors.New("run the bench from its directory, bench/ (make bench does): the clients group runs ../clients")
	}
	if msg, err := exec.Command(pythonBin, "-c", "import redis, rq").CombinedOutput(); err != nil {
		return fmt.Errorf("the clients group needs Debian's python3-redis and python3-rq (scripts/install-bench-deps.sh, run by make bench, installs them): %s", tail(msg))
	}
	mods := bullmqDir() // ioredis comes with it
	if mods == "" {
		progress("clients: bullmq and ioredis not installed in %s (scripts/install-bench-deps.sh installs them): the Node client and BullMQ not measured", bullmqCache())
	}
	n := b.clientJobs()
	run := func(argv []string, client, kind string) func() (float64, error) {
		return func() (float64, error) {
			rdb := b.srv.Client(0)
			defer rdb.Close()
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				return 0, err
			}
			cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "BENCH_REDIS_URL="+b.srv.URL(), "BENCH_N="+strconv.Itoa(n),
				"BENCH_PAYLOAD="+string(payload), "BENCH_KIND="+kind, "BENCH_CLIENT="+client, "NODE_PATH="+mods,
				"PYTHONPATH="+dir)
			out, err := cmd.Output()
			if err != nil {
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					return 0, fmt.Errorf("%s: %v: %s", argv[1], err, tail(ee.Stderr))
				}
				return 0, err
			}
			return strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
		}
	}
	goRate := func(p work.Priority) func() (float64, error) {
		return func() (float64, error) {
			rdb := b.srv.Client(0)
			defer rdb.Close()
			if err := rdb.FlushAll(ctx).Err(); err != nil {
				return 0, err
			}
			var opts []work.Option
			if p != work.PriorityNormal {
				opts = []work.Option{work.WithPriority(p)}
			}
			msgs := make([]work.Message, 1000)
			for i := range msgs {
				msgs[i] = work.Message{Payload: payload, Options: opts}
			}
			for range 5 { // the connection and the script, not timed, as for the others
				if _, err := work.EnqueueMany(ctx, rdb, "warm", msgs); err != nil {
					return 0, err
				}
			}
			start := time.Now()
			for i := 0; i < n; i += 1000 {
				if _, err := work.EnqueueMany(ctx, rdb, "bench", msgs[:min(1000, n-i)]); err != nil {
					return 0, err
				}
			}
			return float64(n) / time.Since(start).Seconds(), nil
		}
	}
	py := func(kind string) func() (float64, error) {
		return run([]string{pythonBin, "baton_py.py"}, pyClient, kind)
	}
	node := func(kind string) func() (float64, error) {
		return run([]string{"node", "baton_node.js"}, nodeClient, kind)
	}
	cs := []contender{
		{"client_go_batch", "jobs/s", goRate(work.PriorityNormal)},
		{"client_py_batch", "jobs/s", py("plain")},
		{"client_node_batch", "jobs/s", node("plain")},
		{"rq_enqueue_many", "jobs/s", run([]string{pythonBin, "rq_batch.py"}, "", "plain")},
		{"bullmq_add_bulk", "jobs/s", run([]string{"node", "bullmq_batch.js"}, "", "plain")},
		{"client_go_batch_high", "jobs/s", goRate(work.PriorityHigh)},
		{"client_py_batch_high", "jobs/s", py("high")},
		{"client_node_batch_high", "jobs/s", node("high")},
	}
	if mods == "" {
		cs = slices.DeleteFunc(cs, func(c contender) bool {
			return strings.Contains(c.name, "node") || strings.Contains(c.name, "bullmq")
		})
	}
	return b.rounds(ctx, cs)
}
