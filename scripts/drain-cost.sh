#!/bin/bash
# drain-cost.sh: what a whole holder process costs per job, for two builds
# of batonbench (baton's command line with a no-op Go handler) side by side.
#
#   scripts/drain-cost.sh OLD_BATONBENCH NEW_BATONBENCH [RUNS] [JOBS]
#
# Build them with `cd bench && go build -o /tmp/bb-new ./cmd/batonbench` in
# each checkout. For each run and concurrency (1, 10) it fills a fresh
# queue with JOBS (300000) no-op jobs, starts `batonbench run` from each
# build in turn (alternating, so load drifts hit both), and prints the
# jobs per second from start to an empty stream. Then, once per build, the
# Redis commands the holder made (INFO commandstats, inner script calls
# included, less this script's own polls) over the drain and six idle
# seconds, which machine load does not blur. It starts its own
# redis-server on a free port and stops it.
set -euo pipefail
old=$1 new=$2 runs=${3:-5} jobs=${4:-300000}
dir=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$dir" >"$dir/redis.log" 2>&1 &
rpid=$!
trap 'kill $rpid 2>/dev/null; wait $rpid 2>/dev/null; rm -rf "$dir"' EXIT
cli() { redis-cli -p "$port" "$@"; }
until cli ping >/dev/null 2>&1; do sleep 0.1; done
python3 - "$jobs" >"$dir/fill.resp" <<'EOF'
import sys
key = b"baton:{drain}"
cmd = b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$7\r\npayload\r\n$1\r\nx\r\n" % (len(key), key)
sys.stdout.buffer.write(cmd * int(sys.argv[1]))
EOF
calls() {
	cli info commandstats | tr -d '\r' | grep -v 'cmdstat_xlen\|cmdstat_info\|cmdstat_flushall\|cmdstat_config\|cmdstat_ping' |
		sed -n 's/.*:calls=\([0-9]*\),.*/\1/p' | paste -sd+ | bc
}
# drain BIN CONC IDLE: fill, run the holder until the stream is empty (and
# IDLE more seconds), stop it; prints jobs/s.
drain() {
	cli flushall >/dev/null
	cli --pipe <"$dir/fill.resp" >/dev/null
	cli config resetstat >/dev/null
	local locks start end hp
	locks=$(mktemp -d "$dir/locks.XXXX")
	start=$(date +%s%N)
	BATON_REDIS_URL=redis://127.0.0.1:$port/0 "$1" run --queue drain --lock-dir "$locks" --slots 1 --standby-slots 0 \
		--lifetime 10m --concurrency "$2" --log-level warn &
	hp=$!
	while [ "$(cli xlen 'baton:{drain}')" != "0" ]; do sleep 0.01; done
	end=$(date +%s%N)
	sleep "$3"
	kill -TERM "$hp"
	wait "$hp" || true
	echo $((jobs * 1000000000 / (end - start)))
}
for run in $(seq "$runs"); do
	for conc in 1 10; do
		if [ $((run % 2)) = 1 ]; then # who goes first alternates too
			echo "run $run c$conc old $(drain "$old" "$conc" 0) jobs/s" | tee -a "$dir/runs"
			echo "run $run c$conc new $(drain "$new" "$conc" 0) jobs/s" | tee -a "$dir/runs"
		else
			echo "run $run c$conc new $(drain "$new" "$conc" 0) jobs/s" | tee -a "$dir/runs"
			echo "run $run c$conc old $(drain "$old" "$conc" 0) jobs/s" | tee -a "$dir/runs"
		fi
	done
done
for conc in 1 10; do
	for b in old new; do
		grep "c$conc $b " "$dir/runs" | awk '{print $5}' | sort -n |
			awk -v what="c$conc $b" '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "median %s %d jobs/s (min %d, max %d, n %d)\n", what, m, v[1], v[NR], NR}'
	done
done
for conc in 1 10; do
	for b in old new; do
		bin=$old
		[ "$b" = new ] && bin=$new
		drain "$bin" "$conc" 6 >/dev/null
		c=$(calls)
		echo "commands c$conc $b $c for $jobs jobs ($(echo "scale=4; $c / $jobs" | bc) per job)"
	done
done
