#!/usr/bin/env bash
# A fixed, short cargo-fuzz run of every fuzz target (`cargo fuzz list`: every parser of
# untrusted bytes; a new target cannot be forgotten here). Never skipped: with a nightly
# toolchain it fuzzes under AddressSanitizer; without one it fuzzes on the stable toolchain
# with RUSTC_BOOTSTRAP=1 (libFuzzer's -Z flags) and no sanitizer, and says so.
# FUZZ_SECONDS (default 15) per target; FUZZ_STABLE=1 takes the stable path even with nightly.
# The targets are built in cargo's dev profile (debug assertions and overflow checks on): the
# smoke run is mostly its build. On this 2-core VM, quiet (2026-11-30): cargo-fuzz's release build
# (one codegen unit per crate) 357 s, the dev build 173 s (release with 16 codegen units, or at
# opt-level 1, was no further along after 4 min); the dev build runs 8-44x fewer inputs in 15 s
# (15k-120k per target; config_load 16 in 26 s, against 699). FUZZ_RELEASE=1 builds as
# cargo-fuzz does, for long runs (fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-15}"
build=(--dev)
profile=dev
if [ "${FUZZ_RELEASE:-0}" = 1 ]; then
  build=()
  profile=release
fi
if [ "${FUZZ_STABLE:-0}" != 1 ] && cargo +nightly --version >/dev/null 2>&1; then
  toolchain=(+nightly)
  sanitizer=address
else
  toolchain=(+stable)
  sanitizer=none
  export RUSTC_BOOTSTRAP=1
  echo "fuzz-smoke: no nightly toolchain; fuzzing on $(cargo --version) with RUSTC_BOOTSTRAP=1, no sanitizer"
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz
fi
cd fuzz
# fuzz/ is a workspace of its own, so its Cargo.lock does not follow the main one by itself; the
# build below would rewrite a stale one silently (found in a fresh clone's `git status`).
if ! cargo "${toolchain[@]}" metadata --locked --format-version 1 >/dev/null 2>&1; then
  echo "fuzz-smoke: fuzz/Cargo.lock is out of date with the crates it fuzzes: run" \
    "\`cargo metadata --manifest-path fuzz/Cargo.toml --format-version 1 >/dev/null\` and commit fuzz/Cargo.lock" >&2
  exit 1
fi

# Configuration files of a seed's size (issue 25 point 6): the loaders are fuzzed with inputs of
# 64 KiB and more, from generated seeds (800 routes as YAML and as JSON, 10,000 levels of
# nesting in 20 KB), so libFuzzer's input cap is raised for them.
large_config_seeds() {
  local dir=corpus/config_load-large i
  mkdir -p "$dir"
  {
    printf 'listeners:\n  - name: peer\n    address: "0.0.0.0:2380"\n    routes:\n'
    for i in $(seq 0 799); do
      printf '      - { sni: "etcd-main-0.shoot--p%d--c.seed-a.example.com", upstream: u%d }\n' "$i" "$i"
    done
    printf 'upstreams:\n'
    for i in $(seq 0 799); do
      printf '  - { name: u%d, endpoints: ["etcd-main-0.etcd-main-peer.shoot--p%d--c.svc:2380"] }\n' "$i" "$i"
    done
  } >"$dir/routes-800.yaml"
  {
    printf '{"listeners":[{"name":"peer","address":"0.0.0.0:2380","routes":['
    for i in $(seq 0 799); do
      [ "$i" = 0 ] || printf ','
      printf '{"sni":"etcd-main-0.shoot--p%d--c.seed-a.example.com","upstream":"u%d","allowed_sources":["198.51.100.0/24"]}' "$i" "$i"
    done
    printf ']}],"upstreams":['
    for i in $(seq 0 799); do
      [ "$i" = 0 ] || printf ','
      printf '{"name":"u%d","endpoints":["etcd-main-0.etcd-main-peer.shoot--p%d--c.svc:2380"],"idle_timeout":"3h"}' "$i" "$i"
    done
    printf ']}\n'
  } >"$dir/routes-800.json"
  { printf 'listeners:\n'; printf -- '- %.0s' $(seq 10000); printf 'x\n'; } >"$dir/deep-block.yaml"
  { printf '{"listeners":'; printf '[%.0s' $(seq 10000); printf ']%.0s' $(seq 10000); printf '}\n'; } >"$dir/deep-flow.json"
  echo "$dir"
}

targets=$(cargo "${toolchain[@]}" fuzz list)
[ -n "$targets" ] || { echo "fuzz-smoke: no fuzz targets found"; exit 1; }
for target in $targets; do
  corpus="corpus/$target"
  mkdir -p "$corpus"
  case "$target" in
    client_hello | record_layer) seeds=(corpus-seed) ;;
    # The loaders only get far on structured YAML: start from the real configuration files.
    config_load) seeds=(../examples ../deploy/examples ../proxy/examples ../tunnel/examples "$(large_config_seeds)") ;;
    *) seeds=() ;;
  esac
  [ -d "seeds/$target" ] && seeds+=("seeds/$target")
  existing=()
  for s in "${seeds[@]}"; do [ -d "$s" ] && existing+=("$s"); done
  echo "fuzz-smoke: $target for ${seconds}s (sanitizer: $sanitizer, $profile build)"
  set +e
  max_len=()
  [ "$target" = config_load ] && max_len=(-max_len=262144)
  cargo "${toolchain[@]}" fuzz run ${build[@]+"${build[@]}"} --sanitizer "$sanitizer" "$target" "$corpus" "${existing[@]}" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 ${max_len[@]+"${max_len[@]}"} >"corpus/$target.log" 2>&1
  status=$?
  set -e
  grep -E "^#[0-9]+ +DONE|^Done [0-9]+ runs" "corpus/$target.log" | tail -1 || true
  if [ "$status" -ne 0 ]; then
    tail -40 "corpus/$target.log"
    echo "fuzz-smoke: $target failed (exit $status; a crash input is in fuzz/artifacts/$target)"
    exit 1
  fi
done
echo "fuzz-smoke: every target ran"
