"""baton's producer client for Python: enqueue jobs and look them up.

    import redis, baton_client
    c = baton_client.Client(redis.Redis())
    job_id = c.enqueue("mail", b'{"user": 42}', delay=timedelta(minutes=10),
                       unique_key="welcome-42")
    job_id.duplicate  # True when a job with that key was already queued
    c.enqueue("api", b'{"call": "refund"}', key="customer-42")  # docs/keys.md
    c.job("mail", job_id).state  # "scheduled"
    c.wait("mail", job_id, timeout=60)  # its result, once done (JobDead if not)

It runs the very Lua scripts baton's Go code runs (work/lua in the
repository; this package carries them), so ids, options and errors are those
of `baton enqueue` and `baton job`. docs/clients.md has the whole story.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import os
import re
import time
import unicodedata
from typing import Any, Iterable, List, Optional, Sequence, Union

__all__ = [
    "Client",
    "JobID",
    "Message",
    "Location",
    "DeadLetter",
    "BadOption",
    "EnqueueError",
    "NotReplicated",
    "NotDone",
    "UnknownJob",
    "JobDead",
    "keys_for",
    "GROUP",
]

GROUP = "baton"  # the consumer group every holder reads through

# Most a job's own max_attempts may be, and how many jobs with options go in
# one script call (as work/enqueue.go).
MAX_JOB_ATTEMPTS = 1000
MAX_KEY_LEN = 256  # the longest job key, in bytes (work/key.go's MaxKeyLen)
_SCRIPT_BATCH = 200
_SCRIPT_BYTES = 64 << 20
# How many stream entries a lookup reads at most to find a job back in the
# stream under a newer entry (work/locate.go's locateScan).
_LOCATE_SCAN = 100000

_here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lua")


def _lua(name: str) -> bytes:
    with open(os.path.join(_here, name), "rb") as f:
        return f.read()


ENQUEUE_LUA = _lua("enqueue.lua")
RECORD_FIELD_LUA = _lua("record_field.lua")
WAIT_LUA = _lua("wait.lua")
UNWAIT_LUA = _lua("unwait.lua")
RESULT_LUA = _lua("result.lua")
KEY_ENQUEUE_LUA = _lua("key_enqueue.lua")  # work/keylua/enqueue.lua
_ENQUEUE_SHA = hashlib.sha1(ENQUEUE_LUA).hexdigest()
_RECORD_FIELD_SHA = hashlib.sha1(RECORD_FIELD_LUA).hexdigest()
_WAIT_SHA = hashlib.sha1(WAIT_LUA).hexdigest()
_UNWAIT_SHA = hashlib.sha1(UNWAIT_LUA).hexdigest()
_RESULT_SHA = hashlib.sha1(RESULT_LUA).hexdigest()

# wait: how long a waiter's registration lasts without a refresh, and how
# long one BLPOP blocks at most (work/wait.go's waitersKeep, waitBlock).
_WAITERS_KEEP_MS = 3600 * 1000
_WAIT_BLOCK = 5.0


class BadOption(ValueError):
    """A job option with an impossible value; nothing was sent."""


class EnqueueError(Exception):
    """Redis refused some jobs of a call. ``ids`` has the id of each job
    added (or the queued job's id for a duplicate), None for the others."""

    def __init__(self, msg: str, ids: List[Optional["JobID"]]):
        super().__init__(msg)
        self.ids = ids


class NotDone(Exception):
    """result() of a job that is not done (yet); ``state`` says where it is."""

    def __init__(self, msg: str, state: str):
        super().__init__(msg)
        self.state = state


class UnknownJob(LookupError):
    """result() or wait() of a job the queue does not know: done and not
    kept (see retention), or never enqueued there."""


class JobDead(Exception):
    """wait() of a job that was dead-lettered (as Go's work.DeadError):
    its ``reason`` (failed, timeout, crashed, rejected, cancelled, ...) and
    last ``error``; ``cancelled`` is True for a cancelled job."""

    def __init__(self, job_id: str, reason: str, error: str):
        super().__init__("job %s dead-lettered (%s): %s" % (job_id, reason, error))
        self.job_id, self.reason, self.error = job_id, reason, error

    @property
    def cancelled(self) -> bool:
        return self.reason == "cancelled"


class NotReplicated(EnqueueError):
    """Fewer replicas than wait_replicas confirmed the jobs in time: they are
    queued on the master, but a failover now could lose them."""


class JobID(str):
    """A job's id for life (the id ``baton job`` and BATON_JOB_ID use): a
    str, with ``duplicate`` True when nothing was added because a job with
    the same unique key was queued: the id is then that job's."""

    duplicate: bool

    def __new__(cls, value: str, duplicate: bool = False) -> "JobID":
        s = super().__new__(cls, value)
        s.duplicate = duplicate
        return s

    def __repr__(self) -> str:
        return "JobID(%s%s)" % (str.__repr__(self), ", duplicate=True" if self.duplicate else "")


def keys_for(queue: str) -> dict:
    """The Redis keys of a queue (work/keys.go's KeysFor), all under the
    hash tag {queue}."""
    base = "baton:{" + queue + "}"
    return {
        "stream": base,
        "high": base + ":high",
        "low": base + ":low",
        "retry": base + ":retry",
        "retry_jobs": base + ":retry:jobs",
        "scheduled": base + ":scheduled",
        "scheduled_jobs": base + ":scheduled:jobs",
        "dead": base + ":dead",
        "dead_index": base + ":dead:ids",
        "stats": base + ":stats",
        "done": base + ":done",
        "results": base + ":results",
        "waiters": base + ":waiters",
        "key_jobs": base + ":key:jobs",
    }


def _key_base(queue: str) -> str:
    """The prefix of a queue's job keys' Redis keys (work/key.go's keyBase):
    + "s:<level>:<key>" is a key's stream (work.Keys.KeyStream), "jobs"
    the index of its jobs, "streams" the set of key streams."""
    return "baton:{" + queue + "}:key:"


def _unique_key(queue: str, key: str) -> str:
    return "baton:{" + queue + "}:unique:" + key


# --- durations, formatted as Go's time.Duration prints them --------------

def _go_frac(v: int, unit: int) -> str:
    whole, frac = divmod(v, unit)
    if frac == 0:
        return str(whole)
    digits = len(str(unit)) - 1
    return ("%d.%0*d" % (whole, digits, frac)).rstrip("0")


def go_duration(ns: int) -> str:
    """ns nanoseconds as Go prints a time.Duration (1m30s, 1.5s, 250ms)."""
    if ns == 0:
        return "0s"
    sign, u = ("-", -ns) if ns < 0 else ("", ns)
    if u < 1000:
        return "%s%dns" % (sign, u)
    if u < 1000000:
        return sign + _go_frac(u, 1000) + "µs"
    if u < 1000000000:
        return sign + _go_frac(u, 1000000) + "ms"
    h, rest = divmod(u, 3600 * 10**9)
    m, rest = divmod(rest, 60 * 10**9)
    out = sign
    if h:
        out += "%dh" % h
    if h or m:
        out += "%dm" % m
    return out + _go_frac(rest, 10**9) + "s"


def _ns(name: str, v: Any) -> int:
    """A duration option (a timedelta, or seconds as int or float) in ns."""
    if isinstance(v, bool):
        raise BadOption("bad job option: %s: want a timedelta or seconds, not %r" % (name, v))
    if isinstance(v, _dt.timedelta):
        return ((v.days * 86400 + v.seconds) * 10**6 + v.microseconds) * 1000
    if isinstance(v, int):
        return v * 10**9
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise BadOption("bad job option: %s: %r is not a duration" % (name, v))
        return round(v * 1e9)
    raise BadOption("bad job option: %s: want a timedelta or seconds, not %s" % (name, type(v).__name__))


def _unix_ms(at: Any) -> int:
    if not isinstance(at, _dt.datetime):
        raise BadOption("bad job option: at: want a datetime, not %s" % type(at).__name__)
    if at.tzinfo is None:
        at = at.astimezone()  # a naive time is local, as datetime.timestamp() reads it
    return (at - _EPOCH) // _dt.timedelta(milliseconds=1)


_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_PRIORITIES = {"normal": 0, "high": 1, "low": 2}


@dataclasses.dataclass
class _Opts:
    due_ms: Optional[int] = None  # None: now
    unique: Optional[str] = None
    unique_for_ms: int = 0
    max_attempts: int = 0
    timeout_ms: Optional[int] = None
    priority: int = 0
    traceparent: Optional[str] = None  # the W3C trace context the job continues
    tracestate: Optional[str] = None
    key: Optional[str] = None  # the job's key (docs/keys.md)

    def plain(self) -> bool:
        return (self.due_ms is None and self.unique is None and self.max_attempts == 0
                and self.timeout_ms is None and self.priority == 0 and self.traceparent is None
                and self.key is None)


_PLAIN_OPTS = _Opts()  # shared by the jobs without options: never changed


# A W3C traceparent as baton's reader accepts it (tracing/w3c.go).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?\Z", re.S)


def _check_trace(traceparent: Any, tracestate: Any) -> None:
    if not isinstance(traceparent, str) or not _TRACEPARENT.match(traceparent) or traceparent[:2] == "ff" \
            or (traceparent[:2] == "00" and len(traceparent) != 55) \
            or traceparent[3:35] == "0" * 32 or traceparent[36:52] == "0" * 16:
        raise BadOption("bad job option: traceparent %s: want a W3C traceparent such as "
                        "00-<32 hex>-<16 hex>-01" % _go_quote(traceparent))
    if tracestate is not None and (not isinstance(tracestate, str) or len(tracestate) > 512
                                   or any(not " " <= ch <= "~" for ch in tracestate)):
        raise BadOption("bad job option: tracestate %s: want printable ASCII, at most 512 characters"
                        % _go_quote(tracestate))


def _check_key(k: Any) -> None:
    """Refuses a job key as work.ValidKey does, with its messages."""
    if not isinstance(k, str):
        raise BadOption("bad job option: key: want a str, not %s" % type(k).__name__)
    n = len(k.encode("utf-8", "surrogatepass"))
    if k == "":
        why = "empty"
    elif n > MAX_KEY_LEN:
        why = "%d bytes, at most %d" % (n, MAX_KEY_LEN)
    elif any("\ud800" <= ch <= "\udfff" for ch in k):
        why = "not UTF-8"
    elif "{" in k or "}" in k:
        why = "%s holds '{' or '}'" % _go_quote(k)
    elif any(ch < " " or ch == "\x7f" for ch in k):
        why = "%s holds a control character" % _go_quote(k)
    else:
        return
    raise BadOption("bad job option: bad job key: " + why)


def _options(delay=None, at=None, unique_key=None, unique_for=None, priority=None,
             timeout=None, max_attempts=None, traceparent=None, tracestate=None, key=None) -> _Opts:
    """Checks a job's options, as work/enqueue.go's Option functions do, with
    the same messages (durations as Go prints them)."""
    o = _Opts()
    if delay is not None and at is not None:
        raise BadOption("bad job option: give one of delay and at")
    if delay is not None:
        ns = _ns("delay", delay)
        if ns < 0:
            raise BadOption("bad job option: delay %s is negative" % go_duration(ns))
        o.due_ms = (time.time_ns() + ns) // 10**6
    if at is not None:
        o.due_ms = _unix_ms(at)
    if unique_key is not None:
        if not isinstance(unique_key, str):
            raise BadOption("bad job option: unique key: want a str, not %s" % type(unique_key).__name__)
        if unique_key == "":
            raise BadOption("bad job option: empty unique key")
        o.unique = unique_key
    if unique_for is not None:
        ns = _ns("unique_for", unique_for)
        if ns < 10**6:
            raise BadOption("bad job option: unique-for %s must be at least 1ms" % go_duration(ns))
        o.unique_for_ms = ns // 10**6
    if max_attempts is not None:
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise BadOption("bad job option: max attempts: want an int, not %r" % (max_attempts,))
        if max_attempts < 1 or max_attempts > MAX_JOB_ATTEMPTS:
            raise BadOption("bad job option: max attempts %d must be between 1 and %d" % (max_attempts, MAX_JOB_ATTEMPTS))
        o.max_attempts = max_attempts
    if timeout is not None:
        ns = _ns("timeout", timeout)
        if ns <= 0:
            raise BadOption("bad job option: timeout %s must be positive" % go_duration(ns))
        o.timeout_ms = ns // 10**6  # 0 for under 1ms: no timeout, as in Go
    if priority is not None:
        if priority not in _PRIORITIES:
            raise BadOption('bad job option: priority %s: want high, normal or low' % _go_quote(priority))
        o.priority = _PRIORITIES[priority]
    if o.unique_for_ms and o.unique is None:
        raise BadOption("bad job option: unique-for needs a unique key")
    if tracestate is not None and traceparent is None:
        raise BadOption("bad job option: tracestate needs a traceparent")
    if traceparent is not None:
        _check_trace(traceparent, tracestate)
        o.traceparent, o.tracestate = traceparent, tracestate or None
    if key is not None:
        _check_key(key)
        o.key = key
    return _PLAIN_OPTS if o.plain() else o


_GO_ESC = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v",
           "\\": "\\\\", '"': '\\"'}


