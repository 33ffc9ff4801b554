"use strict";
// baton's producer client for Node: enqueue jobs and look them up.
//
//   const { Client } = require("baton-client");
//   const c = new Client("redis://localhost:6379");
//   const { id, duplicate } = await c.enqueue("mail", '{"user":42}', { delay: 600000, uniqueKey: "welcome-42" });
//   (await c.job("mail", id)).state; // "scheduled"
//   await c.enqueue("api", '{"call":"refund"}', { key: "customer-42" }); // docs/keys.md
//
// It runs the very Lua scripts baton's Go code runs (work/lua in the
// repository; lua/ holds checked copies), so ids, options and errors are
// those of `baton enqueue` and `baton job`. docs/clients.md has the rest.

const crypto = require("crypto");
const fs = require("fs");
const path = require("path");
const Redis = require("ioredis");

const GROUP = "baton"; // the consumer group every holder reads through
const MAX_JOB_ATTEMPTS = 1000;
const MAX_KEY_LEN = 256; // the longest job key, in bytes (work/key.go's MaxKeyLen)
const SCRIPT_BATCH = 200; // jobs with options per script call, as work/enqueue.go
const SCRIPT_BYTES = 64 << 20;
const LOCATE_SCAN = 100000; // work/locate.go's locateScan

const ENQUEUE_LUA = fs.readFileSync(path.join(__dirname, "lua", "enqueue.lua"));
const RECORD_FIELD_LUA = fs.readFileSync(path.join(__dirname, "lua", "record_field.lua"));
const sha1 = (b) => crypto.createHash("sha1").update(b).digest("hex");
const WAIT_LUA = fs.readFileSync(path.join(__dirname, "lua", "wait.lua"));
const UNWAIT_LUA = fs.readFileSync(path.join(__dirname, "lua", "unwait.lua"));
const RESULT_LUA = fs.readFileSync(path.join(__dirname, "lua", "result.lua"));
const KEY_ENQUEUE_LUA = fs.readFileSync(path.join(__dirname, "lua", "key_enqueue.lua")); // work/keylua/enqueue.lua
const ENQUEUE_SHA = sha1(ENQUEUE_LUA);
const RECORD_FIELD_SHA = sha1(RECORD_FIELD_LUA);
const WAIT_SHA = sha1(WAIT_LUA);
const UNWAIT_SHA = sha1(UNWAIT_LUA);
const RESULT_SHA = sha1(RESULT_LUA);
// wait: how long a waiter's registration lasts without a refresh, and how
// long one BLPOP blocks at most (work/wait.go's waitersKeep, waitBlock).
const WAITERS_KEEP_MS = 3600 * 1000;
const WAIT_BLOCK_MS = 5000;

/** A job option with an impossible value; nothing was sent. */
class BadOption extends Error {
  constructor(msg) {
    super(msg);
    this.name = "BadOption";
  }
}

/** Redis refused some jobs of a call; ids has each added job's id, null for the others. */
class EnqueueError extends Error {
  constructor(msg, ids) {
    super(msg);
    this.name = "EnqueueError";
    this.ids = ids;
  }
}

/** Fewer replicas than waitReplicas confirmed the jobs in time (they are queued). */
/** result() of a job that is not done (yet); state says where it is. */
class NotDone extends Error {
  constructor(msg, state) {
    super(msg);
    this.name = "NotDone";
    this.state = state;
  }
}

/** result() or wait() of a job the queue does not know: done and not kept (see retention), or never enqueued there. */
class UnknownJob extends Error {
  constructor(msg) {
    super(msg);
    this.name = "UnknownJob";
  }
}

/**
 * wait() of a job that was dead-lettered (as Go's work.DeadError): its
 * reason (failed, timeout, crashed, rejected, cancelled, ...) and last
 * error; cancelled is true for a cancelled job.
 */
class JobDead extends Error {
  constructor(jobId, reason, error) {
    super(`job ${jobId} dead-lettered (${reason}): ${error}`);
    this.name = "JobDead";
    this.jobId = jobId;
    this.reason = reason;
    this.error = error;
    this.cancelled = reason === "cancelled";
  }
}

/** wait() of a job not settled within its timeout. */
class TimeoutError extends Error {
  constructor(msg) {
    super(msg);
    this.name = "TimeoutError";
  }
}

class NotReplicated extends EnqueueError {
  constructor(msg, ids) {
    super(msg, ids);
    this.name = "NotReplicated";
  }
}

/** The Redis keys of a queue (work/keys.go's KeysFor), under the hash tag {queue}. */
function keysFor(queue) {
  const base = "baton:{" + queue + "}";
  return {
    stream: base,
    high: base + ":high",
    low: base + ":low",
    retry: base + ":retry",
    retryJobs: base + ":retry:jobs",
    scheduled: base + ":scheduled",
    scheduledJobs: base + ":scheduled:jobs",
    dead: base + ":dead",
    deadIndex: base + ":dead:ids",
    stats: base + ":stats",
    done: base + ":done",
    results: base + ":results",
    waiters: base + ":waiters",
    keyJobs: base + ":key:jobs",
  };
}

