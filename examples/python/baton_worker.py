"""baton_worker: serve jobs to `baton run --persistent` (no dependencies).

    import baton_worker

    def handle(payload: bytes, job):
        job.progress(42, "resizing")  # optional: how far it is (0-100)
        ...  # return bytes or str: done, with that result; None: done, no result
             # raise: retried; raise baton_worker.SkipRetry: dead-lettered

    baton_worker.serve(handle)

baton starts this process once per lane and feeds it jobs one at a time over
fds 3 (baton -> worker) and 4 (worker -> baton); see docs/workers.md. print()
and sys.stderr go to baton's log and cannot disturb the protocol.

When a running job is cancelled (baton cancel), baton sends a cancel frame:
baton_worker.Cancelled is raised in the handler (through SIGUSR2 to the main
thread, so a time.sleep or a blocking read is cut short too). A handler that
does not stop within shutdown_grace is killed with its process.
"""

import json
import os
import queue
import signal
import sys
import threading
import traceback

__all__ = ["serve", "Job", "SkipRetry", "Cancelled"]

PROTOCOL = 1


class SkipRetry(Exception):
    """Raise it to fail a job for good: it is dead-lettered at once as rejected."""


class Cancelled(Exception):
    """Raised in the handler when its job was cancelled (baton cancel): let it
    propagate. The job is dead-lettered as cancelled whatever it returns."""


class Job:
    """What the handler knows of its job: id (for life), attempt (1 on the
    first run), queue, key (its key, "" for none: docs/keys.md), and traceparent and tracestate (the W3C trace context
    of this run, "" when the job carries none: docs/tracing.md). Call
    heartbeat() during long work when baton runs with heartbeat_timeout, and
    progress(pct, msg) to say how far it is (it counts as a heartbeat too)."""

    __slots__ = ("id", "attempt", "queue", "key", "traceparent", "tracestate", "_seq", "_send")

    def __init__(self, id, attempt, queue, seq, send, traceparent="", tracestate="", key=""):
        self.id, self.attempt, self.queue, self._seq, self._send = id, attempt, queue, seq, send
        self.traceparent, self.tracestate, self.key = traceparent, tracestate, key

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

    def progress(self, pct, msg=""):
        """Say how far the job is: pct from 0 to 100 and a short message.
        Cheap to call often: baton keeps the latest, twice a second."""
        if isinstance(pct, bool) or not isinstance(pct, int) or not 0 <= pct <= 100:
            raise ValueError("progress must be an int from 0 to 100, not %r" % (pct,))
        self._send(self._frame("progress", pct=pct, msg=str(msg)))


def _read_exact(f, n):
    data = f.read(n)
    if data is None or len(data) != n:
        raise EOFError("baton closed the pipe mid-frame")
    return data


def _result_bytes(value):
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError("the handler returned %s: return bytes, str or None" % type(value).__name__)


def serve(handler):
    """Run handler(payload, job) for every job baton sends, until baton says
    stop (exit 0) or goes away. The handler's return value (bytes or str) is
    the job's result."""
    if os.environ.get("BATON_PROTOCOL") is None:
        sys.exit("baton_worker: run me under `baton run --persistent -- ...` (no BATON_PROTOCOL)")
    # Our own children must not inherit the protocol pipes.
    os.set_inheritable(3, False)
    os.set_inheritable(4, False)
    inp = os.fdopen(3, "rb", buffering=1 << 16)
    out = os.fdopen(4, "wb", buffering=0)
    lock = threading.RLock()  # reentrant: the cancel signal handler runs on the main thread

    def send(msg, body=b""):
        if body:
            msg = dict(msg, size=len(body))
        line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        with lock:
            out.write(line + body)

    # Frames are read by a thread, so that a cancel reaches a running job.
    jobs = queue.Queue()
    running = {"job": None, "cancelled": False}  # guarded by lock
    main = threading.main_thread().ident

    def on_cancel(signum, frame):
        with lock:
            fire = running["job"] is not None and running["cancelled"]
            running["cancelled"] = False
        if fire:
            raise Cancelled("job cancelled")

    # Only the main thread may set a signal handler; served from another
    # thread, a cancelled job runs on until baton kills it after its grace.
    interrupt = threading.current_thread() is threading.main_thread()
    if interrupt:
        signal.signal(signal.SIGUSR2, on_cancel)

    def read():
        try:
            while True:
                line = inp.readline()
                if not line:
                    break  # baton went away
                msg = json.loads(line)
                size = msg.get("size", 0)
                body = _read_exact(inp, size) if size else b""
                kind = msg.get("type")
                if kind == "cancel":
                    with lock:
                        cur = running["job"]
                        hit = cur is not None and cur.id == msg.get("id") and msg.get("seq") in (None, cur._seq)
                        if hit:
                            running["cancelled"] = True
                    if hit and interrupt:
                        signal.pthread_kill(main, signal.SIGUSR2)
                    continue
                if kind in ("job", "stop"):
                    jobs.put((msg, body))
                # another type: a newer baton's message: ignore it
        finally:
            jobs.put(None)

    threading.Thread(target=read, name="baton-frames", daemon=True).start()
    send({"type": "ready", "protocol": PROTOCOL})
    while True:
        item = jobs.get()
        if item is None or item[0].get("type") == "stop":
            return
        msg, body = item
        job = Job(msg["id"], msg.get("attempt", 1), msg.get("queue", ""), msg.get("seq"), send,
                  msg.get("traceparent", ""), msg.get("tracestate", ""), msg.get("key", ""))
        result, value = job._frame("result", status="ok"), b""
        try:
            try:
                with lock:
                    running["job"], running["cancelled"] = job, False
                value = _result_bytes(handler(body, job))
            finally:
                with lock:
                    running["job"] = None
        except SkipRetry as e:
            result.update(status="skip", error=str(e) or "SkipRetry")
        except Cancelled as e:
            result.update(status="error", error="cancelled: %s" % e)
        except Exception as e:  # noqa: BLE001 - every failure is the job's
            traceback.print_exc()
            result.update(status="error", error="%s: %s" % (type(e).__name__, e))
        # The job's output goes out before its result, so baton logs it
        # under this job's id.
        sys.stdout.flush()
        sys.stderr.flush()
        send(result, value if result["status"] == "ok" else b"")