def _go_quote(v: Any) -> str:
    """v as Go's %q prints a string (strconv.Quote): what is not printable
    escaped."""
    if not isinstance(v, str):
        return repr(v)
    out = ['"']
    for ch in v:
        c = ord(ch)
        if ch in _GO_ESC:
            out.append(_GO_ESC[ch])
        elif ch == " " or (c >= 0x20 and unicodedata.category(ch)[0] in "LMNPS"):
            out.append(ch)
        elif c < 0x20 or c == 0x7F:
            out.append("\\x%02x" % c)
        elif 0xD800 <= c <= 0xDFFF:
            out.append("\\ufffd")
        elif c < 0x10000:
            out.append("\\u%04x" % c)
        else:
            out.append("\\U%08x" % c)
    return "".join(out) + '"'


class Message:
    """One job of enqueue_many with options of its own (they replace the
    call's options for this job)."""

    __slots__ = ("payload", "options")

    def __init__(self, payload: Union[bytes, str], **options: Any):
        self.payload = payload
        self.options = options


def _payload(p: Any) -> bytes:
    if isinstance(p, bytes):
        return p
    if isinstance(p, str):
        return p.encode("utf-8")
    if isinstance(p, (bytearray, memoryview)):
        return bytes(p)
    raise BadOption("bad job option: payload: want bytes or str, not %s" % type(p).__name__)