// keyBase is the prefix of a queue's job keys' Redis keys (work/key.go's
// keyBase): + "s:<level>:<key>" is a key's stream (work.Keys.KeyStream),
// "jobs" the index of its jobs, "streams" the set of key streams.
const keyBase = (queue) => "baton:{" + queue + "}:key:";

const uniqueKey = (queue, key) => "baton:{" + queue + "}:unique:" + key;

// goDuration prints ns nanoseconds (a BigInt) as Go prints a time.Duration.
function goDuration(ns) {
  if (ns === 0n) return "0s";
  const sign = ns < 0n ? "-" : "";
  const u = ns < 0n ? -ns : ns;
  const frac = (v, unit, digits) => {
    const whole = v / unit;
    const f = v % unit;
    if (f === 0n) return whole.toString();
    return (whole.toString() + "." + f.toString().padStart(digits, "0")).replace(/0+$/, "");
  };
  if (u < 1000n) return sign + u + "ns";
  if (u < 1000000n) return sign + frac(u, 1000n, 3) + "µs";
  if (u < 1000000000n) return sign + frac(u, 1000000n, 6) + "ms";
  const h = u / 3600000000000n;
  let rest = u % 3600000000000n;
  const m = rest / 60000000000n;
  rest %= 60000000000n;
  let out = sign;
  if (h) out += h + "h";
  if (h || m) out += m + "m";
  return out + frac(rest, 1000000000n, 9) + "s";
}

// ms reads a duration option: milliseconds, a finite number.
function ms(name, v) {
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new BadOption(`bad job option: ${name}: want milliseconds (a finite number), not ${describe(v)}`);
  }
  return v;
}
const nsOf = (msv) => BigInt(Math.round(msv * 1e6));
const describe = (v) => (typeof v === "string" ? JSON.stringify(v) : String(v));

const PRIORITIES = { normal: 0, high: 1, low: 2 };
const KNOWN = new Set(["delay", "at", "uniqueKey", "uniqueFor", "priority", "timeout", "maxAttempts", "traceparent", "tracestate", "key"]);

// goQuote prints a string as Go's %q does (strconv.Quote): what is not
// printable escaped.
const PRINTABLE = /^[\p{L}\p{M}\p{N}\p{P}\p{S} ]$/u;
const GO_ESC = { "\x07": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"' };
function goQuote(s) {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0);
    if (GO_ESC[ch]) out += GO_ESC[ch];
    else if (PRINTABLE.test(ch)) out += ch;
    else if (c < 0x20 || c === 0x7f) out += "\\x" + c.toString(16).padStart(2, "0");
    else if (c >= 0xd800 && c <= 0xdfff) out += "\\ufffd";
    else if (c < 0x10000) out += "\\u" + c.toString(16).padStart(4, "0");
    else out += "\\U" + c.toString(16).padStart(8, "0");
  }
  return out + '"';
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

// checkKey refuses a job key as work.ValidKey does, with its messages.
function checkKey(k) {
  if (typeof k !== "string") throw new BadOption(`bad job option: key: want a string, not ${describe(k)}`);
  const n = Buffer.byteLength(k, "utf8");
  let why = null;
  if (k === "") why = "empty";
  else if (n > MAX_KEY_LEN) why = `${n} bytes, at most ${MAX_KEY_LEN}`;
  else if (LONE_SURROGATE.test(k)) why = "not UTF-8";
  else if (k.includes("{") || k.includes("}")) why = `${goQuote(k)} holds '{' or '}'`;
  else if (/[\x00-\x1f\x7f]/.test(k)) why = `${goQuote(k)} holds a control character`;
  if (why !== null) throw new BadOption("bad job option: bad job key: " + why);
}

// A W3C traceparent as baton's reader accepts it (tracing/w3c.go).
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[\s\S]*)?$/;
function checkTrace(tp, ts) {
  if (typeof tp !== "string" || !TRACEPARENT.test(tp) || tp.startsWith("ff") || (tp.startsWith("00") && tp.length !== 55) ||
      tp.slice(3, 35) === "0".repeat(32) || tp.slice(36, 52) === "0".repeat(16)) {
    throw new BadOption(`bad job option: traceparent ${describe(tp)}: want a W3C traceparent such as 00-<32 hex>-<16 hex>-01`);
  }
  if (ts !== null && (typeof ts !== "string" || ts.length > 512 || !/^[\x20-\x7e]*$/.test(ts))) {
    throw new BadOption(`bad job option: tracestate ${describe(ts)}: want printable ASCII, at most 512 characters`);
  }
}

