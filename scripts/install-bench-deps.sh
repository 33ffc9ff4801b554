#!/usr/bin/env bash
# Install what the bench's workers group compares baton with, each only when
# missing: Debian's python3-rq and python3-celery (for /usr/bin/python3),
# nodejs, and BullMQ (with ioredis, its optional client) from npm into ${XDG_CACHE_HOME:-~/.cache}/baton-bench
# (never into the tree). BullMQ is optional: when npm cannot install it, the
# bench says so and leaves bullmq_c1 out.
set -euo pipefail
bash "$(dirname "$0")/install-redis.sh"
missing=()
/usr/bin/python3 -c 'import rq' >/dev/null 2>&1 || missing+=(python3-rq)
/usr/bin/python3 -c 'import celery' >/dev/null 2>&1 || missing+=(python3-celery)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing Debian's ${missing[*]} for the bench" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cache="${XDG_CACHE_HOME:-$HOME/.cache}/baton-bench"
if [ ! -f "$cache/node_modules/bullmq/package.json" ] || [ ! -f "$cache/node_modules/ioredis/package.json" ]; then
	echo "installing bullmq from npm into $cache" >&2
	mkdir -p "$cache"
	timeout 300 npm install --prefix "$cache" --no-audit --no-fund --silent bullmq ioredis >&2 ||
		echo "bullmq did not install: the bench will leave it out" >&2
fi
