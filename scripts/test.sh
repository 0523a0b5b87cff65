#!/usr/bin/env bash
# The test commands of the README, two tiers (.config/nextest.toml says which test is in which):
#   scripts/test.sh --fast [ARGS]  unit tests, planners, parsers, config, the proxy and the tunnel
#                                  on loopback: no root, no network namespace, no one-time build.
#   scripts/test.sh [ARGS]         every test (what CI runs; as root): installs what the tests
#                                  need, builds the image, every test (real etcd, real TLS,
#                                  network namespaces, kube-apiserver, the lab, the node), the
#                                  doc tests and a short fuzz run.
# ARGS go to `cargo nextest run` (a filter: `-E 'binary_id(isthmus-proxy::routing)'`, or test
# names). Both print each test's time and, at the end, the 10 slowest tests.
set -euo pipefail
cd "$(dirname "$0")/.."
tier=full
if [[ "${1:-}" == --fast ]]; then
  tier=fast
  shift
fi

# cargo-nextest, pinned; from crates.io the first time (~5 min to build on 2 cores). Without
# self-update: nothing here may download a binary.
nextest_version=0.9.151
if [[ "$(cargo nextest --version 2>/dev/null | head -1)" != "cargo-nextest $nextest_version"* ]]; then
  cargo install --locked cargo-nextest --version "$nextest_version" \
    --no-default-features --features default-no-update
fi

# The 10 slowest tests of the run, from nextest's JUnit report.
slowest() {
  local junit="target/nextest/$tier/junit.xml"
  [[ -f "$junit" ]] || return 0
  echo "test.sh: the 10 slowest tests of the $tier tier:"
  grep -o '<testcase [^>]*' "$junit" |
    sed -E 's/.* name="([^"]*)".* classname="([^"]*)".* time="([^"]*)".*/\3 \2 \1/' |
    sort -rn | awk 'NR <= 10 { printf "  %8.1f s  %s %s\n", $1, $2, $3 }'
  # awk reads to the end: `head` would close the pipe early and `sort` die of SIGPIPE, which
  # pipefail turned into the script's exit status (141) once the report outgrew a pipe buffer.
}
# Each failed test's panic (its message, up to the backtrace) and the last lines it printed
# before it, from the JUnit report: printed last, where a log cut in its middle keeps them.
failures() {
  local junit="target/nextest/$tier/junit.xml"
  [[ -f "$junit" ]] && command -v python3 >/dev/null || return 0
  python3 - "$junit" <<'PY'
import sys
import xml.etree.ElementTree as ET

for case in ET.parse(sys.argv[1]).iter("testcase"):
    failure = case.find("failure")
    if failure is None:
        failure = case.find("error")
    if failure is None:
        continue
    print(f"test.sh: FAILED {case.get('classname')} {case.get('name')} ({case.get('time')} s):")
    out = (case.findtext("system-out") or "").splitlines()
    # Up to libtest's own verdict ("test <name> ... FAILED").
    end = next((i for i, l in enumerate(out) if l.startswith("test ") and l.endswith("FAILED")), len(out))
    last = [l for l in out[:end] if l.strip()][-6:]
    if last:
        print("  its last lines:")
        for line in last:
            print("    " + line[:400])
    text = (failure.text or failure.get("message") or "").split("stack backtrace:")[0]
    print("  its panic:")
    for line in text.strip().splitlines()[:20]:
        print("    " + line[:2000])
PY
}
phase() { echo "test.sh: $1 took $(($SECONDS - $2)) s"; }

start=$SECONDS
if [[ "$tier" == fast ]]; then
  if [[ $(id -u) -eq 0 ]]; then
    scripts/install-deps.sh fast
  else
    for tool in protoc make cc curl; do
      command -v "$tool" >/dev/null || {
        echo "test.sh: $tool is missing: sudo scripts/install-deps.sh fast" >&2
        exit 1
      }
    done
  fi
  # Helpers that need root or a one-time build refuse under this (isthmus_testkit::tier).
  export ISTHMUS_TIER=fast
  status=0
  cargo nextest run --workspace --profile fast "$@" || status=$?
  slowest
  ((status == 0)) || failures
  phase "the fast tier" "$start"
  exit "$status"
fi

if [[ $(id -u) -ne 0 ]]; then
  echo "test.sh: the full tier needs root (network namespaces, the node): sudo $0;" \
    "\`$0 --fast\` needs none" >&2
  exit 1
fi
scripts/install-deps.sh test
phase "install-deps" "$start"
# The production image (tests/image.rs checks it; tests/cluster.rs runs it in a real node).
t=$SECONDS
scripts/image.sh
phase "the image" "$t"
# Benchmarks are built (clippy --all-targets) but run only by `cargo bench`.
t=$SECONDS
status=0
# The node test's seeds run beside the lab's chain (.config/nextest.toml): under contention
# they yield the CPU to the lab, whose requests have a 5 s budget (a CI run at load ~35 had one
# shoot write of `kill_9…` in Grow answered 504 twice, past it). 256 of the kernel's 1024
# per seed: the lab's 2 runnable processes then get ~80 % of the cores, not ~50 %.
export ISTHMUS_NODE_CPU_SHARES="${ISTHMUS_NODE_CPU_SHARES:-256}"
cargo nextest run --workspace --profile full --lib --bins --tests --examples "$@" || status=$?
slowest
((status == 0)) || failures
phase "the tests" "$t"
((status == 0)) || exit "$status"
t=$SECONDS
cargo test --workspace --doc
phase "the doc tests" "$t"
t=$SECONDS
scripts/fuzz-smoke.sh
phase "the fuzz smoke run" "$t"
phase "the full tier" "$start"