// options checks a job's options as work/enqueue.go's Option functions do,
// with the same messages (durations as Go prints them).
function options(o) {
  const out = { dueMs: null, unique: null, uniqueForMs: 0, maxAttempts: 0, timeoutMs: null, priority: 0, traceparent: null, tracestate: null, key: null };
  if (o == null) return out;
  if (typeof o !== "object") throw new BadOption(`bad job option: options: want an object, not ${describe(o)}`);
  for (const k of Object.keys(o)) {
    if (!KNOWN.has(k)) throw new BadOption(`bad job option: unknown option ${JSON.stringify(k)}`);
  }
  const set = (k) => o[k] !== undefined && o[k] !== null;
  if (set("delay") && set("at")) throw new BadOption("bad job option: give one of delay and at");
  if (set("delay")) {
    const d = ms("delay", o.delay);
    if (d < 0) throw new BadOption(`bad job option: delay ${goDuration(nsOf(d))} is negative`);
    out.dueMs = Math.floor(Date.now() + d);
  }
  if (set("at")) {
    const t = o.at instanceof Date ? o.at.getTime() : NaN;
    if (!Number.isFinite(t)) throw new BadOption(`bad job option: at: want a valid Date, not ${describe(o.at)}`);
    out.dueMs = t;
  }
  if (set("uniqueKey")) {
    if (typeof o.uniqueKey !== "string") throw new BadOption(`bad job option: unique key: want a string, not ${describe(o.uniqueKey)}`);
    if (o.uniqueKey === "") throw new BadOption("bad job option: empty unique key");
    out.unique = o.uniqueKey;
  }
  if (set("uniqueFor")) {
    const d = ms("uniqueFor", o.uniqueFor);
    if (d < 1) throw new BadOption(`bad job option: unique-for ${goDuration(nsOf(d))} must be at least 1ms`);
    out.uniqueForMs = Math.floor(d);
  }
  if (set("maxAttempts")) {
    const n = o.maxAttempts;
    if (!Number.isInteger(n)) throw new BadOption(`bad job option: max attempts: want an integer, not ${describe(n)}`);
    if (n < 1 || n > MAX_JOB_ATTEMPTS) {
      throw new BadOption(`bad job option: max attempts ${n} must be between 1 and ${MAX_JOB_ATTEMPTS}`);
    }
    out.maxAttempts = n;
  }
  if (set("timeout")) {
    const d = ms("timeout", o.timeout);
    if (d <= 0) throw new BadOption(`bad job option: timeout ${goDuration(nsOf(d))} must be positive`);
    out.timeoutMs = Math.floor(d); // 0 for under 1ms: no timeout, as in Go
  }
  if (set("priority")) {
    if (!Object.prototype.hasOwnProperty.call(PRIORITIES, o.priority)) {
      throw new BadOption(`bad job option: priority ${describe(o.priority)}: want high, normal or low`);
    }
    out.priority = PRIORITIES[o.priority];
  }
  if (out.uniqueForMs && out.unique === null) throw new BadOption("bad job option: unique-for needs a unique key");
  if (set("tracestate") && !set("traceparent")) throw new BadOption("bad job option: tracestate needs a traceparent");
  if (set("traceparent")) {
    checkTrace(o.traceparent, set("tracestate") ? o.tracestate : null);
    out.traceparent = o.traceparent;
    if (set("tracestate") && o.tracestate !== "") out.tracestate = o.tracestate;
  }
  if (set("key")) {
    checkKey(o.key);
    out.key = o.key;
  }
  return out;
}

const plain = (o) =>
  o.dueMs === null && o.unique === null && !o.maxAttempts && o.timeoutMs === null && !o.priority && o.traceparent === null && o.key === null;

function payloadOf(p) {
  if (Buffer.isBuffer(p)) return p;
  if (typeof p === "string") return Buffer.from(p, "utf8");
  if (p instanceof Uint8Array) return Buffer.from(p);
  throw new BadOption(`bad job option: payload: want a string or a Buffer, not ${typeof p}`);
}

// MessagePack, as cmsgpack packs strings and arrays.
function packStr(b) {
  if (typeof b === "string") b = Buffer.from(b, "utf8");
  const n = b.length;
  let h;
  if (n < 32) h = Buffer.from([0xa0 | n]);
  else if (n < 1 << 8) h = Buffer.from([0xd9, n]);
  else if (n < 1 << 16) h = Buffer.from([0xda, n >> 8, n & 0xff]);
  else {
    h = Buffer.alloc(5);
    h[0] = 0xdb;
    h.writeUInt32BE(n, 1);
  }
  return [h, b];
}
function arrayHeader(n) {
  if (n < 16) return Buffer.from([0x90 | n]);
  if (n < 1 << 16) return Buffer.from([0xdc, n >> 8, n & 0xff]);
  const h = Buffer.alloc(5);
  h[0] = 0xdd;
  h.writeUInt32BE(n, 1);
  return h;
}
const packed = (x) => Buffer.concat(packStr(x));
const KIND = [
  ["0", "0u", "0t"],
  ["1", "1u", "1t"],
  ["2", "2u", "2t"],
].map((row) => row.map(packed));
const PRIO_NAME = [null, "high", "low"];
const DUE_NOW = packed("0");
const F_PAYLOAD = packed("payload");
const TWO = Buffer.from([2]);

