#!/usr/bin/env bash
# Install Debian's redis-server when it is missing (tests and the demo need it).
set -euo pipefail
command -v redis-server >/dev/null 2>&1 && exit 0
echo "redis-server missing: installing Debian's package" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq redis-server >/dev/null
# The package starts a system instance; baton's tests and demo start their own.
command -v redis-server >/dev/null
