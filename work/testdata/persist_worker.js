'use strict';
// A persistent worker for work's tests, like persist_worker.py: every job
// appends "id pid attempt sha256" to $PERSIST_LOG; the payload says what to do.
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');
const { serve, SkipRetry } = require(path.join(__dirname, '..', '..', 'examples', 'node', 'baton-worker.js'));

serve(async (payload, job) => {
  const sum = crypto.createHash('sha256').update(payload).digest('hex');
  fs.appendFileSync(process.env.PERSIST_LOG, `${job.id} ${process.pid} ${job.attempt} ${sum}\n`);
  const [cmd, arg] = payload.toString('latin1').split(':');
  switch (cmd) {
    case 'print':
      console.log(`{"type":"result","id":"${job.id}","status":"error"}`);
      process.stdout.write('no newline at the end');
      console.error('to stderr\n\x00\x01');
      break;
    case 'beat':
      for (let end = Date.now() + Number(arg) * 1000; Date.now() < end;) {
        job.heartbeat();
        await new Promise((r) => setTimeout(r, 50));
      }
      break;
    case 'hang':
      await new Promise(() => {});
      break;
    case 'leak': // a heartbeat timer the job forgets to stop: it outlives the job
      setInterval(job.heartbeat, 50);
      break;
    case 'leak-fail':
      if (job.attempt > 1) await new Promise(() => {});
      setInterval(job.heartbeat, 50);
      throw new Error('failed, its heartbeats running on');
    case 'fail':
      throw new Error('asked to fail');
    case 'skip':
      throw new SkipRetry('asked to skip');
    case 'die':
      process.exit(3);
    case 'result':
      return Buffer.from(arg, 'latin1');
    case 'text':
      return Buffer.from(arg, 'latin1').toString('utf8');
    case 'big':
      return Buffer.alloc(Number(arg), 'r');
    case 'progress':
      job.progress(42, 'resizing');
      await new Promise((r) => setTimeout(r, Number(arg) * 1000));
      break;
    case 'flood':
      for (let i = 0; i < Number(arg); i++) job.progress(i % 101, 'flood');
      job.progress(100, 'flooded');
      await new Promise((r) => setTimeout(r, 1000));
      break;
    case 'cancellable': // stopped by a cancel: the timer takes job.signal
      await require('timers/promises').setTimeout(3600 * 1000, undefined, { signal: job.signal });
      break;
    case 'stubborn': // ignores a cancel
      await new Promise(() => {});
      break;
  }
});