function fields(payload, o) {
  const f = ["payload", payload];
  if (o.unique !== null) f.push("unique", o.unique);
  if (o.maxAttempts) f.push("max_attempts", String(o.maxAttempts));
  if (o.timeoutMs !== null) f.push("timeout", String(o.timeoutMs));
  if (o.priority) f.push("priority", PRIO_NAME[o.priority]);
  if (o.key !== null) f.push("key", o.key);
  if (o.traceparent !== null) f.push("traceparent", o.traceparent);
  if (o.tracestate !== null) f.push("tracestate", o.tracestate);
  return f;
}

// ScriptCall gathers one enqueue script call's arguments: one MessagePack
// array of every job's items (work/enqueue.go's scriptCall).
class ScriptCall {
  constructor(k) {
    this.jobs = [];
    this.keys = [k.stream, k.scheduled, k.scheduledJobs, k.high, k.low];
    this.parts = [Buffer.alloc(5)];
    this.n = 0;
    this.size = 0;
  }
  item(b) {
    const [h, s] = packStr(b);
    this.parts.push(h, s);
    this.size += h.length + s.length;
    this.n++;
  }
  // constant adds an item packed beforehand.
  constant(b) {
    this.parts.push(b);
    this.size += b.length;
    this.n++;
  }
  add(i, queue, payload, o, nowMs) {
    const due = o.dueMs !== null && o.dueMs > nowMs ? o.dueMs : 0;
    if (due) this.item(String(due));
    else this.constant(DUE_NOW);
    if (o.unique === null) this.constant(KIND[o.priority][0]);
    else if (o.uniqueForMs) {
      this.constant(KIND[o.priority][2]);
      this.item(String(o.uniqueForMs));
    } else this.constant(KIND[o.priority][1]);
    if (o.unique !== null) this.keys.push(uniqueKey(queue, o.unique));
    if (!due && plain(o)) {
      // the common case, without building its fields
      this.parts.push(TWO);
      this.n++;
      this.constant(F_PAYLOAD);
      this.item(payload);
      this.jobs.push(i);
      return;
    }
    const f = fields(payload, o);
    if (due) {
      // A delayed job's record: the script appends its orig pair.
      const rec = [arrayHeader(f.length + 2)];
      for (const x of f) rec.push(...packStr(x));
      this.parts.push(Buffer.from([1]));
      this.n++;
      this.item(Buffer.concat(rec));
    } else {
      this.parts.push(Buffer.from([f.length]));
      this.n++;
      for (const x of f) this.item(x);
    }
    this.jobs.push(i);
  }
  argv() {
    this.parts[0][0] = 0xdd;
    this.parts[0].writeUInt32BE(this.n, 1);
    return Buffer.concat(this.parts);
  }
}

// KeyCall gathers one call of the keys' enqueue script (work/key_enqueue.go's
// keyCall): the jobs that have a key and no delay, which wait in their
// keys' streams rather than in their levels'.
const LEVEL = ["normal", "high", "low"].map(packed);
const UK_NONE = packed("");
const UK_UNIQUE = packed("u");
const UK_TTL = packed("t");
class KeyCall extends ScriptCall {
  constructor(k) {
    super(k);
    this.keys = [k.stream, k.keyJobs];
  }
  add(i, queue, payload, o) {
    this.constant(LEVEL[o.priority]);
    this.item(o.key);
    if (o.unique === null) this.constant(UK_NONE);
    else if (o.uniqueForMs) {
      this.constant(UK_TTL);
      this.item(String(o.uniqueForMs));
    } else this.constant(UK_UNIQUE);
    if (o.unique !== null) this.keys.push(uniqueKey(queue, o.unique));
    // Its record: the script appends its orig pair, counted here.
    const f = fields(payload, o);
    const rec = [arrayHeader(f.length + 2)];
    for (const x of f) rec.push(...packStr(x));
    this.item(Buffer.concat(rec));
    this.jobs.push(i);
  }
}

const isNoScript = (e) => e != null && String(e.message || "").startsWith("NOSCRIPT");

/**
 * A producer of baton jobs. redis is an ioredis instance, a URL or ioredis
 * options. waitReplicas > 0 ends each call with WAIT (as
 * enqueue_wait_replicas): NotReplicated, with the ids, unless that many
 * replicas have the jobs within waitTimeout (ms, default 1000).
 */
class Client {
  constructor(redis, { waitReplicas = 0, waitTimeout = 1000 } = {}) {
    if (!Number.isInteger(waitReplicas) || waitReplicas < 0) {
      throw new BadOption(`waitReplicas ${describe(waitReplicas)}: want a count, 0 or more`);
    }
    this.waitReplicas = waitReplicas;
    this.waitTimeout = Math.floor(ms("waitTimeout", waitTimeout));
    this.owned = !(redis instanceof Redis || (redis && typeof redis.pipeline === "function"));
    this.redis = this.owned ? new Redis(redis) : redis;
  }

  /** Closes the connection when the client made it. */
  async close() {
    if (this.owned) await this.redis.quit();
  }

