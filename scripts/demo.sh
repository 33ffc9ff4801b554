#!/usr/bin/env bash
# make demo: a throwaway redis-server on a free loopback port, 600 jobs, and a
# cron stand-in that fires `baton run` (3 candidates at once) every second.
# Watch holders drain the queue, retire, and standbys take over. Redis and
# every baton process are stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BATON="$PWD/bin/baton"
DEMO_NAME=demo
. scripts/demo-redis.sh

cat >"$work/demo.toml" <<TOML
queue         = "demo"
lock_dir      = "$work/locks"
slots         = 3       # k: three workers at all times
standby_slots = 3
lifetime      = "4s"    # short, so the demo shows holders retiring
jitter        = "2s"
standby_wait  = "20s"   # S > L_max (6s) > C (1s here)
poll_interval = "100ms"
job_timeout   = "10s"
shutdown_grace = "5s"
log_format    = "json"
TOML

cat >"$work/job.sh" <<'JOB'
#!/bin/sh
# A job: the payload arrives on stdin; pretend to work for 20-100 ms.
read -r name
sleep "0.0$(( $$ % 9 + 2 ))"
echo "made thumbnail for $name"
JOB
chmod +x "$work/job.sh"

seq -f "img-%04g.jpg" 1 600 | "$BATON" enqueue --config "$work/demo.toml" --quiet
echo "enqueued 600 jobs; firing 3 candidates every second, as '* * * * *' with spawn = 3 would every minute"
echo

fire() {
	for _ in 1 2 3; do
		"$BATON" run --config "$work/demo.toml" -- "$work/job.sh" 2>>"$work/baton.log" &
	done
}
start=$(date +%s)
for tick in $(seq 60); do
	fire
	sleep 1
	waiting=$("$BATON" status --config "$work/demo.toml" --json | sed -n 's/.*"waiting": \([0-9]*\).*/\1/p')
	pending=$("$BATON" status --config "$work/demo.toml" --json | sed -n 's/.*"pending": \([0-9]*\).*/\1/p')
	echo "--- t=$(( $(date +%s) - start ))s"
	"$BATON" status --config "$work/demo.toml" | tail -n +2
	if [ "${waiting:-1}" = 0 ] && [ "${pending:-1}" = 0 ]; then
		break
	fi
done
echo
echo "queue drained in $(( $(date +%s) - start ))s: $(grep -c 'made thumbnail' "$work/baton.log" || true) job outputs logged," \
	"$(grep -c '"holding run slot"' "$work/baton.log" || true) holders in turn," \
	"$(grep -c '"promoted"' "$work/baton.log" || true) of them promoted standbys"
echo "a holder's log lines look like this:"
grep -m 1 'made thumbnail' "$work/baton.log" || true
