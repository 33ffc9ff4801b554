#!/usr/bin/env bash
# Install what `make test` needs on a fresh Debian machine, each only when
# missing: redis-server (every test talks to a real one), redis-sentinel (the
# failover test runs three Sentinels), python3 and nodejs (the
# persistent-worker helpers' tests run real Python and Node children).
set -euo pipefail
bash "$(dirname "$0")/install-redis.sh"
missing=()
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing Debian's ${missing[*]} for the tests" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq "${missing[@]}" >/dev/null
