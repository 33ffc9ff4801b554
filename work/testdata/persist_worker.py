"""A persistent worker for work's tests: what it does depends on the payload.

Every job appends "id pid attempt sha256" to $PERSIST_LOG. result:X returns
X (the job's result), progress:S reports 42% and sleeps S seconds, hang is
stopped by a cancel, stubborn ignores it. Flags: --exit
(exits 2 before ready), --import-error, --ignore-stop (lingers after stop).
"""
import hashlib
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python"))

if "--import-error" in sys.argv:
    import no_such_module_for_baton  # noqa: F401
if "--exit" in sys.argv:
    print("giving up before ready", file=sys.stderr)
    sys.exit(2)

import baton_worker  # noqa: E402

hoard = []


def leak_heartbeats(job):
    """A heartbeat thread the job forgets to stop: it outlives the job."""
    def beat():
        while True:
            job.heartbeat()
            time.sleep(0.05)
    threading.Thread(target=beat, daemon=True).start()


def handle(payload, job):
    with open(os.environ["PERSIST_LOG"], "a") as f:
        f.write("%s %d %d %s\n" % (job.id, os.getpid(), job.attempt, hashlib.sha256(payload).hexdigest()))
    cmd, _, arg = payload.partition(b":")
    if cmd == b"print":
        print('{"type":"result","id":"%s","status":"error"}' % job.id)
        sys.stdout.write("no newline at the end")
        print("to stderr\n\x00\x01", file=sys.stderr)
    elif cmd == b"sleep":
        time.sleep(float(arg))
    elif cmd == b"hang":
        time.sleep(3600)
    elif cmd == b"beat":
        end = time.time() + float(arg)
        while time.time() < end:
            job.heartbeat()
            time.sleep(0.05)
    elif cmd == b"leak":
        leak_heartbeats(job)
    elif cmd == b"leak-fail" and job.attempt == 1:
        leak_heartbeats(job)
        raise RuntimeError("failed, its heartbeats running on")
    elif cmd == b"leak-fail":
        time.sleep(3600)
    elif cmd == b"die":
        os._exit(3)
    elif cmd == b"fail":
        raise RuntimeError("asked to fail")
    elif cmd == b"skip":
        raise baton_worker.SkipRetry("asked to skip")
    elif cmd == b"grow":
        hoard.append(b"x" * (int(arg) << 20))
    elif cmd == b"result":
        return arg
    elif cmd == b"text":
        return arg.decode()
    elif cmd == b"big":
        return b"r" * int(arg)
    elif cmd == b"progress":
        job.progress(42, "resizing")
        time.sleep(float(arg))
    elif cmd == b"flood":
        for i in range(int(arg)):
            job.progress(i % 101, "flood")
        job.progress(100, "flooded")
        time.sleep(1)
    elif cmd == b"steps":
        for i in range(int(arg)):
            job.progress(i * 100 // int(arg), "step")
            time.sleep(0.2)
    elif cmd == b"cancellable":
        time.sleep(3600)
    elif cmd == b"stubborn":
        try:
            time.sleep(3600)
        except baton_worker.Cancelled:
            time.sleep(3600)


baton_worker.serve(handle)
if "--ignore-stop" in sys.argv:
    time.sleep(3600)