# --- MessagePack, as cmsgpack packs strings and arrays -------------------

def _pack_str(b: bytes) -> bytes:
    n = len(b)
    if n < 32:
        return bytes((0xA0 | n,)) + b
    if n < 1 << 8:
        return bytes((0xD9, n)) + b
    if n < 1 << 16:
        return bytes((0xDA, n >> 8, n & 0xFF)) + b
    return b"\xdb" + n.to_bytes(4, "big") + b


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return bytes((0xDC, n >> 8, n & 0xFF))
    return b"\xdd" + n.to_bytes(4, "big")


_KIND = [[_pack_str(k.encode()) for k in row] for row in
         (("0", "0u", "0t"), ("1", "1u", "1t"), ("2", "2u", "2t"))]
_PRIO_NAME = {1: b"high", 2: b"low"}
_F_PAYLOAD, _F_UNIQUE, _F_MAX, _F_TIMEOUT, _F_PRIO, _F_TP, _F_TS, _F_KEY = (
    _pack_str(b"payload"), _pack_str(b"unique"), _pack_str(b"max_attempts"),
    _pack_str(b"timeout"), _pack_str(b"priority"), _pack_str(b"traceparent"), _pack_str(b"tracestate"),
    _pack_str(b"key"))
_DUE_NOW = _pack_str(b"0")
# A plain job's items before its payload: due now, kind "0", 2 strings, "payload".
_PLAIN_HEAD = _DUE_NOW + _KIND[0][0] + b"\x02" + _F_PAYLOAD


