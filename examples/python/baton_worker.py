"""baton_worker: serve jobs to `baton run --persistent` (no dependencies).

    import baton_worker

    def handle(payload: bytes, job):
        ...  # return: done; raise: retried; raise baton_worker.SkipRetry: dead-lettered

    baton_worker.serve(handle)

baton starts this process once per lane and feeds it jobs one at a time over
fds 3 (baton -> worker) and 4 (worker -> baton); see docs/workers.md. print()
and sys.stderr go to baton's log and cannot disturb the protocol.
"""

import json
import os
import sys
import threading
import traceback

__all__ = ["serve", "Job", "SkipRetry"]

PROTOCOL = 1


class SkipRetry(Exception):
    """Raise it to fail a job for good: it is dead-lettered at once as rejected."""


class Job:
    """What the handler knows of its job: id (for life), attempt (1 on the
    first run), queue, and traceparent and tracestate (the W3C trace context
    of this run, "" when the job carries none: docs/tracing.md). Call
    heartbeat() during long work when baton runs with heartbeat_timeout."""

    __slots__ = ("id", "attempt", "queue", "traceparent", "tracestate", "_seq", "_send")

    def __init__(self, id, attempt, queue, seq, send, traceparent="", tracestate=""):
        self.id, self.attempt, self.queue, self._seq, self._send = id, attempt, queue, seq, send
        self.traceparent, self.tracestate = traceparent, tracestate

    def _frame(self, kind, **fields):
        # seq names this delivery: baton ignores what names another one
        # (a heartbeat thread left running by a finished job, say).
        msg = {"type": kind, "id": self.id}
        if self._seq is not None:
            msg["seq"] = self._seq
        msg.update(fields)
        return msg

    def heartbeat(self):
        self._send(self._frame("heartbeat"))


def _read_exact(f, n):
    data = f.read(n)
    if data is None or len(data) != n:
        raise EOFError("baton closed the pipe mid-frame")
    return data


def serve(handler):
    """Run handler(payload, job) for every job baton sends, until baton says
    stop (exit 0) or goes away."""
    if os.environ.get("BATON_PROTOCOL") is None:
        sys.exit("baton_worker: run me under `baton run --persistent -- ...` (no BATON_PROTOCOL)")
    # Our own children must not inherit the protocol pipes.
    os.set_inheritable(3, False)
    os.set_inheritable(4, False)
    inp = os.fdopen(3, "rb", buffering=1 << 16)
    out = os.fdopen(4, "wb", buffering=0)
    lock = threading.Lock()

    def send(msg):
        line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        with lock:
            out.write(line)

    send({"type": "ready", "protocol": PROTOCOL})
    while True:
        line = inp.readline()
        if not line:
            return  # baton went away
        msg = json.loads(line)
        size = msg.get("size", 0)
        body = _read_exact(inp, size) if size else b""
        kind = msg.get("type")
        if kind == "stop":
            return
        if kind != "job":
            continue  # a newer baton's message: ignore it
        job = Job(msg["id"], msg.get("attempt", 1), msg.get("queue", ""), msg.get("seq"), send,
                  msg.get("traceparent", ""), msg.get("tracestate", ""))
        result = job._frame("result", status="ok")
        try:
            handler(body, job)
        except SkipRetry as e:
            result.update(status="skip", error=str(e) or "SkipRetry")
        except Exception as e:  # noqa: BLE001 - every failure is the job's
            traceback.print_exc()
            result.update(status="error", error="%s: %s" % (type(e).__name__, e))
        # The job's output goes out before its result, so baton logs it
        # under this job's id.
        sys.stdout.flush()
        sys.stderr.flush()
        send(result)
