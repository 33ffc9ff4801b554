#!/usr/bin/env node
'use strict';
// A runnable example: uppercases each payload and logs it.
//   baton run --persistent -- node examples/node/example-worker.js
const { serve, SkipRetry } = require('./baton-worker');

serve(async (payload, job) => {
  const text = payload.toString('utf8');
  if (text === 'reject') throw new SkipRetry('payload says reject');
  if (text === 'fail') throw new Error('payload says fail'); // retried with backoff
  console.log(`job ${job.id} attempt ${job.attempt}: ${text.toUpperCase()}`);
});
