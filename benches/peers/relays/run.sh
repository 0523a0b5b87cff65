#!/bin/sh
# Stands in for `isthmus proxy --config FILE --threads N ...` in the peers bench, running one of
# the measurement relays of this directory on the listener and upstream of FILE instead:
#   RELAY=sockmap|epoll ISTHMUS_BIN=$PWD/benches/peers/relays/run.sh \
#       cargo bench --bench peers -- --rounds 5 isthmus nginx haproxy direct latency
# With the sockmap relay only the `latency` scenario means anything (it never closes a
# socket); the epoll relay also serves `connrate`, the least a proxy in user space does per new
# connection (docs/benchmarks-history.md, issue 28, round 12). The row named isthmus is the
# relay; the sockmap relay's CPU per round trip reads ~0 because its redirects are charged to
# the sending threads. Needs a C compiler; sockmap needs root.
set -eu
relay=${RELAY:-sockmap}
bin=${TMPDIR:-/tmp}/isthmus-relay-$relay
src=$(dirname "$0")/$relay.c
[ "$bin" -nt "$src" ] || cc -O2 -Wall -pthread -o "$bin" "$src"
threads=2
while [ $# -gt 0 ]; do
    case $1 in
    --config) cfg=$2 ;;
    --threads) threads=$2 ;;
    esac
    shift
done
set -- $(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
print(*c["listeners"][0]["address"].rsplit(":", 1), *c["upstreams"][0]["endpoints"][0].rsplit(":", 1))' "$cfg")
[ "$relay" = sockmap ] || set -- "$@" "$threads"
exec "$bin" "$@"
