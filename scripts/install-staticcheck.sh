#!/usr/bin/env bash
# Install staticcheck, at the pinned version, through the Go module proxy when
# it is missing (or another version), and print its path: make lint runs it.
# v0.8.x (staticcheck 2026.2) is the line built for Go 1.26: raise the pin
# with go.mod's go line.
set -euo pipefail
version=0.8.2
bin="$(go env GOBIN)"
[ -n "$bin" ] || bin="$(go env GOPATH)/bin"
sc="$bin/staticcheck"
if ! "$sc" -version 2>/dev/null | grep -qF "($version)"; then
	echo "installing staticcheck v$version into $bin" >&2
	GOBIN="$bin" GOFLAGS=-mod=mod go install "honnef.co/go/tools/cmd/staticcheck@v$version"
fi
echo "$sc"