  /**
   * Adds one job and resolves to { id, duplicate }: the job's id for life,
   * and whether nothing was added because a job with the same unique key
   * was queued (id is then that job's). Options: delay (ms) or at (a Date;
   * a past one runs now), uniqueKey and uniqueFor (ms), priority ("high",
   * "normal", "low"), timeout (ms), maxAttempts, traceparent (and
   * tracestate): the W3C trace context the job's runs continue
   * (docs/tracing.md), key (a customer, a tenant: 1 to 256 bytes of UTF-8
   * without "{", "}" or control characters): holders run at most the
   * queue's key_concurrency of the key's jobs at once, taking keys in turns
   * (docs/keys.md). A bad option rejects with BadOption before anything
   * is sent.
   */
  async enqueue(queue, payload, opts) {
    return (await this.enqueueMany(queue, [payload], opts))[0];
  }

  /**
   * Adds jobs in one round trip (a pipeline) and resolves to their
   * { id, duplicate } in order. Each item is a payload, which gets opts, or
   * { payload, ...options of its own }. Every option is checked first: one
   * bad option sends nothing (BadOption, naming the job: "job 3: ...").
   */
  async enqueueMany(queue, items, opts) {
    checkQueue(queue);
    const jobs = [];
    const os = [];
    let common = null;
    let i = 0;
    for (const item of items) {
      i++;
      try {
        if (item !== null && typeof item === "object" && !Buffer.isBuffer(item) && !(item instanceof Uint8Array)) {
          const { payload, ...own } = item;
          jobs.push(payloadOf(payload));
          os.push(options(own));
        } else {
          if (common === null) common = options(opts);
          jobs.push(payloadOf(item));
          os.push(common);
        }
      } catch (e) {
        if (e instanceof BadOption) throw new BadOption(`job ${i}: ${e.message}`);
        throw e;
      }
    }
    if (jobs.length === 0) {
      options(opts);
      return [];
    }
    const ids = new Array(jobs.length).fill(null);
    const sent = new Array(jobs.length).fill(false);
    const k = keysFor(queue);
    const errors = [];
    let r = await this._send(queue, k, jobs, os, sent);
    const waits = [...r.waits];
    if (this._collect(r, ids, sent, errors, true)) {
      await this.redis.script("LOAD", ENQUEUE_LUA);
      r = await this._send(queue, k, jobs, os, sent);
      waits.push(...r.waits);
      this._collect(r, ids, sent, errors, false);
    }
    if (errors.length > 0) throw new EnqueueError(errors[0], ids);
    for (const [err, n] of waits) {
      if (err) throw new NotReplicated(`not confirmed by enough replicas: WAIT: ${err.message}`, ids);
      if (n < this.waitReplicas) {
        throw new NotReplicated(
          `not confirmed by enough replicas: ${n} of ${this.waitReplicas} replicas within ${goDuration(BigInt(this.waitTimeout) * 1000000n)}`,
          ids
        );
      }
    }
    return ids;
  }

  // _send sends, in one pipeline, the jobs not yet sent: a call of one job
  // without options is one XADD, as in Go; any other goes in enqueue
  // script calls of up to 200 jobs, in job order, so ids grow in job order.
  // (Go sends a batch's plain jobs before its first job with options as
  // XADDs; here a command costs more than the script's own work, and the
  // script adds a plain job with the same XADD.) Jobs with a key and no
  // delay go, as in Go, in calls of the keys' enqueue script after the
  // others (EVAL, as Go sends it: no NOSCRIPT to retry).
  async _send(queue, k, jobs, os, sent) {
    const nowMs = Date.now();
    const p = this.redis.pipeline();
    const plan = [];
    let scripted = jobs.length > 1;
    let call = null;
    let keyed = null;
    const sendKeyed = () => {
      if (keyed && keyed.jobs.length > 0) {
        p.eval(KEY_ENQUEUE_LUA, keyed.keys.length, ...keyed.keys, keyBase(queue), keyed.argv());
        plan.push(keyed.jobs);
      }
      keyed = null;
    };
    const flush = () => {
      if (call && call.jobs.length > 0) {
        p.evalsha(ENQUEUE_SHA, call.keys.length, ...call.keys, call.argv());
        plan.push(call.jobs);
      }
      call = null;
    };
    for (let i = 0; i < jobs.length; i++) {
      if (sent[i]) continue;
      sent[i] = true;
      const o = os[i];
      scripted = scripted || !plain(o);
      if (!scripted) {
        p.xadd(k.stream, "*", "payload", jobs[i]);
        plan.push(i);
        continue;
      }
      if (o.key !== null && (o.dueMs === null || o.dueMs <= nowMs)) {
        if (!keyed) keyed = new KeyCall(k);
        keyed.add(i, queue, jobs[i], o);
        if (keyed.jobs.length === SCRIPT_BATCH) sendKeyed();
        continue;
      }
      if (!call) call = new ScriptCall(k);
      call.add(i, queue, jobs[i], o, nowMs);
      if (call.jobs.length === SCRIPT_BATCH || call.size >= SCRIPT_BYTES) flush();
    }
    flush();
    sendKeyed();
    if (this.waitReplicas > 0) p.call("WAIT", this.waitReplicas, this.waitTimeout);
    let res = (await p.exec()) || [];
    let waits = [];
    if (this.waitReplicas > 0) {
      waits = res.slice(-1);
      res = res.slice(0, -1);
    }
    return { res, plan, waits };
  }

