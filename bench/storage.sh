#!/usr/bin/env bash
# bench/storage.sh: fio's nbd engine through `ofi storage nbd` and one
# fabric hop to `ofi storage target` (tcp by default), and the native
# initiator (`ofi storage bench`: the initiator's Rust API, no NBD) over the
# same fabric to the same target, against nbdkit's file
# plugin serving a file of the same size on a Unix socket and, as second
# references, nbdkit over TCP and nbdkit over TCP behind a plain byte relay
# on a Unix socket (bench/nbd_relay.c: the ofi layout's kernel paths,
# processes and copies with no protocol at all, so the most any gateway
# plus TCP hop can do here); alternating the servers in each round.
#
# A benchmark, not a test: it prints a table and fails only when a run fails.
#
# Usage:
#   bench/storage.sh
#   RUNS=3 RUNTIME=10 PROVIDER=shm SIZE=1G bench/storage.sh
#   OFI=/path/to/other/ofi bench/storage.sh     # another build (no cargo build)
#   PIN=0 bench/storage.sh                      # no CPU pinning
#   EP=msg bench/storage.sh                     # fabric MSG connections (default rdm)
#   NATIVE_FLAGS=--inline bench/storage.sh      # ofi storage bench's session on its own thread
#
# Workloads (each at iodepth 16, direct file I/O off, time-based):
#   seqwrite  128 KiB sequential write
#   seqread   128 KiB sequential read
#   randread  4 KiB random read
# Each cell is the median over RUNS of fio's bandwidth (MB/s) or IOPS; the
# ratio columns are medians over nbdkit-unix's (the target: ofi >= 0.80 x
# nbdkit on the Unix socket) and ofi's over the relay's. A second table
# sets `ofi storage bench` (same workloads, iodepth and runtime) against
# fio + nbdkit on the Unix socket (issue 27's target: >= 1.0x over shm,
# >= 0.8x over tcp), with the CPU time each side spent per request (client:
# ofi storage bench or fio; server: the target or nbdkit).
#
# Pinning (PIN=1, the default on 2 or more CPUs): fio on CPU 0, every server
# process (ofi's target and gateway, the nbdkits, the relay) on CPU 1, so
# (`ofi storage bench`, the client there, on CPU 0 like fio)
# each server side gets one core and the client another, whatever its shape.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RUNS="${RUNS:-3}"
RUNTIME="${RUNTIME:-5}"
PROVIDER="${PROVIDER:-tcp}"
EP="${EP:-rdm}"
SIZE="${SIZE:-512M}"
PIN="${PIN:-$([ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null && echo 1 || echo 0)}"

for c in fio nbdkit cc; do
    command -v "$c" >/dev/null || { echo "bench/storage.sh: $c missing (apt-get install fio nbdkit gcc)" >&2; exit 1; }
done
if [ -z "${OFI:-}" ]; then
    OFI="${CARGO_TARGET_DIR:-$ROOT/target}/release/ofi"
    (cd "$ROOT" && cargo build --release -p ofi-tools >/dev/null)
fi
SRV=()
CLI=()
if [ "$PIN" = 1 ]; then
    SRV=(taskset -c 1)
    CLI=(taskset -c 0)
fi
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

DIR="$(mktemp -d /var/tmp/ofi-storage-bench.XXXXXX)"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$DIR"
}
trap cleanup EXIT

