'use strict';
// baton-worker: serve jobs to `baton run --persistent` (no dependencies).
//
//   const { serve, SkipRetry } = require('./baton-worker');
//   serve(async (payload, job) => {
//     // return (or resolve): done; throw: retried; throw new SkipRetry(): dead-lettered
//   });
//
// baton starts this process once per lane and feeds it jobs one at a time
// over fds 3 (baton -> worker) and 4 (worker -> baton); see docs/workers.md.
// console.log and console.error go to baton's log and cannot disturb the
// protocol.

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

// fd 4 stays blocking (libuv never opens it): each frame is one write.
function send(msg) {
  fs.writeSync(4, JSON.stringify(msg) + '\n');
}

/**
 * Run handler(payload: Buffer, job) for every job baton sends, until baton
 * says stop (exit 0) or goes away. job has id (for life), attempt (1 on the
 * first run), queue, traceparent and tracestate (the W3C trace context of
 * this run, '' when the job carries none: docs/tracing.md), and heartbeat()
 * for long work under heartbeat_timeout.
 */
function serve(handler) {
  if (process.env.BATON_PROTOCOL === undefined) {
    console.error('baton-worker: run me under `baton run --persistent -- ...` (no BATON_PROTOCOL)');
    process.exit(2);
  }
  const input = new net.Socket({ fd: 3, readable: true, writable: false });
  let buf = Buffer.alloc(0);
  let busy = false;

  async function pump() {
    if (busy) return;
    busy = true;
    try {
      for (;;) {
        const nl = buf.indexOf(10);
        if (nl < 0) return;
        const header = JSON.parse(buf.subarray(0, nl).toString('utf8'));
        const size = header.size || 0;
        if (buf.length < nl + 1 + size) return; // the rest of the body is on its way
        const body = Buffer.from(buf.subarray(nl + 1, nl + 1 + size));
        buf = buf.subarray(nl + 1 + size);
        if (header.type === 'stop') process.exit(0);
        if (header.type !== 'job') continue; // a newer baton's message: ignore it
        // seq names this delivery: baton ignores what names another one
        // (a heartbeat timer left running by a finished job, say).
        const frame = (type, fields) => ({ type, id: header.id, ...(header.seq !== undefined && { seq: header.seq }), ...fields });
        const job = {
          id: header.id,
          attempt: header.attempt || 1,
          queue: header.queue || '',
          traceparent: header.traceparent || '',
          tracestate: header.tracestate || '',
          heartbeat: () => send(frame('heartbeat')),
        };
        const result = frame('result', { status: 'ok' });
        try {
          await handler(body, job);
        } catch (e) {
          if (e instanceof SkipRetry) {
            result.status = 'skip';
            result.error = e.message;
          } else {
            console.error(e && e.stack ? e.stack : e);
            result.status = 'error';
            result.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
          }
        }
        send(result);
      }
    } finally {
      busy = false;
    }
  }

  input.on('data', (chunk) => {
    buf = buf.length ? Buffer.concat([buf, chunk]) : chunk;
    pump();
  });
  input.on('end', () => process.exit(0)); // baton went away
  send({ type: 'ready', protocol: PROTOCOL });
}

module.exports = { serve, SkipRetry, PROTOCOL };