  _collect({ res, plan }, ids, sent, errors, retryNoScript) {
    let noscript = false;
    for (let c = 0; c < plan.length; c++) {
      const [err, v] = res[c];
      const carried = plan[c];
      if (typeof carried === "number") {
        if (err) errors.push(err.message);
        else ids[carried] = { id: String(v), duplicate: false };
        continue;
      }
      if (err) {
        if (retryNoScript && isNoScript(err)) {
          for (const i of carried) sent[i] = false;
          noscript = true;
        } else errors.push(err.message);
        continue;
      }
      const n = carried.length;
      if (v.length < n) {
        errors.push(`enqueue script replied ${v.length} items for ${n} jobs`);
        continue;
      }
      const dup = new Set();
      const failed = new Set();
      for (const x of v.slice(n)) {
        if (x > 0 && x <= n) dup.add(x - 1);
        else if (x < 0 && -x <= n) failed.add(-x - 1);
      }
      carried.forEach((i, j) => {
        if (failed.has(j)) errors.push(`job ${i + 1}: ${v[j]}`);
        else ids[i] = { id: String(v[j]), duplicate: dup.has(j) };
      });
    }
    return noscript;
  }

  /**
   * Where a job is now, as `baton job --json` says: { id, state, entry,
   * priority, ahead, consumer, idleMs, deliveries, due, attempts,
   * deadLetter, doneAt, key, keyRunning, keyWaiting } (only the fields of
   * its state; key and its counts while it is in its key's stream, waiting
   * or running). It only reads.
   */
  async job(queue, id) {
    checkQueue(queue);
    if (typeof id !== "string" || !/^[+-]?[0-9]+-/.test(id)) {
      throw new Error(`${JSON.stringify(String(id))} is not a job id (they look like 1700000000000-0)`);
    }
    const k = keysFor(queue);
    const r = this.redis;
    const res = await r
      .pipeline()
      .zscore(k.retry, id)
      .zscore(k.scheduled, id)
      .zscore(k.done, id)
      .hget(k.deadIndex, id)
      .xrange(k.stream, id, id)
      .hget(k.keyJobs, id)
      .exec();
    for (const [err] of res) if (err) throw err;
    const [retry, sched, done, letter, own, keyed] = res.map(([, v]) => v);
    const loc = { id, state: "unknown" };
    if (keyed !== null && (await this._inKeyStream(queue, loc, keyed))) return loc;
    if (retry !== null) {
      loc.state = "retrying";
      loc.due = new Date(Number(retry));
      try {
        const a = await this._eval(RECORD_FIELD_LUA, RECORD_FIELD_SHA, [k.retryJobs], [id, "attempts"]);
        if (a !== null) loc.attempts = parseInt(a, 10) || 0;
      } catch (e) {
        // as Locate: the attempts are left out
      }
      return loc;
    }
    if (sched !== null) {
      loc.state = "scheduled";
      loc.due = new Date(Number(sched));
      return loc;
    }
    if (letter !== null) {
      const d = await this.deadLetter(queue, id);
      if (d) {
        loc.state = "dead";
        loc.attempts = d.attempts;
        loc.deadLetter = d;
        return loc;
      }
    }
    let entry = null;
    if (own.length === 1) {
      const o = fieldOf(own[0][1], "orig") || "";
      if (o === "" || o === id) entry = id;
    }
    if (entry !== null) {
      loc.entry = entry;
      await this._inStream(k.stream, loc);
      return loc;
    }
    if (done !== null) {
      loc.state = "done";
      loc.doneAt = new Date(Number(done));
      return loc;
    }
    for (const level of ["high", "normal", "low"]) {
      const stream = level === "normal" ? k.stream : k[level];
      entry = await this._findEntry(stream, id);
      if (entry !== null) {
        loc.entry = entry;
        if (level !== "normal") loc.priority = level;
        await this._inStream(stream, loc);
        return loc;
      }
    }
    return loc;
  }

  /**
   * A job's dead letter, by the job's id or the letter's, or null:
   * { id, jobId, reason, attempts, error, entry, failedAt, payload (a
   * Buffer, null for a malformed entry), fields }.
   */
  async deadLetter(queue, id) {
    const k = keysFor(queue);
    const did = (await this.redis.hget(k.deadIndex, id)) || id;
    const msgs = await this.redis.xrangeBuffer(k.dead, did, did);
    if (msgs.length === 0) return null;
    const [mid, raw] = msgs[0];
    const f = new Map();
    for (let i = 0; i < raw.length; i += 2) f.set(raw[i].toString(), raw[i + 1]);
    const s = (n) => (f.has(n) ? f.get(n).toString() : "");
    const d = {
      id: mid.toString(),
      jobId: s("orig") || s("id"),
      reason: s("reason"),
      attempts: parseInt(s("attempts"), 10) || 0,
      error: s("error"),
      entry: s("id"),
      failedAt: /^[0-9]+$/.test(s("failed_at")) ? new Date(Number(s("failed_at"))) : null,
      payload: f.has("payload") ? f.get("payload") : null,
      fields: {},
    };
    for (const [name, v] of f) {
      if (!LETTER.has(name)) d.fields[name] = v.toString();
    }
    return d;
  }

