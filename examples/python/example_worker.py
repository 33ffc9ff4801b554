#!/usr/bin/env python3
"""A runnable example: uppercases each payload and prints it.

    baton run --persistent -- python3 examples/python/example_worker.py
"""
import baton_worker


def handle(payload: bytes, job):
    if payload == b"reject":
        raise baton_worker.SkipRetry("payload says reject")
    if payload == b"fail":
        raise ValueError("payload says fail")  # retried with backoff
    print("job %s attempt %d: %s" % (job.id, job.attempt, payload.decode(errors="replace").upper()))


if __name__ == "__main__":
    baton_worker.serve(handle)