truncate -s "$SIZE" "$DIR/ofi.img" "$DIR/kit.img"
"${SRV[@]}" "$OFI" storage target -p "$PROVIDER" -e "$EP" -s 127.0.0.1 -B 0 "$DIR/ofi.img" >"$DIR/target.out" 2>"$DIR/target.err" &
PIDS+=($!)
TARGET_PID=$!
for _ in $(seq 100); do grep -q "listening on" "$DIR/target.out" && break; sleep 0.05; done
PORT="$(sed -n 's/^listening on [^ ]*:\([0-9]*\) .*/\1/p' "$DIR/target.out")"
[ -n "$PORT" ] || { cat "$DIR/target.err" >&2; exit 1; }
"${SRV[@]}" "$OFI" storage nbd -p "$PROVIDER" -e "$EP" -P "$PORT" -q 64 --unix "$DIR/ofi.sock" 127.0.0.1 >/dev/null 2>"$DIR/nbd.err" &
PIDS+=($!)
"${SRV[@]}" nbdkit -f -U "$DIR/kit.sock" file "$DIR/kit.img" &
PIDS+=($!)
KIT_UNIX_PID=$!
KIT_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
"${SRV[@]}" nbdkit -f -i 127.0.0.1 -p "$KIT_PORT" file "$DIR/kit.img" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$DIR/ofi.sock" ] && [ -S "$DIR/kit.sock" ] && break; sleep 0.05; done
sleep 0.2
KIT_TCP="nbd://127.0.0.1:$KIT_PORT"
cc -O2 -o "$DIR/nbd_relay" "$ROOT/bench/nbd_relay.c"
"${SRV[@]}" "$DIR/nbd_relay" "$DIR/relay.sock" "$KIT_PORT" &
PIDS+=($!)
for _ in $(seq 100); do [ -S "$DIR/relay.sock" ] && break; sleep 0.05; done

declare -A URI=(
    [ofi]="nbd+unix:///?socket=$DIR/ofi.sock"
    [nbdkit-unix]="nbd+unix:///?socket=$DIR/kit.sock"
    [nbdkit-tcp]="$KIT_TCP"
    [relay]="nbd+unix:///?socket=$DIR/relay.sock"
)
SERVERS=(ofi native nbdkit-unix nbdkit-tcp relay)
declare -A WL=(
    [seqwrite]="--rw=write --bs=128k"
    [seqread]="--rw=read --bs=128k"
    [randread]="--rw=randread --bs=4k"
)
declare -A NATIVE=(
    [seqwrite]="--rw write --bs 128k"
    [seqread]="--rw read --bs 128k"
    [randread]="--rw randread --bs 4k"
)
declare -A RES
# CPU time per request (µs, client and server) of the native rows and
# nbdkit-unix's: what each path costs, which a loaded machine changes less
# than the rates (the server's from /proc/PID/stat, the client's from
# time(1)).
declare -A CPU
TIMED=0
TIMEF=(/usr/bin/time -o "$DIR/time" -f "%U %S")
[ -x /usr/bin/time ] || TIMEF=()
TCK="$(getconf CLK_TCK)"
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

one() { # server workload -> "MB/s IOPS"
    local out pre=()
    [ "$TIMED" = 1 ] && pre=("${TIMEF[@]}")
    if [ "$1" = native ]; then
        # shellcheck disable=SC2086
        out="$(timeout $((RUNTIME + 60)) "${pre[@]}" "${CLI[@]}" "$OFI" storage bench -p "$PROVIDER" -e "$EP" \
            -P "$PORT" ${NATIVE[$2]} ${NATIVE_FLAGS:-} --iodepth 16 --size "$SIZE" --runtime "$RUNTIME" --json 127.0.0.1)"
        python3 -c 'import json, sys
r = json.loads(sys.argv[1])[sys.argv[2]]
print(r["bw_bytes"] / 1e6, r["iops"])' "$out" "$([[ $2 == *write* ]] && echo write || echo read)"
        return
    fi
    # shellcheck disable=SC2086
    out="$(timeout $((RUNTIME + 60)) "${pre[@]}" "${CLI[@]}" fio --name=b --ioengine=nbd --uri="${URI[$1]}" ${WL[$2]} \
        --iodepth=16 --size="$SIZE" --time_based --runtime="$RUNTIME" --output-format=terse \
        --terse-version=3)"
    # The engine's "connected" notice shares stdout: only terse lines count.
    # (fio's terse bandwidth is in KiB/s.)
    grep ';' <<<"$out" | awk -F';' -v w="$2" '{ if (w ~ /write/) { print $48*1.024/1000, $49 } else { print $7*1.024/1000, $8 } }'
}

