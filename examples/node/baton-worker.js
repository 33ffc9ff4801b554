'use strict';
// baton-worker: serve jobs to `baton run --persistent` (no dependencies).
//
//   const { serve, SkipRetry } = require('./baton-worker');
//   serve(async (payload, job) => {
//     job.progress(42, 'resizing'); // optional: how far it is (0-100)
//     // return a Buffer or string: done, with that result; nothing: done, no result
//     // throw: retried; throw new SkipRetry(): dead-lettered
//   });
//
// baton starts this process once per lane and feeds it jobs one at a time
// over fds 3 (baton -> worker) and 4 (worker -> baton); see docs/workers.md.
// console.log and console.error go to baton's log and cannot disturb the
// protocol.
//
// When a running job is cancelled (baton cancel), baton sends a cancel
// frame: job.signal (an AbortSignal) is aborted with a Cancelled error;
// pass it to what the handler awaits (fetch, timers/promises, streams).
// A handler that does not settle within shutdown_grace is killed with its
// process.

const fs = require('fs');
const net = require('net');

const PROTOCOL = 1;

/** Throw it to fail a job for good: it is dead-lettered at once as rejected. */
class SkipRetry extends Error {
  constructor(message) {
    super(message || 'SkipRetry');
    this.name = 'SkipRetry';
  }
}

/** The reason of job.signal when the job was cancelled (baton cancel). */
class Cancelled extends Error {
  constructor(message) {
    super(message || 'job cancelled');
    this.name = 'Cancelled';
  }
}

// fd 4 stays blocking (libuv never opens it): each frame is one write.
function send(msg, body) {
  if (body && body.length) {
    fs.writeSync(4, Buffer.concat([Buffer.from(JSON.stringify({ ...msg, size: body.length }) + '\n'), body]));
    return;
  }
  fs.writeSync(4, JSON.stringify(msg) + '\n');
}

function resultBytes(value) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return Buffer.from(value, 'utf8');
  if (value instanceof Uint8Array) return Buffer.from(value.buffer, value.byteOffset, value.byteLength);
  throw new TypeError(`the handler returned ${typeof value}: return a Buffer, a string or nothing`);
}

/**
 * Run handler(payload: Buffer, job) for every job baton sends, until baton
 * says stop (exit 0) or goes away. job has id (for life), attempt (1 on the
 * first run), queue, key (its key, '' for none: docs/keys.md), traceparent
 * and tracestate (the W3C trace context of this run, '' when the job
 * carries none: docs/tracing.md), signal (aborted
 * when the job is cancelled), heartbeat() for long work under
 * heartbeat_timeout, and progress(pct, msg). What the handler returns (or
 * resolves to), a Buffer or a string, is the job's result.
 */
function serve(handler) {
  if (process.env.BATON_PROTOCOL === undefined) {
    console.error('baton-worker: run me under `baton run --persistent -- ...` (no BATON_PROTOCOL)');
    process.exit(2);
  }
  const input = new net.Socket({ fd: 3, readable: true, writable: false });
  let buf = Buffer.alloc(0);
  const queue = []; // job and stop frames, in order
  let current = null; // the running job's header and abort controller
  let busy = false;

  async function pump() {
    if (busy) return;
    busy = true;
    try {
      while (queue.length) {
        const { header, body } = queue.shift();
        if (header.type === 'stop') process.exit(0);
        // seq names this delivery: baton ignores what names another one
        // (a heartbeat timer left running by a finished job, say).
        const frame = (type, fields) => ({ type, id: header.id, ...(header.seq !== undefined && { seq: header.seq }), ...fields });
        const controller = new AbortController();
        const job = {
          id: header.id,
          attempt: header.attempt || 1,
          queue: header.queue || '',
          key: header.key || '',
          traceparent: header.traceparent || '',
          tracestate: header.tracestate || '',
          signal: controller.signal,
          heartbeat: () => send(frame('heartbeat')),
          progress: (pct, msg) => {
            if (!Number.isInteger(pct) || pct < 0 || pct > 100) {
              throw new RangeError(`progress must be an integer from 0 to 100, not ${pct}`);
            }
            send(frame('progress', { pct, msg: msg === undefined ? '' : String(msg) }));
          },
        };
        const result = frame('result', { status: 'ok' });
        let value = null;
        current = { header, controller };
        try {
          value = resultBytes(await handler(body, job));
        } catch (e) {
          if (e instanceof SkipRetry) {
            result.status = 'skip';
            result.error = e.message;
          } else if (controller.signal.aborted) {
            result.status = 'error';
            result.error = `cancelled: ${e instanceof Error ? e.message : String(e)}`;
          } else {
            console.error(e && e.stack ? e.stack : e);
            result.status = 'error';
            result.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
          }
        } finally {
          current = null;
        }
        send(result, result.status === 'ok' ? value : null);
      }
    } finally {
      busy = false;
    }
  }

  // Frames are parsed as they come, so that a cancel reaches a running job.
  function parse() {
    for (;;) {
      const nl = buf.indexOf(10);
      if (nl < 0) return;
      const header = JSON.parse(buf.subarray(0, nl).toString('utf8'));
      const size = header.size || 0;
      if (buf.length < nl + 1 + size) return; // the rest of the body is on its way
      const body = Buffer.from(buf.subarray(nl + 1, nl + 1 + size));
      buf = buf.subarray(nl + 1 + size);
      if (header.type === 'cancel') {
        const c = current;
        if (c && c.header.id === header.id && (header.seq === undefined || header.seq === c.header.seq)) {
          c.controller.abort(new Cancelled());
        }
      } else if (header.type === 'job' || header.type === 'stop') {
        queue.push({ header, body });
      } // another type: a newer baton's message: ignore it
    }
  }

  input.on('data', (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    parse();
    pump();
  });
  input.on('end', () => process.exit(0)); // baton went away
  send({ type: 'ready', protocol: PROTOCOL });
}

module.exports = { serve, SkipRetry, Cancelled, PROTOCOL };
