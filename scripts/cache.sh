# Sourced by the build scripts. One-time builds (Go binaries, the pinned upstream CRDs, images)
# live here, outside any clone's target/, so a fresh clone on the same machine reuses them and
# `cargo clean` does not throw away half an hour of Go builds. One folder per pinned thing:
# "$ISTHMUS_CACHE/<name>-<version>/". Override with ISTHMUS_CACHE (testkit::cache reads the same).
ISTHMUS_CACHE="${ISTHMUS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/isthmus}"
export ISTHMUS_CACHE
