#!/usr/bin/env bash
# Install Debian's chromium for the dashboard's browser test (make
# test-browser, make screenshots), only when missing.
set -euo pipefail
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 && exit 0
echo "installing Debian's chromium for the browser test" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq chromium >/dev/null