  /**
   * A done job's result (as Go's work.Result): a Buffer, null when it set
   * none, for the queue's retention. Rejects with NotDone (with its state)
   * when the job is not done, UnknownJob when the queue does not know it.
   */
  async result(queue, id) {
    checkId(queue, id);
    const k = keysFor(queue);
    const v = await this._evalBuffer(RESULT_LUA, RESULT_SHA, [k.done, k.results], [id]);
    if (Number(v[0]) === 1) return v.length > 1 && v[1] !== null ? Buffer.from(v[1]) : null;
    const loc = await this.job(queue, id);
    if (loc.state === "done") return this.result(queue, id); // done meanwhile
    if (loc.state === "unknown") throw new UnknownJob(unknown("result of", id, queue));
    throw new NotDone(`result of job ${id}: job not done: it is ${loc.state}`, loc.state);
  }

  /**
   * Resolves once the job is done or dead (as Go's work.Wait): to its
   * result (a Buffer, null when it set none), or rejects with JobDead (its
   * reason and error). A job already settled resolves at once; a job the
   * queue does not know rejects with UnknownJob; TimeoutError after
   * timeout ms (none: no end).
   *
   * It does not poll: it registers as a waiter and blocks (BLPOP) on the
   * job's own list, which the script that settles the job pushes its
   * outcome to, in the same step: the very scripts Go's Wait runs. The
   * BLPOP runs on a connection of its own (duplicated from the client's),
   * so the client's other calls go on meanwhile.
   */
  async wait(queue, id, timeout) {
    checkId(queue, id);
    const end = timeout === undefined || timeout === null ? null : Date.now() + ms("timeout", timeout);
    const k = keysFor(queue);
    const keys = [k.done, k.results, k.deadIndex, k.dead, k.waiters];
    const v = await this._evalBuffer(WAIT_LUA, WAIT_SHA, keys, [id, WAITERS_KEEP_MS, "1"]);
    if (v[0].toString() !== "wait") return settled(id, v);
    const list = k.waiters + ":" + id;
    let got = null;
    let conn = null;
    try {
      // A job that is nowhere (never enqueued, or done and not kept) is
      // unknown, unless it was settled since we registered: then its
      // outcome waits on the list.
      if ((await this.job(queue, id)).state === "unknown") {
        got = await this.redis.lpopBuffer(list);
        if (got === null) throw new UnknownJob(unknown("wait for", id, queue));
        return outcome(id, got);
      }
      conn = this.redis.duplicate();
      let refreshed = Date.now();
      for (;;) {
        let block = WAIT_BLOCK_MS;
        if (end !== null) {
          block = Math.min(block, end - Date.now());
          if (block <= 0) throw new TimeoutError(`wait for job ${id}: not settled within ${timeout}ms`);
        }
        const r = await conn.blpopBuffer(list, Math.max(block, 10) / 1000);
        if (r !== null) {
          got = r[1];
          return outcome(id, got);
        }
        if (Date.now() - refreshed > WAITERS_KEEP_MS / 4) { // a long wait: keep the registration
          await this._eval(WAIT_LUA, WAIT_SHA, keys, [id, WAITERS_KEEP_MS, "0"]);
          refreshed = Date.now();
        }
      }
    } finally {
      if (conn !== null) conn.disconnect();
      if (got === null) { // the settle script did not count us out
        await this._eval(UNWAIT_LUA, UNWAIT_SHA, [k.waiters], [id]).catch(() => {});
      }
    }
  }

  async _evalBuffer(lua, sha, keys, args) {
    try {
      return await this.redis.evalshaBuffer(sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!isNoScript(e)) throw e;
      return await this.redis.evalBuffer(lua, keys.length, ...keys, ...args);
    }
  }

  async _eval(lua, sha, keys, args) {
    try {
      return await this.redis.evalsha(sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!isNoScript(e)) throw e;
      return await this.redis.eval(lua, keys.length, ...keys, ...args);
    }
  }

