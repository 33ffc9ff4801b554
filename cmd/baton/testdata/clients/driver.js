// Drives baton-client for cmd/baton/clients_test.go, as driver.py does.
"use strict";
const { Client, BadOption, EnqueueError, NotDone, JobDead, keysFor } = require(process.env.BATON_NODE_CLIENT);

function options(o) {
  const out = {};
  for (const [k, v] of Object.entries(o || {})) {
    switch (k) {
      case "delay_ms": out.delay = v; break;
      case "at_ms": out.at = new Date(v); break;
      case "unique_key": out.uniqueKey = v; break;
      case "unique_for_ms": out.uniqueFor = v; break;
      case "timeout_ms": out.timeout = v; break;
      case "max_attempts": out.maxAttempts = v; break;
      default: out[k] = v;
    }
  }
  return out;
}

function location(l) {
  const out = { id: l.id, state: l.state };
  for (const k of ["entry", "priority", "consumer", "ahead", "deliveries", "attempts", "key"]) if (l[k]) out[k] = l[k];
  if (l.keyRunning) out.key_running = l.keyRunning;
  if (l.keyWaiting) out.key_waiting = l.keyWaiting;
  if (l.due) out.due = l.due.getTime();
  if (l.doneAt) out.done_at = l.doneAt.getTime();
  if (l.deadLetter) {
    const d = l.deadLetter;
    out.dead_letter = { id: d.id, job_id: d.jobId, reason: d.reason, attempts: d.attempts, error: d.error,
      entry: d.entry, failed_at: d.failedAt.getTime(), payload: d.payload === null ? null : d.payload.toString() };
    if (Object.keys(d.fields).length > 0) out.dead_letter.fields = d.fields;
  }
  return out;
}

// outcome is a result (a Buffer or null) as JSON: base64, or null.
const outcome = (b) => ({ result: b === null ? null : b.toString("base64") });

async function run(c, q, op) {
  try {
    switch (op.op) {
      case "enqueue": return await c.enqueue(q, op.payload, options(op.opts));
      case "many": return { ids: await c.enqueueMany(q, op.payloads, options(op.opts)) };
      case "items": return { ids: await c.enqueueMany(q, op.items.map((i) => ({ payload: i.payload, ...options(i.opts) }))) };
      case "job": return location(await c.job(q, op.id));
      case "result": return outcome(await c.result(q, op.id));
      case "wait": return outcome(await c.wait(q, op.id, op.timeout_ms));
      case "keys": {
        const k = keysFor(q);
        return { stream: k.stream, high: k.high, low: k.low, retry: k.retry, retry_jobs: k.retryJobs,
          scheduled: k.scheduled, scheduled_jobs: k.scheduledJobs, dead: k.dead, dead_index: k.deadIndex,
          done: k.done, unique: "baton:{" + q + "}:unique:" + op.key, key_jobs: k.keyJobs };
      }
    }
    throw new Error("unknown op " + op.op);
  } catch (e) {
    if (e instanceof JobDead) return { error: e.message, class: e.name, reason: e.reason, cancelled: e.cancelled };
    if (e instanceof NotDone) return { error: e.message, class: e.name, state: e.state };
    if (e instanceof BadOption) return { error: e.message, bad: true };
    if (e instanceof EnqueueError) return { error: e.message, class: e.name, ids: e.ids.map((i) => i && i.id) };
    return { error: e.message, class: e.name };
  }
}

(async () => {
  let input = "";
  for await (const chunk of process.stdin) input += chunk;
  const req = JSON.parse(input);
  const c = new Client(req.redis, req.wait_replicas ? { waitReplicas: req.wait_replicas, waitTimeout: req.wait_timeout_ms } : {});
  for (const op of req.ops) console.log(JSON.stringify(await run(c, req.queue, op)));
  await c.close();
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
