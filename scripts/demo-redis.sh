# Sourced by the demo scripts: a work dir, a throwaway redis-server on a free
# loopback port (BATON_REDIS_URL points at it), and a cleanup on exit that
# stops every holder still running (their pids are in the slot records; a
# persistent holder's children stop with it), then Redis, and removes the
# work dir. Sets work, port and redis_pid.
bash scripts/install-redis.sh
work=$(mktemp -d "/tmp/baton-${DEMO_NAME:-demo}.XXXXXX")
redis_pid=""

cleanup() {
	if [ -d "$work/locks" ]; then
		pids=""
		for f in "$work"/locks/*.json; do
			[ -e "$f" ] || continue
			# The holder's own pid is the record's first "pid"; a persistent
			# holder's children follow it.
			pid=$(grep -o '"pid":[0-9]*' "$f" | head -n 1 | cut -d: -f2)
			[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && pids="$pids $pid" || true
		done
		# Wait for them to leave (they rewrite their slot records on the
		# way out, so removing the work dir before would race them).
		for _ in $(seq 100); do
			alive=""
			for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
			[ -z "$alive" ] && break
			sleep 0.1
		done
	fi
	[ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

# A free loopback port: nothing answers a connect there.
for _ in $(seq 50); do
	port=$((20000 + RANDOM % 20000))
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$work" --logfile "$work/redis.log" --daemonize no &
redis_pid=$!
for _ in $(seq 100); do
	redis-cli -p "$port" ping >/dev/null 2>&1 && break
	sleep 0.05
done
export BATON_REDIS_URL="redis://127.0.0.1:$port/0"
echo "redis-server on 127.0.0.1:$port (pid $redis_pid), work dir $work"
