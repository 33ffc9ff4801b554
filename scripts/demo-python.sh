#!/usr/bin/env bash
# make demo-python: a throwaway redis-server on a free loopback port, 1,500
# jobs, and a cron stand-in that fires `baton run --persistent` (2
# candidates at once) every second, each holder feeding a long-lived Python
# worker per lane (examples/python/baton_worker.py). Watch the holders drain
# the queue, retire, and their children (pid, jobs served, RSS) in the slot
# table. Redis and every baton process are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null || bash scripts/install-test-deps.sh
BATON="$PWD/bin/baton"
DEMO_NAME=demo-python
. scripts/demo-redis.sh

cat >"$work/demo.toml" <<TOML
queue              = "pydemo"
lock_dir           = "$work/locks"
slots              = 2       # k: two holders at all times
standby_slots      = 2
concurrency        = 2       # two Python children per holder
persistent         = true    # started once per lane, fed jobs over fds 3/4
max_jobs_per_child = 150     # recycled after about 150 jobs (±10%)
lifetime           = "5s"    # short, so the demo shows holders retiring
jitter             = "2s"
standby_wait       = "20s"
poll_interval      = "100ms"
job_timeout        = "10s"
shutdown_grace     = "5s"
log_format         = "json"
TOML

# The handler: your code, unchanged between jobs. Imports, connections and
# caches stay warm; a job costs a few milliseconds of "work" here.
cat >"$work/worker.py" <<'PY'
import os, sys, time
sys.path.insert(0, os.environ["BATON_EXAMPLES"])
import baton_worker

started = time.time()

def handle(payload: bytes, job):
    time.sleep(0.002 + (hash(payload) % 5) / 1000)   # 2-6 ms of work
    if job.attempt == 1 and payload.endswith(b"7.jpg") and hash(payload) % 3 == 0:
        raise RuntimeError("transient failure")       # retried with backoff
    print("resized %s in pid %d (warm for %.1fs)" % (payload.decode(), os.getpid(), time.time() - started))

baton_worker.serve(handle)
PY
export BATON_EXAMPLES="$PWD/examples/python"

seq -f "img-%05g.jpg" 1 1500 | "$BATON" enqueue --config "$work/demo.toml" --quiet
echo "enqueued 1500 jobs; firing 2 candidates every second, as '* * * * *' with spawn = 2 would every minute"
echo

fire() {
	for _ in 1 2; do
		"$BATON" run --config "$work/demo.toml" -- python3 "$work/worker.py" 2>>"$work/baton.log" &
	done
}
start=$(date +%s)
for tick in $(seq 90); do
	fire
	sleep 1
	json=$("$BATON" status --config "$work/demo.toml" --json)
	waiting=$(printf '%s' "$json" | sed -n 's/.*"waiting": \([0-9]*\).*/\1/p')
	pending=$(printf '%s' "$json" | sed -n 's/.*"pending": \([0-9]*\).*/\1/p')
	retrying=$(printf '%s' "$json" | sed -n 's/.*"retrying": \([0-9]*\).*/\1/p')
	echo "--- t=$(( $(date +%s) - start ))s"
	"$BATON" status --config "$work/demo.toml" | tail -n +2
	if [ "${waiting:-1}" = 0 ] && [ "${pending:-1}" = 0 ] && [ "${retrying:-0}" = 0 ]; then
		break
	fi
done
echo
echo "queue drained in $(( $(date +%s) - start ))s: $(grep -c 'resized img' "$work/baton.log" || true) jobs done by" \
	"$(grep -o 'in pid [0-9]*' "$work/baton.log" | sort -u | wc -l) Python processes," \
	"$(grep -c '"holding run slot"' "$work/baton.log" || true) holders in turn," \
	"$(grep -c '"replacing persistent child"' "$work/baton.log" || true) children recycled after max_jobs_per_child"
echo "a holder's log line for one job's output looks like this:"
grep -m 1 'resized img' "$work/baton.log" || true
