#!/bin/sh
# A persistent baton worker in plain sh: job frames arrive on fd 3, results
# leave on fd 4 (docs/workers.md). Each payload is saved byte for byte to
# $WORKDIR/payload and given on stdin to the command in the arguments
# (default: wc -c); its exit status 0 marks the job done.
#   baton run --persistent -- examples/shell/worker.sh /usr/local/bin/handle
[ $# -gt 0 ] || set -- wc -c
if [ -n "${WORKDIR:-}" ]; then
	dir=$WORKDIR
else
	dir=$(mktemp -d) && trap 'rm -rf "$dir"' EXIT
fi

echo '{"type":"ready"}' >&4
while IFS= read -r header <&3; do
	case $header in *'"type":"stop"'*) exit 0 ;; esac
	id=$(printf '%s\n' "$header" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
	seq=$(printf '%s\n' "$header" | sed -n 's/.*"seq":\([0-9]*\).*/\1/p')
	size=$(printf '%s\n' "$header" | sed -n 's/.*"size":\([0-9]*\).*/\1/p')
	head -c "${size:-0}" <&3 > "$dir/payload"
	case $header in *'"type":"job"'*) ;; *) continue ;; esac # cancel, or newer: ignored
	if "$@" < "$dir/payload"; then status=ok; else status=error; fi
	printf '{"type":"result","id":"%s","seq":%s,"status":"%s"}\n' "$id" "${seq:-0}" "$status" >&4
done
