#!/usr/bin/env bash
# Captures real ClientHellos into proxy/testdata/ (see proxy/testdata/README.md for each one).
#
# Every client is pointed at `capture_hello listen`, which saves exactly the ClientHello records
# and closes the connection. Needs: openssl, etcd (Debian etcd-server 3.4), chromium. A sample
# whose client is missing is skipped with a message, the others are still written.
#
# Usage: scripts/capture-client-hellos.sh [OUT_DIR]   (default: proxy/testdata)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/proxy/testdata}
work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    # Let etcd and chromium exit before their directories are removed.
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

cargo build -q --manifest-path "$root/Cargo.toml" -p isthmus-proxy --example capture_hello
capture="$root/target/debug/examples/capture_hello"

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts the listener for one sample in the background; `wait_capture` waits for its file.
listen() { # port file
    "$capture" listen "127.0.0.1:$1" "$out/$2" &
    pids+=($!)
    sleep 0.3
}
wait_capture() { # file seconds
    for _ in $(seq "$(($2 * 10))"); do
        [[ -s $out/$1 ]] && return 0
        sleep 0.1
    done
    echo "no ClientHello captured for $1" >&2
    return 1
}

"$capture" rustls rustls.example.test "$out/rustls-0.23-sni.bin"
"$capture" rustls 127.0.0.1 "$out/rustls-0.23-ip-nosni.bin"

if command -v openssl >/dev/null; then
    port=$(free_port)
    listen "$port" openssl-3.0-sni.bin
    openssl s_client -connect "127.0.0.1:$port" -servername openssl.example.test \
        </dev/null >/dev/null 2>&1 || true
    wait_capture openssl-3.0-sni.bin 5
else
    echo "openssl not found: skipping openssl sample" >&2
fi

if command -v etcd >/dev/null; then
    # etcd member "a" dials its peers' URLs with Go's crypto/tls as soon as it starts; the
    # peers are our listeners, one named (SNI "localhost") and one by IP (no SNI).
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=etcd-capture \
        -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
        -keyout "$work/peer.key" -out "$work/peer.crt" 2>/dev/null
    own=$(free_port) named=$(free_port) ip=$(free_port)
    listen "$named" etcd-3.4-go-sni-localhost.bin
    listen "$ip" etcd-3.4-go-ip-nosni.bin
    etcd --name a --data-dir "$work/etcd" \
        --listen-peer-urls "https://127.0.0.1:$own" --initial-advertise-peer-urls "https://127.0.0.1:$own" \
        --listen-client-urls "http://127.0.0.1:$(free_port)" --advertise-client-urls http://127.0.0.1:1 \
        --initial-cluster "a=https://127.0.0.1:$own,b=https://localhost:$named,c=https://127.0.0.1:$ip" \
        --peer-cert-file "$work/peer.crt" --peer-key-file "$work/peer.key" \
        --peer-trusted-ca-file "$work/peer.crt" --peer-client-cert-auth \
        >"$work/etcd.log" 2>&1 &
    pids+=($!)
    wait_capture etcd-3.4-go-sni-localhost.bin 20
    wait_capture etcd-3.4-go-ip-nosni.bin 20
else
    echo "etcd not found: skipping Go samples" >&2
fi

if command -v chromium >/dev/null; then
    port=$(free_port)
    listen "$port" chromium-156-pq-sni.bin
    timeout 30 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$work/chromium" --host-resolver-rules="MAP pq.example.test 127.0.0.1" \
        "https://pq.example.test:$port/" >"$work/chromium.log" 2>&1 &
    pids+=($!)
    wait_capture chromium-156-pq-sni.bin 30
else
    echo "chromium not found: skipping post-quantum sample" >&2
fi

ls -l "$out"/*.bin
