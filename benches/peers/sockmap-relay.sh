#!/bin/sh
# Stands in for `isthmus proxy --config FILE ...` in the peers bench, running the sockmap relay
# (sockmap-relay.c) on the listener and upstream of FILE instead:
#   ISTHMUS_BIN=$PWD/benches/peers/sockmap-relay.sh cargo bench --bench peers -- \
#       --rounds 5 isthmus nginx haproxy direct latency
# (only the `latency` scenario: the relay never closes a socket). The row named isthmus is the
# relay; its CPU per round trip is ~0 because the redirects are charged to the senders.
set -eu
relay=${TMPDIR:-/tmp}/isthmus-sockmap-relay
src=$(dirname "$0")/sockmap-relay.c
[ "$relay" -nt "$src" ] || cc -O2 -Wall -o "$relay" "$src"
while [ $# -gt 0 ]; do [ "$1" = --config ] && cfg=$2; shift; done
set -- $(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
print(*c["listeners"][0]["address"].rsplit(":", 1), *c["upstreams"][0]["endpoints"][0].rsplit(":", 1))' "$cfg")
exec "$relay" "$@"
