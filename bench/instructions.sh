#!/usr/bin/env bash
# bench/instructions.sh: instructions one operation costs on its whole
# software path (bench/selfsend.c under callgrind), per provider and
# operation, for ofi's libfabric.so.1 and, beside it, Debian's libfabric.
#
# Usage:
#   bench/instructions.sh                         # every provider and operation
#   PROVIDERS="shm tcp" OPS=inject bench/instructions.sh
#   LIB=/usr/lib/x86_64-linux-gnu bench/instructions.sh   # one other libfabric
#   COMPARE=1 bench/instructions.sh               # ofi beside Debian's, with ratios
#   bench/instructions.sh --check bench/instructions.baseline
#                                                 # the regression guard
#
# Runs selfsend with LO and HI iterations (defaults 2000 and 12000) under
# `valgrind --tool=callgrind` and prints (Ir(HI) - Ir(LO)) / (HI - LO): the
# set-up and tear-down cancel out, and instruction counts do not move with
# the machine's load, so two builds compare exactly. Operations (selfsend's
# third argument): inject (8 B fi_tinject + posted fi_trecv + fi_cq_read),
# send4k (4 KiB fi_tsend + fi_trecv, both completions read), write8 (8 B
# fi_write into the endpoint's own registered region). Builds ofi's C ABI
# (cargo build --release -p ofi-capi) unless LIB names a directory holding
# a libfabric.so.1. Needs valgrind, gcc and libfabric-dev's headers.
#
# --check FILE: reads lines "PROVIDER OP COUNT" from FILE, measures the same
# rows on ofi's library and fails (exit 1) when one costs more than
# TOLERANCE percent (default 3) over its baseline; a row that fell by more
# than that is reported, so the baseline can be lowered in the same commit.
# Debian's libfabric names its tcp and udp offers tcp;ofi_rxm and
# udp;ofi_rxd: COMPARE=1 asks it for those.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PROVIDERS="${PROVIDERS:-shm tcp udp hybrid}"
OPS="${OPS:-inject send4k write8}"
LO="${LO:-2000}"
HI="${HI:-12000}"
TOLERANCE="${TOLERANCE:-3}"
SYSLIB="${SYSLIB:-/usr/lib/x86_64-linux-gnu}"
CHECK=""
if [ "${1:-}" = --check ]; then
    CHECK="${2:?--check needs a baseline file}"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
for tool in valgrind gcc; do
    command -v "$tool" >/dev/null || { echo "instructions.sh: $tool is missing" >&2; exit 2; }
done
OFILIB="$WORK/lib"
if [ -z "${LIB:-}" ] || [ -n "$CHECK" ] || [ "${COMPARE:-0}" = 1 ]; then
    (cd "$ROOT" && cargo build --release -p ofi-capi >&2)
    # CARGO_TARGET_DIR may be relative (to the workspace root, where cargo
    # ran): the link must name the library absolutely or it dangles, and the
    # loader would silently fall back to the system's libfabric.
    target="${CARGO_TARGET_DIR:-target}"
    case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
    [ -e "$target/release/libfabric.so" ] ||
        { echo "instructions.sh: $target/release/libfabric.so was not built" >&2; exit 2; }
    mkdir -p "$OFILIB"
    ln -s "$target/release/libfabric.so" "$OFILIB/libfabric.so.1"
fi
gcc -O2 -o "$WORK/selfsend" "$ROOT/bench/selfsend.c" -I/usr/include -L"$SYSLIB" -lfabric
# The selfsend measured must load the library asked for, never a fallback.
# (grep reads all of ldd's output: with -q it may exit first, and ldd's
# SIGPIPE fails the pipeline under pipefail.)
if [ -d "$OFILIB" ] && ! LD_LIBRARY_PATH="$OFILIB" ldd "$WORK/selfsend" | grep "=> $OFILIB/libfabric.so.1" >/dev/null; then
    echo "instructions.sh: selfsend does not load $OFILIB/libfabric.so.1:" >&2
    LD_LIBRARY_PATH="$OFILIB" ldd "$WORK/selfsend" >&2
    exit 2
fi

# ir LIBDIR PROVIDER OP ITERS: total instructions of one run
ir() {
    local out="$WORK/cg.$$.$RANDOM"
    LD_LIBRARY_PATH="$1" valgrind --tool=callgrind --callgrind-out-file="$out" \
        "$WORK/selfsend" "$4" "$2" "$3" >/dev/null 2>"$WORK/err" ||
        { echo "instructions.sh: selfsend $4 $2 $3 failed:" >&2; tail -5 "$WORK/err" >&2; return 1; }
    awk '/^(summary|totals):/ { print $2; exit }' "$out"
    rm -f "$out"
}
# per_op LIBDIR PROVIDER OP: instructions of one operation
per_op() {
    local lo hi
    lo="$(ir "$1" "$2" "$3" "$LO")" || return 1
    hi="$(ir "$1" "$2" "$3" "$HI")" || return 1
    echo $(((hi - lo) / (HI - LO)))
}
# Debian's libfabric offers tcp and udp RDM through its utility providers.
sysname() {
    case "$1" in
        tcp) echo "tcp;ofi_rxm" ;;
        udp) echo "udp;ofi_rxd" ;;
        *) echo "$1" ;;
    esac
}

if [ -n "$CHECK" ]; then
    fail=0
    while read -r p op base; do
        case "$p" in ''|'#'*) continue ;; esac
        now="$(per_op "$OFILIB" "$p" "$op")"
        limit=$((base + base * TOLERANCE / 100))
        floor=$((base - base * TOLERANCE / 100))
        if [ "$now" -gt "$limit" ]; then
            echo "FAIL $p $op: $now instructions per operation, baseline $base (+${TOLERANCE}% = $limit)"
            fail=1
        elif [ "$now" -lt "$floor" ]; then
            echo "ok   $p $op: $now (baseline $base: lower it in $CHECK)"
        else
            echo "ok   $p $op: $now (baseline $base)"
        fi
    done <"$CHECK"
    exit "$fail"
fi

if [ "${COMPARE:-0}" = 1 ]; then
    printf '%-8s %-8s %8s %10s %7s\n' provider op ofi libfabric ratio
    for p in $PROVIDERS; do
        for op in $OPS; do
            o="$(per_op "$OFILIB" "$p" "$op")"
            if [ "$p" = hybrid ]; then
                printf '%-8s %-8s %8s %10s %7s\n' "$p" "$op" "$o" - -
                continue
            fi
            l="$(per_op "$SYSLIB" "$(sysname "$p")" "$op")"
            printf '%-8s %-8s %8s %10s %7s\n' "$p" "$op" "$o" "$l" \
                "$(awk -v a="$o" -v b="$l" 'BEGIN { printf "%.2f", a / b }')"
        done
    done
    exit 0
fi

LIBDIR="${LIB:-$OFILIB}"
for p in $PROVIDERS; do
    name="$p"
    [ -z "${LIB:-}" ] || name="$(sysname "$p")"
    for op in $OPS; do
        echo "$p $op $(per_op "$LIBDIR" "$name" "$op") instructions per operation"
    done
done
