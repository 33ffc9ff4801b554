"""The Celery side of make bench-scale: one task that sleeps like the baton
job (5 ms by default) and counts itself done in Redis."""
import os
import time

import redis
from celery import Celery

BROKER = os.environ["BENCH_BROKER"]
JOB_TIME = float(os.environ.get("BENCH_JOB_TIME", "0.005"))

app = Celery("bench", broker=BROKER)
app.conf.worker_hijack_root_logger = False
_r = redis.Redis.from_url(BROKER)


@app.task(ignore_result=True)
def job():
    time.sleep(JOB_TIME)
    _r.incr("bench:celery:done")
