#!/usr/bin/env bash
# bench/instructions.sh: instructions one small tagged message costs on its
# whole software path (bench/selfsend.c under callgrind), per provider.
#
# Usage:
#   bench/instructions.sh                      # shm hybrid, ofi's library
#   PROVIDERS="shm tcp" bench/instructions.sh
#   LIB=/usr/lib/x86_64-linux-gnu bench/instructions.sh   # another libfabric
#
# Runs selfsend with LO and HI iterations (defaults 2000 and 12000) under
# `valgrind --tool=callgrind` and prints (Ir(HI) - Ir(LO)) / (HI - LO): the
# set-up and tear-down cancel out, and instruction counts do not move with
# the machine's load, so two builds compare exactly. Builds ofi's C ABI
# (cargo build --release -p ofi-capi) unless LIB names a directory holding
# a libfabric.so.1. Needs valgrind, gcc and libfabric-dev's headers.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PROVIDERS="${PROVIDERS:-shm hybrid}"
LO="${LO:-2000}"
HI="${HI:-12000}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for tool in valgrind gcc; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is missing" >&2; exit 2; }
done
if [ -z "${LIB:-}" ]; then
    (cd "$ROOT" && cargo build --release -p ofi-capi >&2)
    LIB="$WORK/lib"
    mkdir -p "$LIB"
    ln -s "${CARGO_TARGET_DIR:-$ROOT/target}/release/libfabric.so" "$LIB/libfabric.so.1"
    ln -s libfabric.so.1 "$LIB/libfabric.so"
fi
gcc -O2 -o "$WORK/selfsend" "$ROOT/bench/selfsend.c" -L"$LIB" -lfabric
ir() { # ir PROVIDER ITERS: total instructions of one run
    LD_LIBRARY_PATH="$LIB" valgrind --tool=callgrind \
        --callgrind-out-file="$WORK/cg.$1.$2" "$WORK/selfsend" "$2" "$1" >/dev/null 2>"$WORK/err" ||
        { cat "$WORK/err" >&2; exit 1; }
    awk '/^(summary|totals):/ { print $2; exit }' "$WORK/cg.$1.$2"
}
for p in $PROVIDERS; do
    lo="$(ir "$p" "$LO")"
    hi="$(ir "$p" "$HI")"
    echo "$p $(( (hi - lo) / (HI - LO) )) instructions per message"
done