for wl in seqwrite seqread randread; do
    for r in $(seq "$RUNS"); do
        # Alternate the order of the servers from round to round.
        order=("${SERVERS[@]}")
        if (( r % 2 == 0 )); then order=(relay nbdkit-tcp nbdkit-unix native ofi); fi
        for s in "${order[@]}"; do
            pid=""
            [ "$s" = native ] && pid=$TARGET_PID
            [ "$s" = nbdkit-unix ] && pid=$KIT_UNIX_PID
            if [ -z "$pid" ] || [ ${#TIMEF[@]} = 0 ]; then
                RES[$wl,$s]+="$(one "$s" "$wl") "
                continue
            fi
            t0="$(ticks "$pid")"
            rm -f "$DIR/time"
            res="$(TIMED=1 one "$s" "$wl")"
            t1="$(ticks "$pid")"
            RES[$wl,$s]+="$res "
            # µs per request: CPU seconds over IOPS x runtime.
            CPU[$wl,$s]+="$(awk -v r="$res" -v t0="$t0" -v t1="$t1" -v tck="$TCK" -v rt="$RUNTIME" '
                { split(r, a, " "); n = a[2] * rt; if (n <= 0) n = 1
                  printf "%.2f %.2f ", ($1 + $2) * 1e6 / n, (t1 - t0) / tck * 1e6 / n }' "$DIR/time")"
        done
    done
done

median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
declare -A MED=()

printf '%-10s %-6s %11s %11s %11s %11s %9s %9s %9s\n' workload metric ofi nbdkit-unix nbdkit-tcp relay \
    ofi/unix relay/unix ofi/relay
for wl in seqwrite seqread randread; do
    col=1; metric="MB/s"
    [ "$wl" = randread ] && { col=2; metric=IOPS; }
    declare -A M=()
    for s in "${SERVERS[@]}"; do
        M[$s]="$(echo "${RES[$wl,$s]}" | xargs -n2 | awk -v c="$col" '{print $c}' | tr '\n' ' ' | median)"
        MED[$wl,$s]="${M[$s]}"
    done
    printf '%-10s %-6s %11.0f %11.0f %11.0f %11.0f %9s %9s %9s\n' "$wl" "$metric" "${M[ofi]}" "${M[nbdkit-unix]}" \
        "${M[nbdkit-tcp]}" "${M[relay]}" "$(ratio "${M[ofi]}" "${M[nbdkit-unix]}")" \
        "$(ratio "${M[relay]}" "${M[nbdkit-unix]}")" "$(ratio "${M[ofi]}" "${M[relay]}")"
done
echo "(target: ofi/unix >= 0.80; provider $PROVIDER $EP, iodepth 16, ${RUNTIME}s per run, median of $RUNS," \
    "pin $PIN, $(nproc) cpus, load $LOAD_START at start, $(cut -d' ' -f1-3 /proc/loadavg) at end)"

# The native initiator against the classic path.
case "$PROVIDER" in shm) GOAL=1.0 ;; *) GOAL=0.8 ;; esac
echo
printf '%-10s %-6s %11s %11s %12s %-15s %17s %17s\n' workload metric native nbdkit-unix native/unix "target >= $GOAL" \
    "native cpu us/io" "nbdkit cpu us/io"
cpu() { # workload server -> "client/server" medians
    local c
    c="${CPU[$1,$2]:-}"
    [ -n "$c" ] || { echo "-"; return; }
    echo "$(echo "$c" | xargs -n2 | awk '{print $1}' | tr '\n' ' ' | median)/$(echo "$c" | xargs -n2 | awk '{print $2}' | tr '\n' ' ' | median)"
}
for wl in seqwrite seqread randread; do
    metric="MB/s"
    [ "$wl" = randread ] && metric=IOPS
    r="$(ratio "${MED[$wl,native]}" "${MED[$wl,nbdkit-unix]}")"
    printf '%-10s %-6s %11.0f %11.0f %12s %-15s %17s %17s\n' "$wl" "$metric" "${MED[$wl,native]}" "${MED[$wl,nbdkit-unix]}" "$r" \
        "$(awk -v r="$r" -v g="$GOAL" 'BEGIN { print (r != "-" && r + 0 >= g) ? "met" : "missed" }')" \
        "$(cpu "$wl" native)" "$(cpu "$wl" nbdkit-unix)"
done
echo "(native: ofi storage bench over $PROVIDER $EP, the initiator API, no NBD; target: native/unix >= 1.0 over shm," \
    ">= 0.8 over tcp; same rounds as above; cpu: client/server CPU time per request, medians)"
