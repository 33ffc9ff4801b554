"""Burst N tasks onto a Celery worker started with --autoscale=MAX,MIN and
measure, as bench-scale does for baton: the time until MAX pool processes
work, the time to drain, the time back to MIN processes after, and the
process-seconds spent. Prints one JSON object on stdout.

Usage: BENCH_BROKER=redis://... python3 burst.py JOBS MAX MIN
"""
import json
import os
import subprocess
import sys
import time

import redis

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from tasks import app, job  # noqa: E402

jobs, most, least = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = redis.Redis.from_url(os.environ["BENCH_BROKER"])
r.delete("bench:celery:done")


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return len(f.read().split())
    except OSError:
        return 0


worker = subprocess.Popen(
    [sys.executable, "-m", "celery", "-A", "tasks", "worker", f"--autoscale={most},{least}",
     "--loglevel=warning", "--without-gossip", "--without-mingle", "--without-heartbeat"],
    cwd=here, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    deadline = time.time() + 60
    while not app.control.ping(timeout=0.5):
        if time.time() > deadline:
            raise SystemExit("celery worker did not answer a ping in 60s")
    t0 = time.time()
    with app.producer_or_acquire() as producer:
        for _ in range(jobs):
            job.apply_async(producer=producer)
    enqueued = time.time() - t0
    all_busy = None
    drained = None
    back = None
    held = 0.0
    tail = 0.0
    last = t0
    while True:
        time.sleep(0.05)
        now = time.time()
        n = children(worker.pid)
        if drained is None:
            held += n * (now - last)
        else:
            tail += n * (now - last)
        last = now
        if all_busy is None and n >= most:
            all_busy = now - t0
        done = int(r.get("bench:celery:done") or 0)
        if drained is None and done >= jobs:
            drained = now - t0
            empty = now
        if drained is not None and n <= least:
            back = now - empty
            break
        if now - t0 > 1800:
            raise SystemExit(f"not drained in 30 minutes: {done} done")
    print(json.dumps({"enqueue_s": enqueued, "all_busy_s": all_busy, "drain_s": drained, "back_s": back,
                      "process_seconds": held, "tail_process_seconds": tail}))
finally:
    worker.terminate()
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