def _fields(payload: bytes, o: _Opts) -> List[bytes]:
    f = [_F_PAYLOAD, _pack_str(payload)]
    if o.unique is not None:
        f += [_F_UNIQUE, _pack_str(o.unique.encode())]
    if o.max_attempts:
        f += [_F_MAX, _pack_str(str(o.max_attempts).encode())]
    if o.timeout_ms is not None:
        f += [_F_TIMEOUT, _pack_str(str(o.timeout_ms).encode())]
    if o.priority:
        f += [_F_PRIO, _pack_str(_PRIO_NAME[o.priority])]
    if o.key is not None:
        f += [_F_KEY, _pack_str(o.key.encode())]
    if o.traceparent is not None:
        f += [_F_TP, _pack_str(o.traceparent.encode())]
    if o.tracestate is not None:
        f += [_F_TS, _pack_str(o.tracestate.encode())]
    return f


class _ScriptCall:
    """The arguments of one enqueue script call (work/enqueue.go's
    scriptCall): one MessagePack array of every job's items."""

    __slots__ = ("jobs", "keys", "items", "n", "size")

    def __init__(self, k: dict):
        self.jobs: List[int] = []
        self.keys = [k["stream"], k["scheduled"], k["scheduled_jobs"], k["high"], k["low"]]
        self.items: List[bytes] = []
        self.n = 0
        self.size = 0

    def add(self, i: int, queue: str, payload: bytes, o: _Opts, now_ms: int) -> None:
        if o is _PLAIN_OPTS or o.plain():
            # the common case, without building its fields
            p = _pack_str(payload)
            self.items += (_PLAIN_HEAD, p)
            self.n += 5
            self.size += len(_PLAIN_HEAD) + len(p)
            self.jobs.append(i)
            return
        due = o.due_ms if o.due_ms is not None and o.due_ms > now_ms else 0
        it = [_pack_str(str(due).encode()) if due else _DUE_NOW]
        if o.unique is None:
            it.append(_KIND[o.priority][0])
        elif o.unique_for_ms:
            it += [_KIND[o.priority][2], _pack_str(str(o.unique_for_ms).encode())]
        else:
            it.append(_KIND[o.priority][1])
        if o.unique is not None:
            self.keys.append(_unique_key(queue, o.unique))
        f = _fields(payload, o)
        if due:
            # A delayed job's record: the script appends its orig pair.
            it += [b"\x01", _pack_str(_array_header(len(f) + 2) + b"".join(f))]
        else:
            it.append(bytes((len(f),)))
            it += f
        self.n += len(it)
        self.size += sum(len(x) for x in it)
        self.items += it
        self.jobs.append(i)

    def argv(self) -> bytes:
        return b"\xdd" + self.n.to_bytes(4, "big") + b"".join(self.items)


# A keyed job's level and unique kind in the keys' enqueue script's
# arguments (work/key_enqueue.go's keyCall).
_LEVEL = [_pack_str(b"normal"), _pack_str(b"high"), _pack_str(b"low")]
_UK_NONE, _UK_UNIQUE, _UK_TTL = _pack_str(b""), _pack_str(b"u"), _pack_str(b"t")


class _KeyCall:
    """The arguments of one call of the keys' enqueue script
    (work/key_enqueue.go's keyCall): the jobs that have a key and no delay,
    which wait in their keys' streams rather than in their levels'."""

    __slots__ = ("jobs", "keys", "items", "n")

    def __init__(self, k: dict):
        self.jobs: List[int] = []
        self.keys = [k["stream"], k["key_jobs"]]
        self.items: List[bytes] = []
        self.n = 0

    def add(self, i: int, queue: str, payload: bytes, o: _Opts) -> None:
        it = [_LEVEL[o.priority], _pack_str(o.key.encode())]
        if o.unique is None:
            it.append(_UK_NONE)
        elif o.unique_for_ms:
            it += [_UK_TTL, _pack_str(str(o.unique_for_ms).encode())]
        else:
            it.append(_UK_UNIQUE)
        if o.unique is not None:
            self.keys.append(_unique_key(queue, o.unique))
        # Its record: the script appends its orig pair, counted here.
        f = _fields(payload, o)
        it.append(_pack_str(_array_header(len(f) + 2) + b"".join(f)))
        self.n += len(it)
        self.items += it
        self.jobs.append(i)

    def argv(self) -> bytes:
        return b"\xdd" + self.n.to_bytes(4, "big") + b"".join(self.items)


