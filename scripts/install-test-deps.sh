#!/usr/bin/env bash
# Install what `make test` needs on a fresh Debian machine, each only when
# missing: redis-server (every test talks to a real one), redis-sentinel (the
# failover test runs three Sentinels), python3 and nodejs (the
# persistent-worker helpers' tests run real Python and Node children),
# python3-redis, python3-pip and python3-setuptools (the Python client's
# tests install clients/python with pip, offline, and run it on Debian's
# redis-py), and ioredis, the Node client's one dependency, from npm into
# ${XDG_CACHE_HOME:-~/.cache}/baton-clients (never into the tree; nothing is
# fetched when it is there), with npm (the tests pack clients/node).
set -euo pipefail
bash "$(dirname "$0")/install-redis.sh"
missing=()
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
/usr/bin/python3 -c 'import redis' >/dev/null 2>&1 || missing+=(python3-redis)
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
/usr/bin/python3 -c 'import setuptools' >/dev/null 2>&1 || missing+=(python3-setuptools)
command -v npm >/dev/null 2>&1 || missing+=(npm)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/baton-clients"
needIORedis=false
[ -f "$cache/node_modules/ioredis/package.json" ] || needIORedis=true
if [ ${#missing[@]} -gt 0 ]; then
	echo "installing Debian's ${missing[*]} for the tests" >&2
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	export DEBIAN_FRONTEND=noninteractive
	$sudo apt-get update -qq
	$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if $needIORedis; then
	echo "installing ioredis from npm into $cache for the Node client's tests" >&2
	mkdir -p "$cache"
	timeout 300 npm install --prefix "$cache" --no-audit --no-fund --silent 'ioredis@^5' >&2
fi