  // _inKeyStream fills loc for a job in its key's stream, waiting or
  // running, as work.Locate does (key_status.go's locateKeyed), from its
  // index value held ("<entry id>\n<level>\n<key>"); false when that entry
  // is not the job's (the index outlived its settle): it is elsewhere.
  async _inKeyStream(queue, loc, held) {
    const parts = held.split("\n");
    if (parts.length < 3) return false;
    const [entry, level] = parts;
    const key = parts.slice(2).join("\n");
    if (!entry || !key || !["high", "normal", "low"].includes(level)) return false;
    const base = keyBase(queue);
    const stream = base + "s:" + level + ":" + key;
    let msgs;
    try {
      msgs = await this.redis.xrange(stream, entry, entry);
    } catch (e) {
      if (!String(e.message).startsWith("WRONGTYPE")) throw e;
      return false;
    }
    if (msgs.length !== 1) return false;
    const o = fieldOf(msgs[0][1], "orig") || "";
    if (o !== loc.id && (o !== "" || entry !== loc.id)) return false;
    loc.entry = entry;
    loc.key = key;
    if (level !== "normal") loc.priority = level;
    await this._inStream(stream, loc);
    // its key's running jobs, all levels (the cap counts them all); its
    // waiting ones in its level's stream, where it waits
    const levels = ["high", "normal", "low"];
    const p = this.redis.pipeline();
    for (const lv of levels) p.xlen(base + "s:" + lv + ":" + key).xpending(base + "s:" + lv + ":" + key, GROUP);
    const res = await p.exec();
    loc.keyRunning = 0;
    levels.forEach((lv, i) => {
      const [nerr, n] = res[2 * i];
      const [perr, pend] = res[2 * i + 1];
      const pending = perr || !Array.isArray(pend) ? 0 : Number(pend[0]);
      loc.keyRunning += pending;
      if (lv === level) loc.keyWaiting = Math.max(0, (nerr ? 0 : Number(n)) - pending);
    });
    return true;
  }

  async _findEntry(stream, id) {
    let end = "+";
    for (let read = 0; read < LOCATE_SCAN; ) {
      const msgs = await this.redis.xrevrange(stream, end, "-", "COUNT", 1000);
      if (msgs.length === 0) return null;
      for (const [mid, f] of msgs) if (fieldOf(f, "orig") === id) return mid;
      read += msgs.length;
      end = "(" + msgs[msgs.length - 1][0];
    }
    return null;
  }

  async _inStream(stream, loc) {
    const r = this.redis;
    let pend = [];
    try {
      pend = await r.xpending(stream, GROUP, loc.entry, loc.entry, 1);
    } catch (e) {
      if (!String(e.message).startsWith("NOGROUP")) throw e;
    }
    if (pend.length === 1) {
      const [, consumer, idle, deliveries] = pend[0];
      loc.state = "running";
      loc.consumer = consumer;
      loc.idleMs = Number(idle);
      loc.deliveries = Number(deliveries);
      return;
    }
    loc.state = "waiting";
    loc.ahead = 0;
    let start = "-";
    try {
      for (const g of await r.xinfo("GROUPS", stream)) {
        const m = new Map();
        for (let i = 0; i < g.length; i += 2) m.set(g[i], g[i + 1]);
        if (m.get("name") === GROUP) start = "(" + m.get("last-delivered-id");
      }
    } catch (e) {
      // no stream: every entry is ahead
    }
    for (let read = 0; read < LOCATE_SCAN; ) {
      const msgs = await r.xrange(stream, start, "(" + loc.entry, "COUNT", 1000);
      loc.ahead += msgs.length;
      if (msgs.length < 1000) return;
      read += msgs.length;
      start = "(" + msgs[msgs.length - 1][0];
    }
  }
}

const LETTER = new Set(["orig", "attempts", "reason", "error", "id", "failed_at", "payload"]);

function fieldOf(flat, name) {
  for (let i = 0; i < flat.length; i += 2) if (flat[i] === name) return flat[i + 1];
  return null;
}

function checkId(queue, id) {
  checkQueue(queue);
  if (typeof id !== "string" || !/^[+-]?[0-9]+-/.test(id)) {
    throw new Error(`${JSON.stringify(String(id))} is not a job id (they look like 1700000000000-0)`);
  }
}

const unknown = (what, id, queue) =>
  `${what} job ${id}: job unknown on queue ${queue} (done and not kept: see retention; or never enqueued here)`;

// settled is the wait script's reply for a settled job, as wait's.
function settled(id, v) {
  if (v[0].toString() === "done") return v[1].length > 0 ? Buffer.from(v[1]) : null;
  throw new JobDead(id, v[1].toString(), v[2].toString());
}

// outcome is a settle script's notify message ("done\n" result, or
// "dead\n" reason "\n" error) as wait's.
function outcome(id, m) {
  const nl = m.indexOf(10);
  const kind = nl < 0 ? "" : m.subarray(0, nl).toString();
  const rest = m.subarray(nl + 1);
  if (kind === "done") return rest.length > 0 ? Buffer.from(rest) : null;
  if (kind === "dead") {
    const i = rest.indexOf(10);
    const reason = (i < 0 ? rest : rest.subarray(0, i)).toString();
    throw new JobDead(id, reason, i < 0 ? "" : rest.subarray(i + 1).toString());
  }
  throw new Error(`wait for job ${id}: outcome ${JSON.stringify(m.toString())}`);
}

function checkQueue(queue) {
  if (typeof queue !== "string" || queue === "") throw new BadOption(`queue: want a queue name, not ${describe(queue)}`);
}

module.exports = { Client, BadOption, EnqueueError, NotReplicated, NotDone, UnknownJob, JobDead, TimeoutError, keysFor, goDuration, GROUP };
