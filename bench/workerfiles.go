package main

import (
	"os"
	"path/filepath"
)

// The outside workers' programs, written to a temp dir by writeWorkerFiles.
// Every one runs the same no-op handler with the 64-byte payload as its one
// argument; stamp() in the handler notes the first job's start and, at the
// n-th return, writes the seconds between them to $BENCH_OUT.
var workerFiles = map[string]string{
	"benchclock.py": `import os, time

_n = int(os.environ["BENCH_N"])
_first = None
_count = 0


def stamp():
    """Called at the end of every job: the first call notes the start."""
    global _first, _count
    now = time.monotonic()
    if _first is None:
        _first = now  # the first job's own time is not counted: n-1 jobs
    _count += 1
    if _count == _n:
        with open(os.environ["BENCH_OUT"], "w") as f:
            f.write("%.9f\n" % (now - _first))
`,
	// rq: the job function lives in an importable module, as rq requires.
	"rqjobs.py": `import benchclock


def noop(payload):
    benchclock.stamp()
`,
	"rq_enqueue.py": `import os, redis, rq, rqjobs

r = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
q = rq.Queue("bench", connection=r)
p = os.environ["BENCH_PAYLOAD"].encode()
n = int(os.environ["BENCH_N"])
for i in range(0, n, 500):
    q.enqueue_many([rq.Queue.prepare_data(rqjobs.noop, (p,)) for _ in range(min(500, n - i))])
`,
	// rq's SimpleWorker runs jobs in its own process (the default Worker
	// forks once per job); burst mode exits once the queue is empty. Logging
	// at WARNING: baton's holder here logs nothing per job either.
	"rq_work.py": `import os, redis, rq

r = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
w = rq.SimpleWorker([rq.Queue("bench", connection=r)], connection=r)
w.work(burst=True, logging_level="WARNING")
`,
	// Celery with its defaults (prefork pool, prefetch multiplier 4, early
	// acknowledgement, no result backend) and a Redis broker.
	"celerybench.py": `import os, benchclock
from celery import Celery

app = Celery("celerybench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.broker_connection_retry_on_startup = True


@app.task
def noop(payload):
    benchclock.stamp()
`,
	"celery_enqueue.py": `import os, celerybench

p = os.environ["BENCH_PAYLOAD"]
with celerybench.app.producer_or_acquire() as producer:
    for _ in range(int(os.environ["BENCH_N"])):
        celerybench.noop.apply_async((p,), producer=producer)
`,
	// BullMQ with its defaults but concurrency 1.
	"bullmq.js": `'use strict';
const fs = require('fs');
const { Queue, Worker } = require('bullmq');
const url = new URL(process.env.BENCH_REDIS_URL);
const connection = { host: url.hostname, port: Number(url.port), maxRetriesPerRequest: null };
const n = Number(process.env.BENCH_N);
const payload = process.env.BENCH_PAYLOAD;

async function enqueue() {
  const q = new Queue('bench', { connection });
  for (let i = 0; i < n; i += 500) {
    await q.addBulk(Array.from({ length: Math.min(500, n - i) }, () => ({ name: 'noop', data: { payload } })));
  }
  await q.close();
}

async function work() {
  let first, count = 0;
  const w = new Worker('bench', async () => {
    const now = process.hrtime.bigint();
    if (first === undefined) first = now;
    if (++count === n) {
      fs.writeFileSync(process.env.BENCH_OUT, (Number(now - first) / 1e9).toFixed(9) + '\n');
      setImmediate(() => w.close().then(() => process.exit(0)));
    }
  }, { connection, concurrency: 1 });
  w.on('error', (e) => console.error(e));
}

(process.argv[2] === 'enqueue' ? enqueue() : work()).catch((e) => { console.error(e); process.exit(1); });
`,
}

// writeWorkerFiles writes workerFiles into dir.
func writeWorkerFiles(dir string) error {
	for name, text := range workerFiles {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}
