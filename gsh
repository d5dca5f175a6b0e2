#!/usr/bin/env bash
# Runs gsh from a clone: builds gsh and its runtime library (rt/, libgsh_rt.so, which
# `count`, `time` and `profile` load into programs) in release, as users should run them,
# then runs gsh with this script's arguments. Cargo shows its progress on stderr; once built,
# the build step takes a fraction of a second.
#   ./gsh -b scripts/tour-ls.gsh /bin/ls
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
if [[ ! -x "$target/release/gsh" || ! -e "$target/release/libgsh_rt.so" ]]; then
    echo "gsh: building gsh and its runtime library in release (the first build takes a few minutes)..." >&2
fi
cargo build --release --manifest-path "$root/Cargo.toml" -p gsh -p gsh-rt >&2
exec "$target/release/gsh" "$@"