def _text(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _is_noscript(e: Any) -> bool:
    return isinstance(e, Exception) and str(e).startswith("NOSCRIPT") or type(e).__name__ == "NoScriptError"


class Client:
    """A producer of baton jobs on a redis-py client (redis.Redis, or a
    Sentinel master; decode_responses either way).

    wait_replicas > 0 ends each call with WAIT (as enqueue_wait_replicas):
    NotReplicated is raised, with the ids, unless that many replicas have
    the jobs within wait_timeout."""

    def __init__(self, redis: Any, wait_replicas: int = 0,
                 wait_timeout: Union[_dt.timedelta, float] = _dt.timedelta(seconds=1)):
        self.redis = redis
        if isinstance(wait_replicas, bool) or not isinstance(wait_replicas, int) or wait_replicas < 0:
            raise BadOption("wait_replicas %r: want a count, 0 or more" % (wait_replicas,))
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = _ns("wait_timeout", wait_timeout) // 10**6

    # --- enqueue ---------------------------------------------------------

    def enqueue(self, queue: str, payload: Union[bytes, str], *, delay=None, at=None,
                unique_key=None, unique_for=None, priority=None, timeout=None,
                max_attempts=None, traceparent=None, tracestate=None, key=None) -> JobID:
        """Adds one job to queue and returns its id. delay (a timedelta, or
        seconds) or at (a datetime; a past one runs now) schedule it;
        unique_key adds nothing while a job with that key is waiting,
        scheduled, running or retrying (the returned id is that job's, with
        .duplicate True), unique_for bounds how long the key is held;
        priority is "high", "normal" or "low"; timeout (a timedelta or
        seconds) and max_attempts override the queue's for this job;
        traceparent (and tracestate) is the W3C trace context the job's runs
        continue (docs/tracing.md), e.g. OpenTelemetry's
        propagate.inject({})["traceparent"] in a traced request; key (a
        customer, a tenant: 1 to 256 bytes of UTF-8 without "{", "}" or
        control characters) makes holders run at most the queue's
        key_concurrency of the key's jobs at once, taking keys in turns
        (docs/keys.md). BadOption is raised, before anything is sent, for a
        bad option."""
        ids = self.enqueue_many(queue, [payload], delay=delay, at=at, unique_key=unique_key,
                                unique_for=unique_for, priority=priority, timeout=timeout,
                                max_attempts=max_attempts, traceparent=traceparent, tracestate=tracestate,
                                key=key)
        return ids[0]

    def enqueue_many(self, queue: str, payloads: Iterable[Union[bytes, str, Message]],
                     **options: Any) -> List[JobID]:
        """Adds jobs in one round trip (a pipeline) and returns their ids in
        order. Each item is a payload, which gets options, or a Message with
        options of its own. Every option is checked first: one bad option
        sends nothing (BadOption, naming the job: "job 3: ...")."""
        _check_queue(queue)
        jobs: List[bytes] = []
        opts: List[_Opts] = []
        common: Optional[_Opts] = None
        for i, item in enumerate(payloads):
            try:
                if isinstance(item, Message):
                    p, o = _payload(item.payload), _options(**item.options)
                else:
                    if common is None:
                        common = _options(**options)
                    p, o = _payload(item), common
            except BadOption as e:
                raise BadOption("job %d: %s" % (i + 1, e)) from None
            except TypeError as e:  # an option that does not exist
                raise BadOption("job %d: bad job option: %s" % (i + 1, e)) from None
            jobs.append(p)
            opts.append(o)
        if not jobs and options:
            _options(**options)
        ids: List[Optional[JobID]] = [None] * len(jobs)
        if not jobs:
            return []
        sent = [False] * len(jobs)
        k = keys_for(queue)
        errors: List[str] = []
        results, plan, waits = self._send(queue, k, jobs, opts, sent)
        noscript = self._collect(results, plan, ids, sent, errors, retry_noscript=True)
        if noscript:
            self.redis.script_load(ENQUEUE_LUA)
            results, plan, w2 = self._send(queue, k, jobs, opts, sent)
            waits += w2
            self._collect(results, plan, ids, sent, errors, retry_noscript=False)
        if errors:
            raise EnqueueError(errors[0], ids)
        for w in waits:
            if isinstance(w, Exception):
                raise NotReplicated("not confirmed by enough replicas: WAIT: %s" % w, ids)
            if int(w) < self.wait_replicas:
                raise NotReplicated("not confirmed by enough replicas: %d of %d replicas within %s"
                                    % (int(w), self.wait_replicas, go_duration(self.wait_timeout_ms * 10**6)), ids)
        return ids  # type: ignore[return-value]

    def _send(self, queue, k, jobs, opts, sent):
        """One pipeline of the jobs not yet sent: a call of one job without
        options is one XADD, as in Go; any other goes in enqueue script
        calls of up to 200 jobs, in job order, so ids grow in job order.
        (Go sends a batch's plain jobs before its first job with options as
        XADDs; here a command costs more than the script's own work, and
        the script adds a plain job with the same XADD.) Jobs with a key
        and no delay go, as in Go, in calls of the keys' enqueue script
        after the others (EVAL, as Go sends it: no NOSCRIPT to retry)."""
        now_ms = time.time_ns() // 10**6
        pipe = self.redis.pipeline(transaction=False)
        plan: List[Any] = []
        scripted = len(jobs) > 1
        call: Optional[_ScriptCall] = None
        keyed: Optional[_KeyCall] = None

        def send_keyed():
            nonlocal keyed
            if keyed is not None and keyed.jobs:
                keys = keyed.keys
                pipe.execute_command("EVAL", KEY_ENQUEUE_LUA, len(keys), *keys, _key_base(queue), keyed.argv())
                plan.append(keyed.jobs)
            keyed = None

        def flush():
            nonlocal call
            if call is not None and call.jobs:
                keys = call.keys
                pipe.execute_command("EVALSHA", _ENQUEUE_SHA, len(keys), *keys, call.argv())
                plan.append(call.jobs)
            call = None

        for i, p in enumerate(jobs):
            if sent[i]:
                continue
            sent[i] = True
            o = opts[i]
            scripted = scripted or not o.plain()
            if not scripted:
                pipe.execute_command("XADD", k["stream"], "*", "payload", p)
                plan.append(i)
                continue
            if o.key is not None and (o.due_ms is None or o.due_ms <= now_ms):
                if keyed is None:
                    keyed = _KeyCall(k)
                keyed.add(i, queue, p, o)
                if len(keyed.jobs) == _SCRIPT_BATCH:
                    send_keyed()
                continue
            if call is None:
                call = _ScriptCall(k)
            call.add(i, queue, p, o, now_ms)
            if len(call.jobs) == _SCRIPT_BATCH or call.size >= _SCRIPT_BYTES:
                flush()
        flush()
        send_keyed()
        if self.wait_replicas > 0:
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        res = pipe.execute(raise_on_error=False)
        waits = []
        if self.wait_replicas > 0:
            waits, res = res[-1:], res[:-1]
        return res, plan, waits

    @staticmethod
    def _collect(results, plan, ids, sent, errors, retry_noscript) -> bool:
        noscript = False
        for r, carried in zip(results, plan):
            if isinstance(carried, int):
                if isinstance(r, Exception):
                    errors.append(str(r))
                else:
                    ids[carried] = JobID(_text(r))
                continue
            if isinstance(r, Exception):
                if retry_noscript and _is_noscript(r):
                    for i in carried:
                        sent[i] = False
                    noscript = True
                else:
                    errors.append(str(r))
                continue
            n = len(carried)
            if len(r) < n:
                errors.append("enqueue script replied %d items for %d jobs" % (len(r), n))
                continue
            dup, failed = set(), set()
            for v in r[n:]:
                if isinstance(v, int) and 0 < v <= n:
                    dup.add(v - 1)
                elif isinstance(v, int) and 0 < -v <= n:
                    failed.add(-v - 1)
            for j, i in enumerate(carried):
                text = _text(r[j])
                if j in failed:
                    errors.append("job %d: %s" % (i + 1, text))
                    continue
                ids[i] = JobID(text, j in dup)
        return noscript

    # --- lookups ---------------------------------------------------------

    def job(self, queue: str, job_id: str) -> "Location":
        """Where a job is now, as `baton job` says: waiting, running,
        scheduled, retrying, dead, done (kept only with a retention) or
        unknown. It only reads."""
        _check_queue(queue)
        if not _is_job_id(job_id):
            raise ValueError("%s is not a job id (they look like 1700000000000-0)" % _go_quote(job_id))
        k = keys_for(queue)
        r = self.redis
        pipe = r.pipeline(transaction=False)
        pipe.zscore(k["retry"], job_id)
        pipe.zscore(k["scheduled"], job_id)
        pipe.zscore(k["done"], job_id)
        pipe.hget(k["dead_index"], job_id)
        pipe.xrange(k["stream"], job_id, job_id)
        pipe.hget(k["key_jobs"], job_id)
        retry, sched, done, letter, own, keyed = pipe.execute()
        job_id = str(job_id)
        loc = Location(id=job_id, state="unknown")
        if keyed is not None and self._in_key_stream(queue, loc, _text(keyed)):
            return loc
        if retry is not None:
            loc.state, loc.due = "retrying", _from_ms(int(retry))
            try:
                a = self._eval(RECORD_FIELD_LUA, _RECORD_FIELD_SHA, [k["retry_jobs"]], [job_id, "attempts"])
                if a is not None:
                    loc.attempts = int(_text(a))
            except Exception:
                pass
            return loc
        if sched is not None:
            loc.state, loc.due = "scheduled", _from_ms(int(sched))
            return loc
        if letter is not None:
            d = self.dead_letter(queue, job_id)
            if d is not None:
                loc.state, loc.attempts, loc.dead = "dead", d.attempts, d
                return loc
        entry = None
        if len(own) == 1:
            o = _text(_field(own[0][1], "orig") or b"")
            if o in ("", job_id):
                entry = job_id
        if entry is not None:
            loc.entry = entry
            self._in_stream(k["stream"], loc)
            return loc
        if done is not None:
            loc.state, loc.done_at = "done", _from_ms(int(done))
            return loc
        for level in ("high", "normal", "low"):
            stream = k["stream"] if level == "normal" else k[level]
            entry = self._find_entry(stream, job_id)
            if entry is not None:
                loc.entry = entry
                if level != "normal":
                    loc.priority = level
                self._in_stream(stream, loc)
                return loc
        return loc

    # --- results ---------------------------------------------------------

    def result(self, queue: str, job_id: str) -> Optional[bytes]:
        """A done job's result (as Go's work.Result): the bytes it handed
        back, None when it set none, for the queue's retention. NotDone
        (with its state) when the job is not done, UnknownJob when the
        queue does not know it."""
        _check_id(queue, job_id)
        k = keys_for(queue)
        v = self._eval(RESULT_LUA, _RESULT_SHA, [k["done"], k["results"]], [job_id])
        if int(v[0]) == 1:
            return _bytes(v[1]) if len(v) > 1 and v[1] is not None else None
        loc = self.job(queue, job_id)
        if loc.state == "done":  # done meanwhile
            return self.result(queue, job_id)
        if loc.state == "unknown":
            raise UnknownJob(_unknown("result of", job_id, queue))
        raise NotDone("result of job %s: job not done: it is %s" % (job_id, loc.state), loc.state)

    def wait(self, queue: str, job_id: str,
             timeout: Union[_dt.timedelta, float, None] = None) -> Optional[bytes]:
        """Blocks until the job is done or dead (as Go's work.Wait) and
        returns its result (None when it set none), or raises JobDead with
        its reason and error. A job already settled returns at once; a job
        the queue does not know raises UnknownJob; TimeoutError after
        timeout (a timedelta or seconds; None: no end).

        It does not poll: it registers as a waiter and blocks (BLPOP) on the
        job's own list, which the script that settles the job pushes its
        outcome to, in the same step: the very scripts Go's Wait runs. It
        holds one connection of the redis client while it blocks; a redis
        client with a socket_timeout needs one over 5 seconds."""
        _check_id(queue, job_id)
        end = None if timeout is None else time.monotonic() + _ns("timeout", timeout) / 1e9
        k = keys_for(queue)
        keys = [k["done"], k["results"], k["dead_index"], k["dead"], k["waiters"]]
        v = self._eval(WAIT_LUA, _WAIT_SHA, keys, [job_id, _WAITERS_KEEP_MS, "1"])
        if _text(v[0]) != "wait":
            return _settled(job_id, v)
        lst = k["waiters"] + ":" + job_id
        outcome = None
        try:
            # A job that is nowhere (never enqueued, or done and not kept)
            # is unknown, unless it was settled since we registered: then
            # its outcome waits on the list.
            if self.job(queue, job_id).state == "unknown":
                outcome = self.redis.lpop(lst)
                if outcome is None:
                    raise UnknownJob(_unknown("wait for", job_id, queue))
                return _outcome(job_id, outcome)
            refreshed = time.monotonic()
            while True:
                block = _WAIT_BLOCK
                if end is not None:
                    block = min(block, end - time.monotonic())
                    if block <= 0:
                        raise TimeoutError("wait for job %s: not settled within %s" % (job_id, timeout))
                got = self.redis.blpop([lst], timeout=max(block, 0.01))
                if got is not None:
                    outcome = got[1]
                    return _outcome(job_id, outcome)
                if time.monotonic() - refreshed > _WAITERS_KEEP_MS / 4000:  # a long wait: keep the registration
                    self._eval(WAIT_LUA, _WAIT_SHA, keys, [job_id, _WAITERS_KEEP_MS, "0"])
                    refreshed = time.monotonic()
        finally:
            if outcome is None:  # the settle script did not count us out
                try:
                    self._eval(UNWAIT_LUA, _UNWAIT_SHA, [k["waiters"]], [job_id])
                except Exception:
                    pass

    def dead_letter(self, queue: str, job_id: str) -> Optional["DeadLetter"]:
        """A job's dead letter, by the job's id or the letter's, or None."""
        k = keys_for(queue)
        did = self.redis.hget(k["dead_index"], job_id)
        did = _text(did) if did is not None else job_id
        msgs = self.redis.xrange(k["dead"], did, did)
        if not msgs:
            return None
        return _dead_letter(msgs[0])

    def _eval(self, lua, sha, keys, args):
        try:
            return self.redis.evalsha(sha, len(keys), *keys, *args)
        except Exception as e:
            if not _is_noscript(e):
                raise
            return self.redis.eval(lua, len(keys), *keys, *args)

    def _in_key_stream(self, queue: str, loc: "Location", held: str) -> bool:
        """Fills loc for a job in its key's stream, waiting or running, as
        work.Locate does (key_status.go's locateKeyed), from its index
        value held ("<entry id>\n<level>\n<key>"); False when that entry is
        not the job's (the index outlived its settle): it is elsewhere."""
        parts = held.split("\n", 2)
        if len(parts) != 3 or not parts[0] or not parts[2] or parts[1] not in ("high", "normal", "low"):
            return False
        entry, level, key = parts
        base = _key_base(queue)
        stream = base + "s:" + level + ":" + key
        try:
            msgs = self.redis.xrange(stream, entry, entry)
        except Exception as e:
            if not str(e).startswith("WRONGTYPE"):
                raise
            return False
        if len(msgs) != 1:
            return False
        o = _text(_field(msgs[0][1], "orig") or b"")
        if o != loc.id and (o != "" or entry != loc.id):
            return False
        loc.entry, loc.key = entry, key
        if level != "normal":
            loc.priority = level
        self._in_stream(stream, loc)
        # its key's running jobs, all levels (the cap counts them all);
        # its waiting ones in its level's stream, where it waits
        pipe = self.redis.pipeline(transaction=False)
        for lv in ("high", "normal", "low"):
            pipe.xlen(base + "s:" + lv + ":" + key)
            pipe.xpending(base + "s:" + lv + ":" + key, GROUP)
        res = pipe.execute(raise_on_error=False)
        for i, lv in enumerate(("high", "normal", "low")):
            n, pend = res[2 * i], res[2 * i + 1]
            n = n if isinstance(n, int) else 0
            pend = int(pend["pending"]) if isinstance(pend, dict) else 0
            loc.key_running += pend
            if lv == level:
                loc.key_waiting = max(0, n - pend)
        return True

    def _find_entry(self, stream: str, job_id: str) -> Optional[str]:
        end, read = "+", 0
        while read < _LOCATE_SCAN:
            msgs = self.redis.xrevrange(stream, end, "-", count=1000)
            if not msgs:
                return None
            for mid, f in msgs:
                if _text(_field(f, "orig") or b"") == job_id:
                    return _text(mid)
            read += len(msgs)
            end = "(" + _text(msgs[-1][0])
        return None

    def _in_stream(self, stream: str, loc: "Location") -> None:
        r = self.redis
        try:
            pend = r.xpending_range(stream, GROUP, loc.entry, loc.entry, 1)
        except Exception as e:
            if not str(e).startswith("NOGROUP"):
                raise
            pend = []
        if len(pend) == 1:
            p = pend[0]
            loc.state = "running"
            loc.consumer = _text(p["consumer"])
            loc.idle = _dt.timedelta(milliseconds=int(p["time_since_delivered"]))
            loc.deliveries = int(p["times_delivered"])
            return
        loc.state = "waiting"
        start = "-"
        try:
            for g in r.xinfo_groups(stream):
                if _text(g["name"]) == GROUP:
                    start = "(" + _text(g["last-delivered-id"])
        except Exception:
            pass
        read = 0
        while read < _LOCATE_SCAN:
            msgs = r.xrange(stream, start, "(" + loc.entry, count=1000)
            loc.ahead += len(msgs)
            if len(msgs) < 1000:
                return
            read += len(msgs)
            start = "(" + _text(msgs[-1][0])


def _check_id(queue: Any, job_id: Any) -> None:
    _check_queue(queue)
    if not _is_job_id(job_id):
        raise ValueError("%s is not a job id (they look like 1700000000000-0)" % _go_quote(job_id))


def _bytes(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode("utf-8", "surrogateescape")


def _unknown(what: str, job_id: str, queue: str) -> str:
    return ("%s job %s: job unknown on queue %s (done and not kept: see retention; or never enqueued here)"
            % (what, job_id, queue))


def _settled(job_id: str, v: list) -> Optional[bytes]:
    """The wait script's reply for a settled job, as wait's."""
    kind = _text(v[0])
    if kind == "done":
        b = _bytes(v[1])
        return b if b else None
    raise JobDead(job_id, _text(v[1]), _text(v[2]))


def _outcome(job_id: str, m: Any) -> Optional[bytes]:
    """A settle script's notify message ("done\\n" result, or "dead\\n"
    reason "\\n" error) as wait's."""
    kind, _, rest = _bytes(m).partition(b"\n")
    if kind == b"done":
        return rest if rest else None
    if kind == b"dead":
        reason, _, why = rest.partition(b"\n")
        raise JobDead(job_id, reason.decode("utf-8", "replace"), why.decode("utf-8", "replace"))
    raise ValueError("wait for job %s: outcome %r" % (job_id, m))


def _check_queue(queue: Any) -> None:
    if not isinstance(queue, str) or queue == "":
        raise BadOption("queue: want a queue name, not %r" % (queue,))


_JOB_ID = re.compile(r"[+-]?[0-9]+-")


def _is_job_id(s: Any) -> bool:
    # As work.Locate: what comes before the first dash is a number.
    return isinstance(s, str) and _JOB_ID.match(s) is not None


def _field(fields: dict, name: str) -> Any:
    v = fields.get(name.encode())
    return fields.get(name) if v is None else v


def _from_ms(ms: int) -> _dt.datetime:
    return _EPOCH + _dt.timedelta(milliseconds=ms)


@dataclasses.dataclass
class DeadLetter:
    """A job that will not run again unless requeued (`baton dead`)."""

    id: str  # the letter's own id
    job_id: str  # the job's id for life
    reason: str  # failed, timeout, crashed, too_large, malformed
    attempts: int
    error: str  # the last error: a tail of the job's stderr
    entry: str  # the job's last stream entry id
    failed_at: Optional[_dt.datetime]
    payload: Optional[bytes]  # None for a malformed entry
    fields: dict  # the producer's own fields, if any


_LETTER = {"orig", "attempts", "reason", "error", "id", "failed_at", "payload"}


def _dead_letter(msg) -> DeadLetter:
    mid, raw = msg
    f = {_text(a): b for a, b in raw.items()}
    s = lambda n: _text(f[n]) if n in f else ""  # noqa: E731
    d = DeadLetter(id=_text(mid), job_id=s("orig"), reason=s("reason"), attempts=0, error=s("error"),
                   entry=s("id"), failed_at=None, payload=None, fields={})
    if not d.job_id:
        d.job_id = d.entry
    try:
        d.attempts = int(s("attempts"))
    except ValueError:
        pass
    try:
        d.failed_at = _from_ms(int(s("failed_at")))
    except ValueError:
        pass
    if "payload" in f:
        p = f["payload"]
        d.payload = p if isinstance(p, bytes) else p.encode("utf-8", "surrogateescape")
    d.fields = {k: _text(v) for k, v in f.items() if k not in _LETTER}
    return d


@dataclasses.dataclass
class Location:
    """Where a job is now, as `baton job` says (its --json fields)."""

    id: str
    state: str  # waiting, running, scheduled, retrying, dead, done, unknown
    entry: Optional[str] = None  # its stream entry (waiting, running)
    priority: Optional[str] = None  # "high" or "low" (waiting, running)
    ahead: int = 0  # waiting entries before it in its stream (waiting)
    consumer: Optional[str] = None  # the slot it runs on (running)
    idle: Optional[_dt.timedelta] = None  # since last delivered or kept fresh (running)
    deliveries: int = 0  # deliveries of this entry (running)
    due: Optional[_dt.datetime] = None  # when it runs (scheduled) or runs again (retrying)
    attempts: int = 0  # runs made (retrying, dead)
    dead: Optional[DeadLetter] = None  # its dead letter (dead)
    done_at: Optional[_dt.datetime] = None  # when it was done (done)
    key: Optional[str] = None  # its key, while it is in its key's stream (waiting, running)
    key_running: int = 0  # its key's jobs running now, all levels (pending in its key's streams)
    key_waiting: int = 0  # its key's jobs waiting in its key's stream of its level, itself included when waiting
