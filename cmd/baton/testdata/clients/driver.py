# Drives baton_client for cmd/baton/clients_test.go: reads {"redis", "queue",
# "ops"} as JSON on stdin, runs each op, prints one JSON result per op.
# Durations come in milliseconds and times as unix milliseconds; results
# use `baton job --json`'s field names, with times as unix milliseconds.
import base64
import datetime as dt
import json
import sys

import baton_client
import redis

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def options(o):
    kw = {}
    for k, v in o.items():
        if k == "delay_ms":
            kw["delay"] = dt.timedelta(milliseconds=v)
        elif k == "at_ms":
            kw["at"] = EPOCH + dt.timedelta(milliseconds=v)
        elif k == "unique_for_ms":
            kw["unique_for"] = dt.timedelta(milliseconds=v)
        elif k == "timeout_ms":
            kw["timeout"] = dt.timedelta(milliseconds=v)
        else:
            kw[k] = v
    return kw


def ms(t):
    return (t - EPOCH) // dt.timedelta(milliseconds=1)


def location(loc):
    out = {"id": loc.id, "state": loc.state}
    for k in ("entry", "priority", "consumer", "key"):
        if getattr(loc, k):
            out[k] = getattr(loc, k)
    for k in ("ahead", "deliveries", "attempts", "key_running", "key_waiting"):
        if getattr(loc, k):
            out[k] = getattr(loc, k)
    if loc.due:
        out["due"] = ms(loc.due)
    if loc.done_at:
        out["done_at"] = ms(loc.done_at)
    if loc.dead:
        d = loc.dead
        out["dead_letter"] = {"id": d.id, "job_id": d.job_id, "reason": d.reason, "attempts": d.attempts,
                              "error": d.error, "entry": d.entry, "failed_at": ms(d.failed_at),
                              "payload": d.payload.decode() if d.payload is not None else None}
        if d.fields:
            out["dead_letter"]["fields"] = d.fields
    return out


def outcome(b):
    """A result (bytes or None) as JSON: base64, or null."""
    return {"result": None if b is None else base64.b64encode(b).decode()}


def run(c, q, op):
    try:
        kind = op["op"]
        if kind == "enqueue":
            i = c.enqueue(q, op["payload"], **options(op.get("opts") or {}))
            return {"id": i, "duplicate": i.duplicate}
        if kind == "many":
            ids = c.enqueue_many(q, op["payloads"], **options(op.get("opts") or {}))
            return {"ids": [{"id": i, "duplicate": i.duplicate} for i in ids]}
        if kind == "items":
            ids = c.enqueue_many(q, [baton_client.Message(i["payload"], **options(i.get("opts") or {}))
                                     for i in op["items"]])
            return {"ids": [{"id": i, "duplicate": i.duplicate} for i in ids]}
        if kind == "job":
            return location(c.job(q, op["id"]))
        if kind == "keys":
            k = baton_client.keys_for(q)
            return {"stream": k["stream"], "high": k["high"], "low": k["low"], "retry": k["retry"],
                    "retry_jobs": k["retry_jobs"], "scheduled": k["scheduled"],
                    "scheduled_jobs": k["scheduled_jobs"], "dead": k["dead"], "dead_index": k["dead_index"],
                    "done": k["done"], "unique": baton_client._unique_key(q, op["key"]), "key_jobs": k["key_jobs"]}
        if kind == "result":
            return outcome(c.result(q, op["id"]))
        if kind == "wait":
            t = op.get("timeout_ms")
            return outcome(c.wait(q, op["id"], timeout=None if t is None else dt.timedelta(milliseconds=t)))
        raise ValueError("unknown op %r" % kind)
    except baton_client.JobDead as e:
        return {"error": str(e), "class": "JobDead", "reason": e.reason, "cancelled": e.cancelled}
    except baton_client.NotDone as e:
        return {"error": str(e), "class": "NotDone", "state": e.state}
    except baton_client.BadOption as e:
        return {"error": str(e), "bad": True}
    except baton_client.EnqueueError as e:
        return {"error": str(e), "class": type(e).__name__, "ids": [i and str(i) for i in e.ids]}
    except Exception as e:  # noqa: BLE001
        return {"error": str(e), "class": type(e).__name__}


def main():
    req = json.load(sys.stdin)
    kw = {"decode_responses": req.get("decode", False)}
    if req.get("python_parser"):  # redis-py's own parser even when hiredis is installed
        kw["parser_class"] = redis.connection.PythonParser
    r = redis.Redis.from_url(req["redis"], **kw)
    c = baton_client.Client(r, **({"wait_replicas": req["wait_replicas"],
                                   "wait_timeout": dt.timedelta(milliseconds=req["wait_timeout_ms"])}
                                  if req.get("wait_replicas") else {}))
    for op in req["ops"]:
        print(json.dumps(run(c, req["queue"], op)))


main()
