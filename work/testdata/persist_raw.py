"""A persistent worker for work's tests that speaks the protocol itself (no
helper), to misbehave in ways the helpers never do. It echoes each job's seq
(when baton sends one) and appends "id pid attempt sha256" to $PERSIST_LOG
for every job it reads. The payload says what to do:

  ok           answer ok
  twice        answer error, then at once a second, late ok for the same
               delivery; a later attempt answers error after 0.3s
  exit:SECS    answer ok, wait SECS without reading, exit 0

Flags: --slow-ready SECS (wait before ready), --exit-after-ready (say
ready, then exit 0 without reading a job).
"""
import hashlib
import json
import os
import sys
import time

inp = os.fdopen(3, "rb", buffering=0)
out = os.fdopen(4, "wb", buffering=0)


def send(msg):
    out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")


def readline():
    # One byte at a time: read nothing past this frame, so a job that is
    # never read stays in the pipe.
    line = b""
    while not line.endswith(b"\n"):
        c = inp.read(1)
        if not c:
            sys.exit(0)
        line += c
    return line


def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = inp.read(n - len(data))
        if not chunk:
            sys.exit(0)
        data += chunk
    return data


if "--slow-ready" in sys.argv:
    time.sleep(float(sys.argv[sys.argv.index("--slow-ready") + 1]))
send({"type": "ready", "protocol": 1})
if "--exit-after-ready" in sys.argv:
    sys.exit(0)

while True:
    msg = json.loads(readline())
    body = read_exact(msg.get("size", 0))
    if msg["type"] == "stop":
        sys.exit(0)
    if msg["type"] != "job":
        continue
    with open(os.environ["PERSIST_LOG"], "a") as f:
        f.write("%s %d %d %s\n" % (msg["id"], os.getpid(), msg.get("attempt", 1), hashlib.sha256(body).hexdigest()))
    res = {"type": "result", "id": msg["id"], "status": "ok"}
    if "seq" in msg:
        res["seq"] = msg["seq"]
    cmd, _, arg = body.partition(b":")
    if cmd == b"twice" and msg.get("attempt", 1) == 1:
        send(dict(res, status="error", error="first answer"))
        send(res)
        continue
    if cmd == b"twice":
        time.sleep(0.3)
        res.update(status="error", error="later attempt failed")
    send(res)
    if cmd == b"exit":
        time.sleep(float(arg))
        sys.exit(0)
