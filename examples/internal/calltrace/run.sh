#!/bin/sh
# run.sh unary|stream: the root package's functions and files one warm call enters.
set -e
cd "$(dirname "$0")/../../.."
tmp=$(mktemp -d)
# the command itself is covered too (without it the coverage runtime knows no
# mode and ClearCounters refuses), then left out of the list
go build -cover -covermode=atomic \
	-coverpkg=github.com/geminiguard/geminiguard,github.com/geminiguard/geminiguard/examples/internal/calltrace \
	-o "$tmp/calltrace" ./examples/internal/calltrace
flag=""; [ "$1" = stream ] && flag=-stream
mkdir "$tmp/out" "$tmp/all"
GOCOVERDIR="$tmp/all" "$tmp/calltrace" -out "$tmp/out" $flag
go tool covdata func -i="$tmp/out" | awk '$1 != "total" && $NF != "0.0%" && $1 !~ /calltrace/' > "$tmp/funcs"
cat "$tmp/funcs"
echo "functions: $(wc -l < "$tmp/funcs"), files: $(cut -d: -f1 "$tmp/funcs" | sort -u | wc -l)"
rm -rf "$tmp"
