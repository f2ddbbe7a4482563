#!/usr/bin/env bash
# bench/compare.sh: ofi pingpong against Debian's libfabric fi_pingpong, and
# ofi bw's one-sided rows (RMA write bandwidth, fetch-add latency).
#
# A benchmark, not a test: it prints numbers and checks them against the
# project's performance targets, and only fails (exit 1) when a run fails,
# or, with STRICT=1, when a target is missed.
#
# Usage:
#   bench/compare.sh                  # from any directory; shm and tcp
#   RUNS=9 PROVIDERS=shm bench/compare.sh
#   RUNS=3 PROVIDERS=tcp TCP_EPS=rdm bench/compare.sh
#   RUNS=3 OPS="write atomic" bench/compare.sh     # only the one-sided rows
#
# What it does:
#   1. builds target/release/ofi (cargo build --release -p ofi-tools; a no-op
#      when up to date),
#   2. installs libfabric-bin with apt-get if fi_pingpong is missing,
#   3. waits (up to QUIET_WAIT s) for idle cpus before each round, then
#      for every configuration runs `ofi pingpong` and `fi_pingpong` with the
#      same flags (-p PROVIDER -e EP -m MODE -S SIZE -I ITERS), server pinned
#      with `taskset -c 0`, client with `taskset -c 1`, RUNS times,
#      alternating which of the two goes first, each run on fresh control
#      ports and under a timeout; parses MB/sec and usec/xfer from the
#      client's last line. Configurations:
#        shm: rdm msg at each of SIZES, rdm tagged at each of TAGGED_SIZES
#        tcp: msg and rdm endpoints (TCP_EPS), msg mode, at each of TCP_SIZES
#             (Debian's fi_pingpong -p tcp -e rdm runs tcp;ofi_rxm)
#   4. measures the physical references once per round, client on cpu 1:
#        shm: single-thread memcpy bandwidth (bench/memcpy.c)
#        tcp: raw TCP over 127.0.0.1 (bench/tcp_raw.c): a busy-polled 8 B
#             socket ping-pong (one-way usec) and a 1 MiB-write stream
#             (MB/sec), server on cpu 0 and client on cpu 1 as above
#        udp: raw UDP over 127.0.0.1 (bench/udp_raw.c): a busy-polled 8 B
#             datagram ping-pong (one-way usec) and a stream of 64000 B
#             datagrams (MB/sec of the bytes the receiver got: it returns
#             credits, the sender keeps a window its receive buffer holds),
#             pinned the same way
#      (all compiled with cc -O2 into a temporary directory),
#   5. with OPS containing write / atomic, in the same rounds (pinned the
#      same way, alternating tools the same way):
#        write:  `ofi bw -o write -S BW_SIZE -W BW_WINDOW` on each provider,
#                against the physical reference of the same run (shm: the
#                memcpy bandwidth; tcp: the raw TCP stream; udp: the raw
#                UDP stream of 64000 B datagrams), and Debian's
#                `fi_rma_bw -o write` side by side when it is installed
#                (fabtests; Debian's libfabric-bin does not ship it), run
#                with its out-of-band address exchange on the control port
#        atomic: `ofi bw -o atomic -W 1 -S 8` on shm: 8 B FI_UINT64 FI_SUM
#                fetch-adds one at a time; half the round trip is the
#                one-way latency of the target
#   6. with CAPI=1 (the default), also runs Debian's fi_pingpong unchanged on
#      ofi's C ABI (target/release/libfabric.so, built here, reached through
#      LD_LIBRARY_PATH and a libfabric.so.1 link) for every ping-pong
#      configuration, in the same rounds and alternation: the same binary
#      on both libraries, so the ratio compares the libraries alone,
#   7. with MPI=1 (the default when tcp is measured, CAPI=1 and mpicc and
#      mpirun are installed), also runs bench/mpi_latency.c under Debian's
#      Open MPI (pml cm, mtl ofi, provider tcp, 2 ranks bound to the two
#      cpus) on ofi's libfabric.so.1 and on Debian's, alternating per round:
#      the same MPI binary on both libraries; and, alternating the same
#      way, the same binary with no provider named (cm + ofi MTL on ofi's
#      libfabric.so.1: its default RDM offer, hybrid, through shm) against
#      Open MPI's own shared-memory path (pml ob1, btl vader,self),
#   7b. with OPS containing coll, in the same rounds: bench/coll_latency.c
#      (two forked ranks pinned to cpus 0 and 1 joining one group,
#      fi_barrier, an 8 B fi_allreduce FI_SUM and a 4 KiB fi_broadcast timed
#      one by one, COLL_ITERS each; median and p99 per run) on ofi's
#      libfabric.so.1 over each provider of PROVIDERS, against, for shm,
#      bench/mpi_coll.c (MPI_Barrier, MPI_Allreduce, MPI_Bcast, the same
#      way) under Open MPI's pml ob1 + btl vader,self, and for tcp the same
#      coll_latency binary on Debian's libfabric (tcp;ofi_rxm, its util
#      collectives), alternating per round,
#   8. with HYBRID_SIZES (default "8" when shm and send are measured), in
#      the same rounds and alternation: `ofi pingpong -p hybrid -e rdm`
#      (the hybrid provider, through shm here)
#      against `ofi pingpong -p shm -e rdm`, pinned the same way; target:
#      default/shm <= 1.10,
#   9. prints Markdown tables of medians, ratios and the targets.
#
# Environment:
#   RUNS          runs per configuration and tool (default 5)
#   OPS           what to measure (default "send write atomic"): send = the
#                 ping-pong rows above, write = RMA write bandwidth rows,
#                 atomic = the shm fetch-add latency row, coll = the
#                 collective rows (not in the default); OPS=send is the
#                 script as it was before the one-sided rows
#   COLL_ITERS    operations of each kind per collective run (default 20000)
#   COLL_HYBRID   1: collective rows for hybrid (the default RDM offer) too,
#                 against Open MPI's vader like shm (default 0)
#   PROVIDERS     providers to measure, in order (default "shm tcp"); the old
#                 PROVIDER (one name) is still honoured when PROVIDERS is unset
#   SIZES         shm msg sizes in bytes (default "8 4096 1048576")
#   TAGGED_SIZES  shm tagged sizes in bytes (default "8"; "" for none)
#   TCP_SIZES     tcp sizes in bytes (default "8 1048576")
#   TCP_EPS       tcp endpoint types (default "msg rdm")
#   UDP_SIZES     udp rdm sizes in bytes (default "8 1048576"); udp dgram
#                 runs at the sizes of UDP_SIZES that fit one datagram
#   UDP_EPS       udp endpoint types (default "dgram rdm"; Debian's
#                 fi_pingpong -p udp -e rdm runs udp;ofi_rxd)
#   ITERS         iterations per run (default: by size, 200000 for <= 4 KiB,
#                 50000 for <= 64 KiB, then 5e9/size with a floor of 500)
#   HYBRID_SIZES  sizes of the default-offer-vs-shm rows (default "8" with
#                 shm and send; "" for none)
#   BW_SIZE       ofi bw -o write size in bytes (default 1048576)
#   BW_WINDOW     writes kept in flight (default 64)
#   BW_ITERS      writes per run (default: as ITERS for BW_SIZE)
#   ATOMIC_ITERS  fetch-adds per run (default 200000)
#   FI_RMA_BW     libfabric's RMA bandwidth test (default fi_rma_bw; rows say
#                 "not installed" when it is missing)
#   MEMCPY_SIZE   bytes per memcpy in the reference (default 1048576)
#   RAW_PP_ITERS / RAW_STREAM_ITERS   raw TCP ping-pong round trips (default
#                 200000) and 1 MiB stream writes (default 5000)
#   RAW_UDP_PP_ITERS / RAW_UDP_STREAM_ITERS   raw UDP ping-pong round trips
#                 (default 200000) and 64000 B stream datagrams (default 50000)
#   TIMEOUT       seconds allowed per run (default 120)
#   BASE_PORT     first control port to try (default derived from the pid)
#   SERVER_CPU / CLIENT_CPU   cpus to pin to (default 0 / 1)
#   OFI_BIN       ofi binary to use (default target/release/ofi, built here;
#                 CARGO_TARGET_DIR moves it and the C ABI's library too)
#   FI_PINGPONG   libfabric binary to use (default fi_pingpong)
#   QUIET_WAIT    seconds to wait before each round for the cpus to be idle
#                 (under 10 % busy over one second; default 120); rounds that
#                 start busy anyway are counted in the report
#   CAPI          1 (default): add the fi_pingpong-on-ofi runs; 0: skip them
#   MPI           1: add the Open MPI runs (default: 1 when possible); 0: skip
#   MPI_ITERS     MPI round trips per size and run (default 50000)
#   MPI_SIZES     MPI message sizes in bytes (default "8")
#   KEEP=1        keep the raw outputs (the directory is printed)
#   STRICT=1      exit 1 when a target is missed
#
# Targets (shm, rdm, msg): 8 B latency ofi/libfabric <= 0.70; 4 KiB latency
# ofi/libfabric <= 0.80; 1 MiB bandwidth >= 1.20x libfabric and >= 0.80x
# single-thread memcpy.
# Targets (tcp, msg mode): RDM 8 B latency ofi/libfabric (tcp;ofi_rxm)
# <= 0.75; MSG 8 B latency ofi/libfabric <= 1.00; RDM 1 MiB bandwidth
# >= 1.20x libfabric and >= 0.70x the raw TCP stream.
# Targets (udp, msg mode): DGRAM 8 B latency ofi/libfabric udp <= 1.00;
# RDM 8 B latency ofi/libfabric (udp;ofi_rxd) <= 0.50; RDM 1 MiB bandwidth
# >= 5.00x libfabric; RMA write 1 MiB (ofi bw -p udp -o write) >= 0.50x the
# raw UDP stream of 64000 B datagrams.
# Target (shm, atomics): 8 B fetch-and-add latency <= 1.0 usec one-way.
# Targets (collectives, medians): shm (and hybrid, the default offer)
# barrier, 8 B allreduce and 4 KiB broadcast <= 1.5x Open MPI's ob1 +
# vader; tcp the same <= 0.5x Debian's
# libfabric (tcp;ofi_rxm); every ofi row's p99 <= 5x its median.
# Targets (C ABI, the same fi_pingpong binary on ofi's libfabric.so.1 and on
# Debian's): shm rdm 8 B latency <= 0.80; tcp rdm 8 B <= 0.80 (against
# tcp;ofi_rxm); Open MPI (cm, ofi MTL, tcp) 8 B latency on ofi <= on
# libfabric (ratio <= 1.00); Open MPI cm + ofi MTL on ofi's default offer,
# 8 B latency <= 2.00x Open MPI's ob1 + vader.
# The RMA write rows are reported against memcpy / the raw stream and
# fi_rma_bw without a target.
# shellcheck disable=SC2317 # functions are called indirectly (trap, stage)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

RUNS="${RUNS:-5}"
OPS="${OPS-send write atomic}"
BW_SIZE="${BW_SIZE:-1048576}"
BW_WINDOW="${BW_WINDOW:-64}"
BW_ITERS="${BW_ITERS:-}"
ATOMIC_ITERS="${ATOMIC_ITERS:-200000}"
COLL_ITERS="${COLL_ITERS:-20000}"
FI_RMA_BW="${FI_RMA_BW:-fi_rma_bw}"
PROVIDERS="${PROVIDERS:-${PROVIDER:-shm tcp}}"
SIZES="${SIZES:-8 4096 1048576}"
TAGGED_SIZES="${TAGGED_SIZES-8}"
TCP_SIZES="${TCP_SIZES:-8 1048576}"
TCP_EPS="${TCP_EPS:-msg rdm}"
UDP_SIZES="${UDP_SIZES:-8 1048576}"
UDP_EPS="${UDP_EPS:-dgram rdm}"
ITERS="${ITERS:-}"
MEMCPY_SIZE="${MEMCPY_SIZE:-1048576}"
RAW_PP_ITERS="${RAW_PP_ITERS:-200000}"
RAW_STREAM_ITERS="${RAW_STREAM_ITERS:-5000}"
RAW_UDP_PP_ITERS="${RAW_UDP_PP_ITERS:-200000}"
RAW_UDP_STREAM_ITERS="${RAW_UDP_STREAM_ITERS:-50000}"
TIMEOUT="${TIMEOUT:-120}"
SERVER_CPU="${SERVER_CPU:-0}"
CLIENT_CPU="${CLIENT_CPU:-1}"
FI_PINGPONG="${FI_PINGPONG:-fi_pingpong}"
KEEP="${KEEP:-0}"
CAPI="${CAPI:-1}"
MPI="${MPI:-}"
MPI_ITERS="${MPI_ITERS:-50000}"
MPI_SIZES="${MPI_SIZES:-8}"
STRICT="${STRICT:-0}"
QUIET_WAIT="${QUIET_WAIT:-120}"
NEXT_PORT="${BASE_PORT:-$((20000 + ($$ % 1000) * 10))}"

log() { printf '%s\n' "$*" >&2; }
die() { log "compare.sh: $*"; exit 1; }

case "$RUNS" in '' | *[!0-9]* | 0) die "RUNS must be a positive integer (got '$RUNS')" ;; esac
for s in $SIZES $TAGGED_SIZES $TCP_SIZES $UDP_SIZES $MEMCPY_SIZE $RAW_PP_ITERS $RAW_STREAM_ITERS \
    $RAW_UDP_PP_ITERS $RAW_UDP_STREAM_ITERS $BW_SIZE $BW_WINDOW $BW_ITERS $ATOMIC_ITERS $COLL_ITERS; do
    case "$s" in *[!0-9]*) die "sizes and counts must be numbers (got '$s')" ;; esac
done
HAS_SHM=0
HAS_TCP=0
HAS_UDP=0
for p in $PROVIDERS; do
    case "$p" in
        shm) HAS_SHM=1 ;;
        tcp) HAS_TCP=1 ;;
        udp) HAS_UDP=1 ;;
        *) die "PROVIDERS: only shm, tcp and udp are known (got '$p')" ;;
    esac
done
for e in $UDP_EPS; do
    case "$e" in dgram | rdm) ;; *) die "UDP_EPS: dgram and/or rdm (got '$e')" ;; esac
done
# The default RDM offer (ofi's hybrid) against -p shm: measured with shm.
if [ -z "${HYBRID_SIZES+x}" ]; then
    HYBRID_SIZES=""
    if [ "$HAS_SHM" = 1 ] && [[ " $OPS " == *" send "* || -z "${OPS:-}" ]]; then HYBRID_SIZES=8; fi
fi
for s in $HYBRID_SIZES; do
    case "$s" in *[!0-9]*) die "HYBRID_SIZES must be numbers (got '$s')" ;; esac
done
for e in $TCP_EPS; do
    case "$e" in msg | rdm) ;; *) die "TCP_EPS: msg and/or rdm (got '$e')" ;; esac
done
OP_SEND=0
OP_WRITE=0
OP_ATOMIC=0
OP_COLL=0
for o in $OPS; do
    case "$o" in
        send) OP_SEND=1 ;;
        write) OP_WRITE=1 ;;
        atomic) OP_ATOMIC=1 ;;
        coll) OP_COLL=1 ;;
        *) die "OPS: send, write, atomic and/or coll (got '$o')" ;;
    esac
done
[ "$OP_COLL" = 0 ] || [ "$CAPI" = 1 ] || die "OPS=coll needs CAPI=1 (ofi's libfabric.so.1)"

# --- tools --------------------------------------------------------------------

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root or sudo to run: $*"
    fi
}

for t in taskset timeout cc awk; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' is required"
done

if [ -z "${OFI_BIN:-}" ]; then
    OFI_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/ofi"
    if command -v cargo >/dev/null 2>&1; then
        log "== building ofi (cargo build --release -p ofi-tools; a no-op when up to date)"
        (cd "$ROOT" && cargo build --release -p ofi-tools) >&2 || die "cargo build failed"
    else
        log "warning: cargo not found; using the existing $OFI_BIN"
    fi
fi
[ -x "$OFI_BIN" ] || die "ofi binary not found at $OFI_BIN"

if ! command -v "$FI_PINGPONG" >/dev/null 2>&1; then
    log "== installing libfabric-bin (for fi_pingpong)"
    as_root apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libfabric-bin >&2
    command -v "$FI_PINGPONG" >/dev/null 2>&1 || die "fi_pingpong still missing after installing libfabric-bin"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/ofi-compare.XXXXXX")"
if [ "$CAPI" = 1 ]; then
    CAPI_SO="${CARGO_TARGET_DIR:-$ROOT/target}/release/libfabric.so"
    if command -v cargo >/dev/null 2>&1; then
        log "== building ofi's C ABI (cargo build --release -p ofi-capi)"
        (cd "$ROOT" && cargo build --release -p ofi-capi) >&2 || die "cargo build -p ofi-capi failed"
    fi
    [ -f "$CAPI_SO" ] || die "$CAPI_SO not found (CAPI=0 skips the C ABI rows)"
    mkdir -p "$WORK/capi"
    ln -sf "$CAPI_SO" "$WORK/capi/libfabric.so.1"
fi
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    if [ "$KEEP" = 1 ]; then log "raw outputs kept in $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

if [ "$HAS_SHM" = 1 ]; then
    cc -O2 -o "$WORK/memcpy" "$ROOT/bench/memcpy.c" || die "cannot compile bench/memcpy.c"
fi
if [ "$HAS_TCP" = 1 ]; then
    cc -O2 -o "$WORK/tcp_raw" "$ROOT/bench/tcp_raw.c" || die "cannot compile bench/tcp_raw.c"
fi
if [ "$HAS_UDP" = 1 ]; then
    cc -O2 -o "$WORK/udp_raw" "$ROOT/bench/udp_raw.c" || die "cannot compile bench/udp_raw.c"
fi
if [ -z "$MPI" ]; then
    MPI=0
    if [ "$HAS_TCP" = 1 ] && [ "$CAPI" = 1 ] && command -v mpicc >/dev/null 2>&1 &&
        command -v mpirun >/dev/null 2>&1; then MPI=1; fi
fi
if [ "$MPI" = 1 ]; then
    [ "$CAPI" = 1 ] || die "MPI=1 needs CAPI=1 (ofi's libfabric.so.1)"
    mpicc -O2 -o "$WORK/mpi_latency" "$ROOT/bench/mpi_latency.c" || die "cannot compile bench/mpi_latency.c"
fi
COLL_MPI=0
if [ "$OP_COLL" = 1 ]; then
    cc -O2 -o "$WORK/coll_latency" "$ROOT/bench/coll_latency.c" -lfabric ||
        die "cannot compile bench/coll_latency.c (libfabric-dev's headers)"
    if [ "$HAS_SHM" = 1 ] && command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
        mpicc -O2 -o "$WORK/mpi_coll" "$ROOT/bench/mpi_coll.c" || die "cannot compile bench/mpi_coll.c"
        COLL_MPI=1
    fi
fi

# --- helpers ------------------------------------------------------------------

# Is a TCP port in use in any state (listening, connected, TIME_WAIT), or
# a UDP port bound?
port_in_use() {
    local hex
    hex="$(printf '%04X' "$1")"
    awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6 2>/dev/null
}

# Is something listening on the port?
port_listening() {
    local hex
    hex="$(printf '%04X' "$1")"
    awk -v p=":$hex" 'NR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Is a UDP socket bound to the port?
port_bound_udp() {
    local hex
    hex="$(printf '%04X' "$1")"
    awk -v p=":$hex" 'NR > 1 && substr($2, length($2) - 4) == p { found = 1 } END { exit !found }' \
        /proc/net/udp /proc/net/udp6 2>/dev/null
}

# Prints a control port nobody has used recently; never hands out one twice.
fresh_port() {
    while port_in_use "$NEXT_PORT"; do NEXT_PORT=$((NEXT_PORT + 1)); done
    [ "$NEXT_PORT" -lt 32768 ] || NEXT_PORT=20000
    PORT="$NEXT_PORT"
    NEXT_PORT=$((NEXT_PORT + 1))
}

iters_for() {
    local size="$1"
    if [ -n "$ITERS" ]; then echo "$ITERS"
    elif [ "$size" -le 4096 ]; then echo 200000
    elif [ "$size" -le 65536 ]; then echo 50000
    else
        local n=$((5000000000 / size))
        [ "$n" -ge 500 ] || n=500
        echo "$n"
    fi
}

human() {
    local s="$1"
    if [ "$s" -ge 1048576 ] && [ $((s % 1048576)) -eq 0 ]; then echo "$((s / 1048576)) MiB"
    elif [ "$s" -ge 1024 ] && [ $((s % 1024)) -eq 0 ]; then echo "$((s / 1024)) KiB"
    else echo "$s B"; fi
}

median() { # [PRINTF_FORMAT] < numbers -> median (or "-" when none)
    sort -g | awk -v f="${1:-%.4f}" '{ v[NR] = $1 } END {
        if (NR == 0) { print "-"; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf f "\n", m }'
}

ratio() { # a / b with 2 decimals, "-" if either is missing
    awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b + 0 == 0) print "-"; else printf "%.2f\n", a / b }'
}

FAILURES=0

# start_server LOG CMD...: starts CMD in the background (SERVER_PID) under
# the timeout and waits for $PORT to listen (with LISTEN=udp: for a UDP
# socket bound to it); returns 1 (server gone, its output shown) if it does
# not within 10 s.
start_server() {
    local log="$1" tag="$2" ready=port_listening
    shift 2
    [ "${LISTEN:-tcp}" != udp ] || ready=port_bound_udp
    timeout "$TIMEOUT" "$@" >"$log" 2>&1 &
    SERVER_PID=$!
    local waited=0
    while ! "$ready" "$PORT"; do
        if ! kill -0 "$SERVER_PID" 2>/dev/null || [ "$waited" -ge 200 ]; then
            log "   $tag: server did not start listening on port $PORT"
            sed 's/^/     server: /' "$log" >&2 || true
            kill "$SERVER_PID" 2>/dev/null || true
            wait "$SERVER_PID" 2>/dev/null || true
            SERVER_PID=""
            FAILURES=$((FAILURES + 1))
            return 1
        fi
        sleep 0.05
        waited=$((waited + 1))
    done
}

# finish_pair OUT TAG: runs the client (the remaining arguments) under the
# timeout, waits for the server; sets CRC and SRC.
finish_pair() {
    local out="$1"
    shift
    CRC=0
    SRC=0
    timeout "$TIMEOUT" "$@" >"$out.client" 2>&1 || CRC=$?
    if [ "$CRC" -ne 0 ]; then kill "$SERVER_PID" 2>/dev/null || true; fi
    wait "$SERVER_PID" || SRC=$?
    SERVER_PID=""
}

# run_one TOOL PROV EP MODE SIZE ROUND: one server/client pair; appends
# "usec mbs round" to $WORK/TOOL-PROV-EP-MODE-SIZE.dat.
run_one() {
    local tool="$1" prov="$2" ep="$3" mode="$4" size="$5" round="$6" bin
    local iters tag out
    iters="$(iters_for "$size")"
    case "$tool" in
        ofi | hyb) bin=("$OFI_BIN" pingpong) ;;
        capi) bin=(env LD_LIBRARY_PATH="$WORK/capi" "$FI_PINGPONG") ;;
        *) bin=("$FI_PINGPONG") ;;
    esac
    local flags=(-p "$prov" -e "$ep" -m "$mode" -S "$size" -I "$iters")
    # "default": no provider named, getinfo's first RDM offer (ofi's
    # hybrid; see crates/providers/hybrid).
    [ "$prov" != default ] || flags=(-e "$ep" -m "$mode" -S "$size" -I "$iters")
    tag="$tool-$prov-$ep-$mode-$size"
    out="$WORK/$tag.r$round"
    fresh_port

    if ! start_server "$out.server" "$tag run $round" \
        taskset -c "$SERVER_CPU" "${bin[@]}" "${flags[@]}" -B "$PORT"; then
        echo "$round server did not listen" >>"$WORK/$tag.fail"
        return 0
    fi
    finish_pair "$out" taskset -c "$CLIENT_CPU" "${bin[@]}" "${flags[@]}" -P "$PORT" localhost

    local line usec mbs
    line="$(awk 'NF { last = $0 } END { print last }' "$out.client")"
    usec="$(printf '%s\n' "$line" | awk '$1 != "bytes" && $7 ~ /^[0-9.]+$/ { print $7 }')"
    mbs="$(printf '%s\n' "$line" | awk '$1 != "bytes" && $6 ~ /^[0-9.]+$/ { print $6 }')"
    if [ "$CRC" -ne 0 ] || [ "$SRC" -ne 0 ] || [ -z "$usec" ] || [ -z "$mbs" ]; then
        log "   $tag run $round: FAILED (client rc=$CRC, server rc=$SRC; 124 = timeout)"
        sed 's/^/     client: /' "$out.client" | tail -5 >&2 || true
        sed 's/^/     server: /' "$out.server" | tail -5 >&2 || true
        {
            printf '%s client rc=%s server rc=%s (124 = timeout);' "$round" "$CRC" "$SRC"
            printf ' client: %s;' "$(grep -v '^bytes' "$out.client" | tail -2 | tr '\n' ' ')"
            printf ' server: %s\n' "$(grep -v '^bytes' "$out.server" | tail -2 | tr '\n' ' ')"
        } >>"$WORK/$tag.fail"
        FAILURES=$((FAILURES + 1))
        return 0
    fi
    # usec/xfer is printed with 2 decimals only; MB/sec = size / usec/xfer,
    # so size / MB/sec gives the same latency with more digits.
    usec="$(awk -v s="$size" -v u="$usec" -v b="$mbs" 'BEGIN { if (s > 0 && b > 0) printf "%.4f\n", s / b; else print u }')"
    printf '%s %s %s\n' "$usec" "$mbs" "$round" >>"$WORK/$tag.dat"
    log "   $(printf '%-30s run %d: %10s usec/xfer %12s MB/sec' "$tag" "$round" "$usec" "$mbs")"
}

# run_raw KIND ROUND [udp]: bench/tcp_raw (or bench/udp_raw) KIND (pingpong
# | stream) over 127.0.0.1, pinned like the pingpongs; appends
# "usec mbs round" to $WORK/raw-KIND.dat (udp: $WORK/rawudp-KIND.dat).
run_raw() {
    local kind="$1" round="$2" proto="${3:-tcp}" iters tag out
    if [ "$proto" = udp ]; then
        if [ "$kind" = pingpong ]; then iters="$RAW_UDP_PP_ITERS"; else iters="$RAW_UDP_STREAM_ITERS"; fi
        tag="rawudp-$kind"
    else
        if [ "$kind" = pingpong ]; then iters="$RAW_PP_ITERS"; else iters="$RAW_STREAM_ITERS"; fi
        tag="raw-$kind"
    fi
    local bin="$WORK/${proto}_raw" cpuvar
    cpuvar="$(echo "$proto" | tr a-z A-Z)_RAW_CPU"
    out="$WORK/$tag.r$round"
    fresh_port
    # The raw programs pin themselves too; taskset is what the other runs use.
    if ! LISTEN="$proto" start_server "$out.server" "$tag run $round" \
        env "$cpuvar=$SERVER_CPU" taskset -c "$SERVER_CPU" "$bin" "$kind" server "$PORT" "$iters"; then
        echo "$round server did not listen" >>"$WORK/$tag.fail"
        return 0
    fi
    finish_pair "$out" env "$cpuvar=$CLIENT_CPU" taskset -c "$CLIENT_CPU" "$bin" "$kind" client "$PORT" "$iters"
    local usec mbs
    usec="$(awk '{ for (i = 1; i < NF; i++) if ($i == "usec/xfer") u = $(i + 1) } END { print u }' "$out.client")"
    mbs="$(awk '{ for (i = 1; i < NF; i++) if ($i == "MB/sec") m = $(i + 1) } END { print m }' "$out.client")"
    if [ "$CRC" -ne 0 ] || [ "$SRC" -ne 0 ] || [ -z "$usec" ] || [ -z "$mbs" ]; then
        log "   $tag run $round: FAILED (client rc=$CRC, server rc=$SRC)"
        cat "$out.client" "$out.server" | sed 's/^/     /' >&2 || true
        echo "$round client rc=$CRC server rc=$SRC" >>"$WORK/$tag.fail"
        FAILURES=$((FAILURES + 1))
        return 0
    fi
    printf '%s %s %s\n' "$usec" "$mbs" "$round" >>"$WORK/$tag.dat"
    log "   $(printf '%-30s run %d: %10s usec/xfer %12s MB/sec' "$tag" "$round" "$usec" "$mbs")"
}

# run_mpi TOOL ROUND: bench/mpi_latency under Open MPI, 2 ranks bound to one
# core each: pml cm + mtl ofi with provider tcp on loopback on ofi's
# libfabric.so.1 (TOOL capi) or Debian's (TOOL libfabric); pml cm + mtl ofi
# with no provider named on ofi's libfabric.so.1 (TOOL default: its first
# RDM offer); pml ob1 + btl vader,self, no libfabric (TOOL vader). Appends
# "usec round" to $WORK/mpi-TOOL-SIZE.dat for every size.
run_mpi() {
    local tool="$1" round="$2" out="$WORK/mpi-$1.r$2" rc=0
    local args=(--allow-run-as-root -np 2 --bind-to core --map-by core
        --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include tcp
        --mca btl self --mca oob_tcp_if_include lo -x FI_TCP_IFACE)
    if [ "$tool" = default ]; then
        args=(--allow-run-as-root -np 2 --bind-to core --map-by core
            --mca pml cm --mca mtl ofi --mca btl self --mca oob_tcp_if_include lo)
        env LD_LIBRARY_PATH="$WORK/capi" timeout "$TIMEOUT" \
            mpirun "${args[@]}" -x LD_LIBRARY_PATH "$WORK/mpi_latency" "$MPI_ITERS" $MPI_SIZES \
            >"$out" 2>&1 || rc=$?
    elif [ "$tool" = vader ]; then
        args=(--allow-run-as-root -np 2 --bind-to core --map-by core
            --mca pml ob1 --mca btl vader,self --mca oob_tcp_if_include lo)
        env -u LD_LIBRARY_PATH timeout "$TIMEOUT" \
            mpirun "${args[@]}" "$WORK/mpi_latency" "$MPI_ITERS" $MPI_SIZES >"$out" 2>&1 || rc=$?
    elif [ "$tool" = capi ]; then
        env LD_LIBRARY_PATH="$WORK/capi" FI_TCP_IFACE=lo timeout "$TIMEOUT" \
            mpirun "${args[@]}" -x LD_LIBRARY_PATH "$WORK/mpi_latency" "$MPI_ITERS" $MPI_SIZES \
            >"$out" 2>&1 || rc=$?
    else
        env -u LD_LIBRARY_PATH FI_TCP_IFACE=lo timeout "$TIMEOUT" \
            mpirun "${args[@]}" "$WORK/mpi_latency" "$MPI_ITERS" $MPI_SIZES >"$out" 2>&1 || rc=$?
    fi
    local size usec
    for size in $MPI_SIZES; do
        usec="$(awk -v s="$size" '$1 == "size" && $2 == s { print $6 }' "$out")"
        if [ "$rc" -ne 0 ] || [ -z "$usec" ]; then
            log "   mpi-$tool $size B run $round: FAILED (rc=$rc)"
            sed 's/^/     /' "$out" >&2 || true
            echo "$round rc=$rc" >>"$WORK/mpi-$tool-$size.fail"
            FAILURES=$((FAILURES + 1))
            continue
        fi
        printf '%s %s\n' "$usec" "$round" >>"$WORK/mpi-$tool-$size.dat"
        log "   $(printf '%-30s run %d: %10s usec/xfer' "mpi-$tool-$size" "$round" "$usec")"
    done
}

# run_coll TOOL PROV ROUND: one bench/coll_latency.c run (TOOL ofi: on
# ofi's libfabric.so.1; libfabric: on Debian's, tcp as tcp;ofi_rxm) or, TOOL
# vader, bench/mpi_coll.c under Open MPI's ob1 + vader; appends "median p99
# round" to $WORK/coll-TOOL-PROV-OP.dat for each operation.
COLL_OPS="barrier allreduce8 broadcast4k"
run_coll() {
    local tool="$1" prov="$2" round="$3" out="$WORK/coll-$1-$2.r$3" rc=0 op line
    case "$tool" in
        ofi)
            env LD_LIBRARY_PATH="$WORK/capi" FI_TCP_IFACE=lo FI_UDP_IFACE=lo timeout "$TIMEOUT" \
                "$WORK/coll_latency" "$prov" "$COLL_ITERS" >"$out" 2>&1 || rc=$?
            ;;
        libfabric)
            env -u LD_LIBRARY_PATH FI_TCP_IFACE=lo timeout "$TIMEOUT" \
                "$WORK/coll_latency" "$(if [ "$prov" = tcp ]; then echo "tcp;ofi_rxm"; else echo "$prov"; fi)" "$COLL_ITERS" >"$out" 2>&1 || rc=$?
            ;;
        vader)
            env -u LD_LIBRARY_PATH timeout "$TIMEOUT" \
                mpirun --allow-run-as-root -np 2 --bind-to core --map-by core \
                --mca pml ob1 --mca btl vader,self --mca oob_tcp_if_include lo \
                "$WORK/mpi_coll" "$COLL_ITERS" >"$out" 2>&1 || rc=$?
            ;;
    esac
    for op in $COLL_OPS; do
        line="$(awk -v o="$op" '$1 == "op" && $2 == o { print $6, $8 }' "$out")"
        if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
            log "   coll-$tool-$prov $op run $round: FAILED (rc=$rc)"
            sed 's/^/     /' "$out" >&2 || true
            echo "$round rc=$rc" >>"$WORK/coll-$tool-$prov-$op.fail"
            FAILURES=$((FAILURES + 1))
            continue
        fi
        printf '%s %s\n' "$line" "$round" >>"$WORK/coll-$tool-$prov-$op.dat"
        log "   $(printf '%-34s run %d: median %8s p99 %8s usec' "coll-$tool-$prov-$op" "$round" $line)"
    done
}

# run_bw TOOL PROV OP SIZE ROUND: one `ofi bw` (TOOL ofi) or fi_rma_bw (TOOL
# libfabric) server/client pair, pinned like the others; appends
# "usec mbs round oneway" to $WORK/bw-TOOL-PROV-OP-SIZE.dat (oneway: the
# one-way line of ofi bw -o atomic -W 1, else "-").
run_bw() {
    local tool="$1" prov="$2" op="$3" size="$4" round="$5" iters window tag out
    local bin flags
    if [ "$op" = atomic ]; then
        iters="$ATOMIC_ITERS"
        window=1
    else
        iters="${BW_ITERS:-$(iters_for "$size")}"
        window="$BW_WINDOW"
    fi
    tag="bw-$tool-$prov-$op-$size"
    out="$WORK/$tag.r$round"
    fresh_port
    local server_end=() client_end=()
    if [ "$tool" = ofi ]; then
        bin=("$OFI_BIN" bw)
        server_end=(-B "$PORT")
        client_end=(-P "$PORT" 127.0.0.1)
    else
        bin=("$FI_RMA_BW")
        # fabtests: -E=PORT exchanges addresses over a socket on PORT.
        server_end=("-E=$PORT")
        client_end=("-E=$PORT" 127.0.0.1)
    fi
    flags=(-p "$prov" -o "$op" -S "$size" -I "$iters" -W "$window")

    if ! start_server "$out.server" "$tag run $round" \
        taskset -c "$SERVER_CPU" "${bin[@]}" "${flags[@]}" "${server_end[@]}"; then
        echo "$round server did not listen" >>"$WORK/$tag.fail"
        return 0
    fi
    finish_pair "$out" taskset -c "$CLIENT_CPU" "${bin[@]}" "${flags[@]}" "${client_end[@]}"

    # The row under the header line naming MB/sec, by column name (ofi bw
    # prints fi_pingpong's columns, fabtests its own).
    local vals usec mbs oneway
    vals="$(awk '{ for (i = 1; i <= NF; i++) if ($i == "MB/sec") { m = i; for (j = 1; j <= NF; j++) if ($j == "usec/xfer") u = j; getline; print $u, $m; exit } }' "$out.client")"
    usec="${vals% *}"
    mbs="${vals#* }"
    oneway="$(awk '/one-way/ { for (i = 2; i <= NF; i++) if ($i == "usec") v = $(i - 1) } END { print (v == "" ? "-" : v) }' "$out.client")"
    case "$usec$mbs" in *[!0-9.]* | "") usec="" ;; esac
    if [ "$CRC" -ne 0 ] || [ "$SRC" -ne 0 ] || [ -z "$usec" ] || { [ "$op" = atomic ] && [ "$oneway" = - ]; }; then
        log "   $tag run $round: FAILED (client rc=$CRC, server rc=$SRC; 124 = timeout)"
        sed 's/^/     client: /' "$out.client" | tail -5 >&2 || true
        sed 's/^/     server: /' "$out.server" | tail -5 >&2 || true
        {
            printf '%s client rc=%s server rc=%s (124 = timeout);' "$round" "$CRC" "$SRC"
            printf ' client: %s;' "$(grep -v 'MB/sec' "$out.client" | tail -2 | tr '\n' ' ')"
            printf ' server: %s\n' "$(tail -2 "$out.server" | tr '\n' ' ')"
        } >>"$WORK/$tag.fail"
        FAILURES=$((FAILURES + 1))
        return 0
    fi
    # usec/xfer with more digits than the 2 printed: size / MB/sec.
    usec="$(awk -v s="$size" -v u="$usec" -v b="$mbs" 'BEGIN { if (s > 0 && b > 0) printf "%.4f\n", s / b; else print u }')"
    printf '%s %s %s %s\n' "$usec" "$mbs" "$round" "$oneway" >>"$WORK/$tag.dat"
    log "   $(printf '%-30s run %d: %10s usec/xfer %12s MB/sec%s' "$tag" "$round" "$usec" "$mbs" \
        "$([ "$oneway" = - ] || echo ", one-way $oneway usec")")"
}

# --- runs ---------------------------------------------------------------------

# Configurations: PROV:EP:MODE:SIZE.
CONFIGS=()
for p in $PROVIDERS; do
    [ "$OP_SEND" = 1 ] || break
    case "$p" in
        shm)
            for s in $SIZES; do CONFIGS+=("shm:rdm:msg:$s"); done
            for s in $TAGGED_SIZES; do CONFIGS+=("shm:rdm:tagged:$s"); done
            ;;
        tcp)
            for e in $TCP_EPS; do
                for s in $TCP_SIZES; do CONFIGS+=("tcp:$e:msg:$s"); done
            done
            ;;
        udp)
            for e in $UDP_EPS; do
                for s in $UDP_SIZES; do
                    # A DGRAM message is one datagram.
                    if [ "$e" = rdm ] || [ "$s" -le 60000 ]; then CONFIGS+=("udp:$e:msg:$s"); fi
                done
            done
            ;;
    esac
done
# One-sided configurations: PROV:OP:SIZE.
# A provider whose offers lack the capability gets no row (a note instead).
BW_CONFIGS=()
NO_CAP=""
offers() { # PROV CAP: does ofi offer an RDM endpoint with CAP on PROV?
    "$OFI_BIN" info -p "$1" -c "$2" -t FI_EP_RDM 2>/dev/null | grep -q '^provider:'
}
for p in $PROVIDERS; do
    if [ "$OP_WRITE" = 1 ]; then
        if offers "$p" FI_RMA; then BW_CONFIGS+=("$p:write:$BW_SIZE"); else NO_CAP="$NO_CAP $p:write:FI_RMA"; fi
    fi
    if [ "$OP_ATOMIC" = 1 ] && [ "$p" = shm ]; then
        if offers shm FI_ATOMIC; then BW_CONFIGS+=("shm:atomic:8"); else NO_CAP="$NO_CAP shm:atomic:FI_ATOMIC"; fi
    fi
done
for n in $NO_CAP; do
    IFS=: read -r prov op cap <<<"$n"
    log "note: ofi's $prov offers no $cap yet: no $op row for $prov"
done
COLL_PROVS=""
if [ "$OP_COLL" = 1 ]; then
    # hybrid (the default RDM offer) has collective rows only (COLL_HYBRID=1).
    for p in $PROVIDERS $([ "${COLL_HYBRID:-0}" = 1 ] && echo hybrid); do
        if "$OFI_BIN" info -p "$p" -c FI_COLLECTIVE -t FI_EP_RDM 2>/dev/null | grep -q '^provider:'; then
            COLL_PROVS="$COLL_PROVS $p"
        else
            log "note: ofi's $p offers no FI_COLLECTIVE: no collective rows for $p"
        fi
    done
fi
[ "${#CONFIGS[@]}" -gt 0 ] || [ "${#BW_CONFIGS[@]}" -gt 0 ] || [ -n "$COLL_PROVS" ] || die "nothing to run: no sizes or operations for the chosen providers"
HAVE_RMA_BW=0
if [ "$OP_WRITE" = 1 ]; then
    if command -v "$FI_RMA_BW" >/dev/null 2>&1; then
        HAVE_RMA_BW=1
    else
        log "note: $FI_RMA_BW not installed (Debian's libfabric-bin does not ship fabtests): ofi bw write rows only"
    fi
fi

# Share of the cpus busy over one second (other work perturbs the numbers).
cpu_busy() {
    local a b
    a="$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)"
    sleep 1
    b="$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9, $5 + $6 }' /proc/stat)"
    awk -v a="$a" -v b="$b" 'BEGIN { split(a, x, " "); split(b, y, " ");
        busy = y[1] - x[1]; idle = y[2] - x[2];
        if (busy + idle > 0) printf "%.0f%%\n", 100 * busy / (busy + idle); else print "?" }'
}
# Waits (up to QUIET_WAIT seconds) for a second with the cpus under 10 %
# busy; returns 1 if none came.
wait_quiet() {
    local t0=$SECONDS b
    while :; do
        b="$(cpu_busy 2>/dev/null || echo '?')"
        case "$b" in [0-9]%) return 0 ;; esac
        if [ $((SECONDS - t0)) -ge "$QUIET_WAIT" ]; then
            log "warning: cpus still $b busy after ${QUIET_WAIT}s: other processes will perturb this round"
            return 1
        fi
    done
}
BUSY_ROUNDS=0
REFS=""
[ "$HAS_SHM" = 0 ] || REFS="memcpy $MEMCPY_SIZE B"
[ "$HAS_TCP" = 0 ] || REFS="${REFS:+$REFS; }raw TCP ping-pong 8 B and stream 1 MiB"
[ "$HAS_UDP" = 0 ] || REFS="${REFS:+$REFS; }raw UDP ping-pong 8 B and stream of 64000 B datagrams"
ALL_CONFIGS=("${CONFIGS[@]}" "${BW_CONFIGS[@]}")
log "== $RUNS rounds of: ${ALL_CONFIGS[*]}; references: $REFS"
for round in $(seq 1 "$RUNS"); do
    log "-- round $round"
    wait_quiet || BUSY_ROUNDS=$((BUSY_ROUNDS + 1))
    for c in "${CONFIGS[@]}"; do
        IFS=: read -r prov ep mode size <<<"$c"
        if [ $((round % 2)) -eq 1 ]; then order="ofi libfabric"; else order="libfabric ofi"; fi
        if [ "$CAPI" = 1 ]; then
            if [ $((round % 2)) -eq 1 ]; then order="$order capi"; else order="capi $order"; fi
        fi
        for tool in $order; do run_one "$tool" "$prov" "$ep" "$mode" "$size" "$round"; done
    done
    for c in "${BW_CONFIGS[@]}"; do
        IFS=: read -r prov op size <<<"$c"
        if [ "$op" = write ] && [ "$HAVE_RMA_BW" = 1 ]; then
            if [ $((round % 2)) -eq 1 ]; then order="ofi libfabric"; else order="libfabric ofi"; fi
        else
            order="ofi"
        fi
        for tool in $order; do run_bw "$tool" "$prov" "$op" "$size" "$round"; done
    done
    for size in $HYBRID_SIZES; do
        # The default RDM offer (hybrid) against -p shm, ofi pingpong both.
        if [ $((round % 2)) -eq 1 ]; then order="default shm"; else order="shm default"; fi
        for prov in $order; do run_one hyb "$prov" rdm msg "$size" "$round"; done
    done
    for prov in $COLL_PROVS; do
        ref=""
        if { [ "$prov" = shm ] || [ "$prov" = hybrid ]; } && [ "$COLL_MPI" = 1 ]; then ref=vader; fi
        if [ "$prov" = tcp ]; then ref=libfabric; fi
        if [ $((round % 2)) -eq 1 ]; then order="ofi $ref"; else order="$ref ofi"; fi
        for tool in $order; do run_coll "$tool" "$prov" "$round"; done
    done
    if [ "$MPI" = 1 ]; then
        if [ $((round % 2)) -eq 1 ]; then order="capi libfabric"; else order="libfabric capi"; fi
        for tool in $order; do run_mpi "$tool" "$round"; done
        if [ $((round % 2)) -eq 1 ]; then order="default vader"; else order="vader default"; fi
        for tool in $order; do run_mpi "$tool" "$round"; done
    fi
    if [ "$HAS_TCP" = 1 ]; then
        run_raw pingpong "$round"
        run_raw stream "$round"
    fi
    if [ "$HAS_UDP" = 1 ]; then
        run_raw pingpong "$round" udp
        run_raw stream "$round" udp
    fi
    if [ "$HAS_SHM" = 1 ]; then
        if m="$(taskset -c "$CLIENT_CPU" "$WORK/memcpy" "$MEMCPY_SIZE" | awk '{ print $4 }')" && [ -n "$m" ]; then
            echo "$m" >>"$WORK/memcpy.dat"
            log "   memcpy $MEMCPY_SIZE B: $m MB/sec"
        else
            log "   memcpy: FAILED"
            FAILURES=$((FAILURES + 1))
        fi
    fi
done

# --- report -------------------------------------------------------------------

range() { # FILE -> "min - max" of the latency column
    if [ -s "$1" ]; then sort -g "$1" | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo " - " hi }'; else echo "-"; fi
}

paired() { # OFI_FILE LF_FILE -> ofi/lf latency ratio per round, in round order
    if [ -s "$1" ] && [ -s "$2" ]; then
        awk 'NR == FNR { o[$3] = $1; next } ($3 in o) && $1 > 0 { printf "%s%.2f", sep, o[$3] / $1; sep = " " } END { print "" }' "$1" "$2"
    else
        echo "-"
    fi
}

col() { # FILE COLUMN -> median of that column (latency: 4 decimals, MB/sec: 2)
    local f="%.4f"
    [ "$2" != 2 ] || f="%.2f"
    if [ -s "$1" ]; then awk -v c="$2" '{ print $c }' "$1" | median "$f"; else echo "-"; fi
}

MEMCPY_MED="$(if [ -s "$WORK/memcpy.dat" ]; then median "%.2f" <"$WORK/memcpy.dat"; else echo -; fi)"
RAW_PP_MED="$(col "$WORK/raw-pingpong.dat" 1)"
RAW_ST_MED="$(col "$WORK/raw-stream.dat" 2)"
RAWU_PP_MED="$(col "$WORK/rawudp-pingpong.dat" 1)"
RAWU_ST_MED="$(col "$WORK/rawudp-stream.dat" 2)"
GIT_REV="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"
# Only changes that reach the ofi binary count (tests and scripts do not).
if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no -- crates Cargo.toml Cargo.lock 2>/dev/null || true)" ]; then
    GIT_REV="$GIT_REV (with uncommitted changes under crates/)"
fi
LF_VER="$(fi_info --version 2>/dev/null | awk '/^libfabric:/ { print $2 }' || true)"
CPU="$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)"
# What fi_pingpong -p tcp -e rdm runs (Debian's 1.17: tcp;ofi_rxm).
LF_TCP_RDM="$(fi_info -p tcp -t FI_EP_RDM 2>/dev/null | awk '/provider:/ { print $2; exit }' || true)"

# What fi_pingpong -p udp -e rdm runs (Debian's 1.17: udp;ofi_rxd).
LF_UDP_RDM="$(fi_info -p udp -t FI_EP_RDM 2>/dev/null | awk '/provider:/ { print $2; exit }' || true)"

provider_label() { # PROV EP -> how libfabric names what fi_pingpong runs
    if [ "$1" = tcp ] && [ "$2" = rdm ]; then
        echo "${LF_TCP_RDM:-tcp;ofi_rxm}"
    elif [ "$1" = udp ] && [ "$2" = rdm ]; then
        echo "${LF_UDP_RDM:-udp;ofi_rxd}"
    else
        echo "$1"
    fi
}

echo
echo "ofi pingpong vs libfabric ${LF_VER:-?} fi_pingpong; providers: $PROVIDERS"
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); ofi $GIT_REV"
echo "machine: $(nproc) cpus (${CPU:-unknown cpu}), Linux $(uname -r); server on cpu $SERVER_CPU, client on cpu $CLIENT_CPU"
echo "rounds that started while other processes kept the cpus busy: $BUSY_ROUNDS of $RUNS"
echo "command: RUNS=$RUNS PROVIDERS=\"$PROVIDERS\" OPS=\"$OPS\" COLL_ITERS=$COLL_ITERS SIZES=\"$SIZES\" TAGGED_SIZES=\"$TAGGED_SIZES\" TCP_SIZES=\"$TCP_SIZES\" TCP_EPS=\"$TCP_EPS\" UDP_SIZES=\"$UDP_SIZES\" UDP_EPS=\"$UDP_EPS\" bench/compare.sh"
echo "medians of $RUNS runs each; MB/sec as fi_pingpong prints it (MB = 10^6 bytes); usec/xfer = size / MB/sec"
echo "(the same number fi_pingpong prints, with more digits than its 2 decimals)"
declare -A LAT BW BWO LATO HYB_LAT
if [ "${#CONFIGS[@]}" -gt 0 ]; then
    echo
    echo "| provider | ep | mode | size | iters | ofi usec/xfer | libfabric usec/xfer | latency ofi/lf | ofi MB/sec | libfabric MB/sec | bandwidth ofi/lf |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in "${CONFIGS[@]}"; do
        IFS=: read -r prov ep mode size <<<"$c"
        f="$prov-$ep-$mode-$size"
        ou="$(col "$WORK/ofi-$f.dat" 1)"
        lu="$(col "$WORK/libfabric-$f.dat" 1)"
        ob="$(col "$WORK/ofi-$f.dat" 2)"
        lb="$(col "$WORK/libfabric-$f.dat" 2)"
        LAT[$c]="$(ratio "$ou" "$lu")"
        BW[$c]="$(ratio "$ob" "$lb")"
        BWO[$c]="$ob"
        LATO[$c]="$ou"
        echo "| $prov (lf: $(provider_label "$prov" "$ep")) | $ep | $mode | $(human "$size") | $(iters_for "$size") | $ou | $lu | ${LAT[$c]} | $ob | $lb | ${BW[$c]} |"
    done
    echo
    echo "spread: usec/xfer min - max over the runs, and the latency ratio ofi/libfabric of each round"
    echo "(each round runs the two tools back to back, so its ratio compares like with like):"
    for c in "${CONFIGS[@]}"; do
        IFS=: read -r prov ep mode size <<<"$c"
        f="$prov-$ep-$mode-$size"
        echo "- $prov $ep $mode $(human "$size"): ofi $(range "$WORK/ofi-$f.dat"), libfabric $(range "$WORK/libfabric-$f.dat"); per round: $(paired "$WORK/ofi-$f.dat" "$WORK/libfabric-$f.dat")"
    done
fi
declare -A CAPI_LAT
if [ "$CAPI" = 1 ] && [ "${#CONFIGS[@]}" -gt 0 ]; then
    echo
    echo "the C ABI: Debian's fi_pingpong, unchanged, on ofi's libfabric.so.1 (LD_LIBRARY_PATH) and on Debian's libfabric, same rounds"
    echo
    echo "| provider | ep | mode | size | fi_pingpong on ofi usec/xfer | on libfabric usec/xfer | latency ofi/lf | on ofi MB/sec | on libfabric MB/sec | bandwidth ofi/lf |"
    echo "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"
    for c in "${CONFIGS[@]}"; do
        IFS=: read -r prov ep mode size <<<"$c"
        f="$prov-$ep-$mode-$size"
        cu="$(col "$WORK/capi-$f.dat" 1)"
        lu="$(col "$WORK/libfabric-$f.dat" 1)"
        cb="$(col "$WORK/capi-$f.dat" 2)"
        lb="$(col "$WORK/libfabric-$f.dat" 2)"
        CAPI_LAT[$c]="$(ratio "$cu" "$lu")"
        echo "| $prov (lf: $(provider_label "$prov" "$ep")) | $ep | $mode | $(human "$size") | $cu | $lu | ${CAPI_LAT[$c]} | $cb | $lb | $(ratio "$cb" "$lb") |"
    done
    echo
    echo "per round, latency ratio of fi_pingpong on ofi / on libfabric:"
    for c in "${CONFIGS[@]}"; do
        IFS=: read -r prov ep mode size <<<"$c"
        f="$prov-$ep-$mode-$size"
        echo "- $prov $ep $mode $(human "$size"): on ofi $(range "$WORK/capi-$f.dat"); per round: $(paired "$WORK/capi-$f.dat" "$WORK/libfabric-$f.dat")"
    done
fi
# mpi_rows A B RATIOS: one table row per MPI size, tool A's median one-way
# usec against tool B's (from $WORK/mpi-TOOL-SIZE.dat), their ratio (also
# stored in the associative array named RATIOS, by size) and the per-round
# ratios.
mpi_rows() {
    local a="$1" b="$2" size mo ml per
    local -n ratios="$3"
    for size in $MPI_SIZES; do
        mo="$(if [ -s "$WORK/mpi-$a-$size.dat" ]; then awk '{ print $1 }' "$WORK/mpi-$a-$size.dat" | median "%.4f"; else echo -; fi)"
        ml="$(if [ -s "$WORK/mpi-$b-$size.dat" ]; then awk '{ print $1 }' "$WORK/mpi-$b-$size.dat" | median "%.4f"; else echo -; fi)"
        ratios[$size]="$(ratio "$mo" "$ml")"
        per="-"
        if [ -s "$WORK/mpi-$a-$size.dat" ] && [ -s "$WORK/mpi-$b-$size.dat" ]; then
            per="$(awk 'NR == FNR { o[$2] = $1; next } ($2 in o) && $1 > 0 { printf "%s%.2f", sep, o[$2] / $1; sep = " " } END { print "" }' \
                "$WORK/mpi-$a-$size.dat" "$WORK/mpi-$b-$size.dat")"
        fi
        echo "| $(human "$size") | $mo | $ml | ${ratios[$size]} | $per |"
    done
}

declare -A MPI_LAT MPI_VADER
if [ "$MPI" = 1 ]; then
    echo
    echo "Open MPI (Debian's, pml cm + mtl ofi, provider tcp on loopback, 2 ranks bound to cpus 0 and 1): bench/mpi_latency.c, $MPI_ITERS round trips per run, one-way usec (half the mean round trip), on ofi's libfabric.so.1 and on Debian's libfabric, same rounds"
    echo
    echo "| size | on ofi usec | on libfabric usec | latency ofi/lf | per round |"
    echo "|---:|---:|---:|---:|---|"
    mpi_rows capi libfabric MPI_LAT
    echo
    echo "Open MPI, both ranks on this node: pml cm + mtl ofi with no provider named, on ofi's libfabric.so.1 (its default RDM offer), against Open MPI's own pml ob1 + btl vader,self; same binary, same rounds"
    echo
    echo "| size | cm + ofi (default offer) usec | ob1 + vader usec | latency ofi/vader | per round |"
    echo "|---:|---:|---:|---:|---|"
    mpi_rows default vader MPI_VADER
fi
ATOMIC_ONEWAY="-"
if [ "${#BW_CONFIGS[@]}" -gt 0 ] || [ -n "$NO_CAP" ]; then
    echo
    echo "one-sided: ofi bw, client streaming to the server's registered region (MB/sec as above)"
    for n in $NO_CAP; do
        IFS=: read -r prov op cap <<<"$n"
        echo "- $prov $op: not measured, ofi's $prov offers no $cap yet"
    done
    if [[ " ${BW_CONFIGS[*]} " == *:write:* ]]; then
        if [ "$HAVE_RMA_BW" = 1 ]; then lf_note="$FI_RMA_BW -o write, same flags"; else lf_note="$FI_RMA_BW not installed"; fi
        echo
        echo "| provider | operation | size | window | iters | ofi MB/sec | libfabric MB/sec ($lf_note) | bandwidth ofi/lf | reference (same run) | reference MB/sec | ofi/reference |"
        echo "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"
    fi
    for c in "${BW_CONFIGS[@]}"; do
        IFS=: read -r prov op size <<<"$c"
        [ "$op" = write ] || continue
        f="$prov-$op-$size"
        ob="$(col "$WORK/bw-ofi-$f.dat" 2)"
        lb="$(col "$WORK/bw-libfabric-$f.dat" 2)"
        if [ "$prov" = shm ]; then
            ref="single-thread memcpy $(human "$MEMCPY_SIZE")"
            refv="$MEMCPY_MED"
        elif [ "$prov" = udp ]; then
            ref="raw UDP stream, 64000 B datagrams"
            refv="$RAWU_ST_MED"
        else
            ref="raw TCP stream, 1 MiB writes"
            refv="$RAW_ST_MED"
        fi
        BWO[$c]="$ob"
        echo "| $prov | fi_write | $(human "$size") | $BW_WINDOW | ${BW_ITERS:-$(iters_for "$size")} | $ob | $lb | $(ratio "$ob" "$lb") | $ref | $refv | $(ratio "$ob" "$refv") |"
    done
    for c in "${BW_CONFIGS[@]}"; do
        IFS=: read -r prov op size <<<"$c"
        [ "$op" = atomic ] || continue
        f="bw-ofi-$prov-$op-$size"
        ATOMIC_ONEWAY="$(col "$WORK/$f.dat" 4)"
        echo
        echo "- $prov $(human "$size") fetch-add (fi_fetch_atomic FI_UINT64 FI_SUM, one in flight, $ATOMIC_ITERS per run):" \
            "round trip $(col "$WORK/$f.dat" 1) usec, one-way (half) $ATOMIC_ONEWAY usec;" \
            "one-way range $(if [ -s "$WORK/$f.dat" ]; then awk '{ print $4 }' "$WORK/$f.dat" | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { print lo " - " hi }'; else echo -; fi)"
    done
fi
declare -A COLL_RATIO COLL_TAIL
if [ -n "$COLL_PROVS" ]; then
    echo
    echo "collectives: bench/coll_latency.c, 2 ranks pinned to cpus 0 and 1, each operation timed one by one ($COLL_ITERS per run; broadcast timed at its root); medians over the runs of each run's median and p99 (usec); reference: shm against Open MPI's ob1 + vader (bench/mpi_coll.c), tcp against Debian's libfabric tcp;ofi_rxm (the same binary), same rounds"
    echo
    echo "| provider | operation | ofi median | ofi p99 | reference | reference median | reference p99 | ofi/reference | per round |"
    echo "|---|---|---:|---:|---|---:|---:|---:|---|"
    for prov in $COLL_PROVS; do
        ref="-"
        refname="none"
        if { [ "$prov" = shm ] || [ "$prov" = hybrid ]; } && [ "$COLL_MPI" = 1 ]; then ref=vader; refname="Open MPI ob1 + vader"; fi
        if [ "$prov" = tcp ]; then ref=libfabric; refname="libfabric tcp;ofi_rxm"; fi
        for op in $COLL_OPS; do
            f="$WORK/coll-ofi-$prov-$op.dat"
            rf="$WORK/coll-$ref-$prov-$op.dat"
            om="$(col "$f" 1)"
            op99="$(col "$f" 2)"
            rm_="$(col "$rf" 1)"
            rp99="$(col "$rf" 2)"
            COLL_RATIO[$prov:$op]="$(ratio "$om" "$rm_")"
            COLL_TAIL[$prov:$op]="$(ratio "$op99" "$om")"
            per="-"
            if [ -s "$f" ] && [ -s "$rf" ]; then
                per="$(awk 'NR == FNR { o[$3] = $1; next } ($3 in o) && $1 > 0 { printf "%s%.2f", sep, o[$3] / $1; sep = " " } END { print "" }' "$f" "$rf")"
            fi
            echo "| $prov | $op | $om | $op99 | $refname | $rm_ | $rp99 | ${COLL_RATIO[$prov:$op]} | $per |"
        done
    done
fi
echo
NOT_MEASURED=0
for c in "${CONFIGS[@]}"; do
    IFS=: read -r prov ep mode size <<<"$c"
    for tool in ofi libfabric capi; do
        ff="$WORK/$tool-$prov-$ep-$mode-$size.fail"
        [ -s "$ff" ] || continue
        if [ "$NOT_MEASURED" = 0 ]; then echo "failed runs (medians use the successful runs only; '-' = nothing measured):"; fi
        NOT_MEASURED=1
        echo "- $tool $prov $ep $mode $(human "$size"): $(wc -l <"$ff") of $RUNS runs failed; first: $(head -1 "$ff")"
    done
done
for c in "${BW_CONFIGS[@]}"; do
    IFS=: read -r prov op size <<<"$c"
    for tool in ofi libfabric; do
        ff="$WORK/bw-$tool-$prov-$op-$size.fail"
        [ -s "$ff" ] || continue
        if [ "$NOT_MEASURED" = 0 ]; then echo "failed runs (medians use the successful runs only; '-' = nothing measured):"; fi
        NOT_MEASURED=1
        echo "- $tool bw $prov $op $(human "$size"): $(wc -l <"$ff") of $RUNS runs failed; first: $(head -1 "$ff")"
    done
done
for prov in $COLL_PROVS; do
    for tool in ofi libfabric vader; do
        for op in $COLL_OPS; do
            ff="$WORK/coll-$tool-$prov-$op.fail"
            [ -s "$ff" ] || continue
            if [ "$NOT_MEASURED" = 0 ]; then echo "failed runs (medians use the successful runs only; '-' = nothing measured):"; fi
            NOT_MEASURED=1
            echo "- $tool collectives $prov $op: $(wc -l <"$ff") of $RUNS runs failed; first: $(head -1 "$ff")"
        done
    done
done
for k in raw-pingpong raw-stream rawudp-pingpong rawudp-stream; do
    ff="$WORK/$k.fail"
    [ -s "$ff" ] || continue
    if [ "$NOT_MEASURED" = 0 ]; then echo "failed runs (medians use the successful runs only; '-' = nothing measured):"; fi
    NOT_MEASURED=1
    case "$k" in rawudp-*) what="raw UDP ${k#rawudp-}" ;; *) what="raw TCP ${k#raw-}" ;; esac
    echo "- $what: $(wc -l <"$ff") of $RUNS runs failed; first: $(head -1 "$ff")"
done
[ "$NOT_MEASURED" = 0 ] || echo
echo "physical references (medians of $RUNS, client on cpu $CLIENT_CPU):"
if [ "$HAS_SHM" = 1 ]; then
    echo "- single-thread memcpy ($(human "$MEMCPY_SIZE")): $MEMCPY_MED MB/sec"
fi
if [ "$HAS_TCP" = 1 ]; then
    echo "- raw TCP over 127.0.0.1, busy-polled 8 B ping-pong ($RAW_PP_ITERS round trips): $RAW_PP_MED usec one-way; range $(range "$WORK/raw-pingpong.dat")"
    echo "- raw TCP over 127.0.0.1, stream of 1 MiB writes ($RAW_STREAM_ITERS writes): $RAW_ST_MED MB/sec"
fi
if [ "$HAS_UDP" = 1 ]; then
    echo "- raw UDP over 127.0.0.1, busy-polled 8 B datagram ping-pong ($RAW_UDP_PP_ITERS round trips): $RAWU_PP_MED usec one-way; range $(range "$WORK/rawudp-pingpong.dat")"
    echo "- raw UDP over 127.0.0.1, stream of 64000 B datagrams ($RAW_UDP_STREAM_ITERS sent, bytes received counted): $RAWU_ST_MED MB/sec;" \
        "lost per run: $(if ls "$WORK"/rawudp-stream.r*.client >/dev/null 2>&1; then awk '/delivered/ { for (i = 1; i <= NF; i++) if ($i ~ /^\(/) { sub(/^\(/, "", $i); printf "%s%s", sep, $i; sep = " " } } END { print "" }' "$WORK"/rawudp-stream.r*.client; else echo -; fi)"
fi
echo

MISSED=0
target() { # NAME VALUE OP GOAL
    local name="$1" v="$2" op="$3" goal="$4" res
    if [ "$v" = "-" ]; then
        res="not measured"
    elif awk -v v="$v" -v g="$goal" -v op="$op" 'BEGIN { exit !((op == "<=") ? v <= g : v >= g) }'; then
        res="met"
    else
        res="MISSED"
        MISSED=$((MISSED + 1))
    fi
    echo "| $name | $v | $op $goal | $res |"
}

REF_NOTES=()
echo "| target | measured | goal | result |"
echo "|---|---:|---:|---|"
if [ "$HAS_SHM" = 1 ] && [ "$OP_SEND" = 1 ]; then
    target "shm rdm 8 B latency, ofi/libfabric" "${LAT[shm:rdm:msg:8]:--}" "<=" 0.70
    target "shm rdm 4 KiB latency, ofi/libfabric" "${LAT[shm:rdm:msg:4096]:--}" "<=" 0.80
    target "shm rdm 1 MiB bandwidth, ofi/libfabric" "${BW[shm:rdm:msg:1048576]:--}" ">=" 1.20
    mc_ratio="-"
    if [ -n "${BWO[shm:rdm:msg:1048576]:-}" ] && [ "$MEMCPY_SIZE" = 1048576 ]; then
        mc_ratio="$(ratio "${BWO[shm:rdm:msg:1048576]}" "$MEMCPY_MED")"
    fi
    target "shm rdm 1 MiB bandwidth, ofi/memcpy" "$mc_ratio" ">=" 0.80
fi
if [ "$HAS_SHM" = 1 ] && [ "$OP_ATOMIC" = 1 ]; then
    target "shm 8 B fetch-and-add latency, one-way usec" "$ATOMIC_ONEWAY" "<=" 1.0
fi
if [ "$HAS_TCP" = 1 ] && [ "$OP_SEND" = 1 ]; then
    target "tcp RDM 8 B latency, ofi/libfabric $(provider_label tcp rdm)" "${LAT[tcp:rdm:msg:8]:--}" "<=" 0.75
    target "tcp MSG 8 B latency, ofi/libfabric tcp" "${LAT[tcp:msg:msg:8]:--}" "<=" 1.00
    target "tcp RDM 1 MiB bandwidth, ofi/libfabric $(provider_label tcp rdm)" "${BW[tcp:rdm:msg:1048576]:--}" ">=" 1.20
    target "tcp RDM 1 MiB bandwidth, ofi/raw TCP stream" "$(ratio "${BWO[tcp:rdm:msg:1048576]:--}" "$RAW_ST_MED")" ">=" 0.70
    # After the table (a line inside it would end it).
    REF_NOTES+=("for reference (no target): tcp 8 B one-way latency over the raw busy-polled socket ping-pong: ofi RDM $(ratio "${LATO[tcp:rdm:msg:8]:--}" "$RAW_PP_MED")x, ofi MSG $(ratio "${LATO[tcp:msg:msg:8]:--}" "$RAW_PP_MED")x")
fi
if [ "$HAS_UDP" = 1 ] && [ "$OP_SEND" = 1 ]; then
    target "udp DGRAM 8 B latency, ofi/libfabric udp" "${LAT[udp:dgram:msg:8]:--}" "<=" 1.00
    target "udp RDM 8 B latency, ofi/libfabric $(provider_label udp rdm)" "${LAT[udp:rdm:msg:8]:--}" "<=" 0.50
    target "udp RDM 1 MiB bandwidth, ofi/libfabric $(provider_label udp rdm)" "${BW[udp:rdm:msg:1048576]:--}" ">=" 5.00
fi
if [ "$HAS_UDP" = 1 ] && [ "$OP_WRITE" = 1 ]; then
    target "udp RMA write $(human "$BW_SIZE") bandwidth, ofi/raw UDP stream" "$(ratio "${BWO[udp:write:$BW_SIZE]:--}" "$RAWU_ST_MED")" ">=" 0.50
fi
if [ "$HAS_UDP" = 1 ] && [ "$OP_SEND" = 1 ]; then
    REF_NOTES+=("for reference (no target): udp 8 B one-way latency over the raw busy-polled datagram ping-pong: ofi DGRAM $(ratio "${LATO[udp:dgram:msg:8]:--}" "$RAWU_PP_MED")x, ofi RDM $(ratio "${LATO[udp:rdm:msg:8]:--}" "$RAWU_PP_MED")x")
fi
if [ "$HAS_TCP" = 1 ] && [[ " $COLL_PROVS " == *" tcp "* ]]; then
    # A barrier of two members needs one message each way, at once: the
    # one-way latency of the raw socket is its floor.
    REF_NOTES+=("for reference (no target): tcp barrier median over the raw busy-polled socket's one-way latency (a two-member barrier's floor): ofi $(ratio "$(col "$WORK/coll-ofi-tcp-barrier.dat" 1)" "$RAW_PP_MED")x, libfabric tcp;ofi_rxm $(ratio "$(col "$WORK/coll-libfabric-tcp-barrier.dat" 1)" "$RAW_PP_MED")x")
fi
for prov in $COLL_PROVS; do
    for op in $COLL_OPS; do
        if { [ "$prov" = shm ] || [ "$prov" = hybrid ]; } && [ "$COLL_MPI" = 1 ]; then
            target "$prov $op median, ofi/Open MPI ob1 + vader" "${COLL_RATIO[$prov:$op]:--}" "<=" 1.50
        elif [ "$prov" = tcp ]; then
            target "tcp $op median, ofi/libfabric tcp;ofi_rxm" "${COLL_RATIO[$prov:$op]:--}" "<=" 0.50
        fi
        target "$prov $op p99/median (ofi)" "${COLL_TAIL[$prov:$op]:--}" "<=" 5.00
    done
done
for n in "${REF_NOTES[@]}"; do
    echo
    echo "$n"
done
if [ -n "$HYBRID_SIZES" ]; then
    echo
    echo "the default RDM offer (no provider named: ofi's hybrid, shm to this node's peers) against -p shm, both ofi pingpong -e rdm, same rounds:"
    echo
    echo "| size | default offer usec/xfer | -p shm usec/xfer | default/shm | per round |"
    echo "|---:|---:|---:|---:|---|"
    for size in $HYBRID_SIZES; do
        du="$(col "$WORK/hyb-default-rdm-msg-$size.dat" 1)"
        su="$(col "$WORK/hyb-shm-rdm-msg-$size.dat" 1)"
        HYB_LAT[$size]="$(ratio "$du" "$su")"
        echo "| $(human "$size") | $du | $su | ${HYB_LAT[$size]} | $(paired "$WORK/hyb-default-rdm-msg-$size.dat" "$WORK/hyb-shm-rdm-msg-$size.dat") |"
    done
    echo
    echo "| target (default offer) | measured | goal | result |"
    echo "|---|---:|---:|---|"
    for size in $HYBRID_SIZES; do
        target "default RDM offer $(human "$size") latency, hybrid/shm" "${HYB_LAT[$size]:--}" "<=" 1.10
    done
fi
if [ "$CAPI" = 1 ] && [ "$OP_SEND" = 1 ]; then
    echo
    echo "| target (C ABI: the same fi_pingpong binary) | measured | goal | result |"
    echo "|---|---:|---:|---|"
    [ "$HAS_SHM" = 0 ] || target "shm rdm 8 B latency, on ofi/on libfabric" "${CAPI_LAT[shm:rdm:msg:8]:--}" "<=" 0.80
    [ "$HAS_TCP" = 0 ] || target "tcp rdm 8 B latency, on ofi/on libfabric $(provider_label tcp rdm)" "${CAPI_LAT[tcp:rdm:msg:8]:--}" "<=" 0.80
    [ "$MPI" = 0 ] || target "Open MPI cm + ofi MTL over tcp, 8 B latency, on ofi/on libfabric" "${MPI_LAT[8]:--}" "<=" 1.00
    [ "$MPI" = 0 ] || target "Open MPI cm + ofi MTL on the default offer, 8 B latency, /ob1 + vader" "${MPI_VADER[8]:--}" "<=" 2.00
fi
echo

if [ "$FAILURES" -gt 0 ]; then
    log "compare.sh: $FAILURES run(s) failed; medians use the successful runs only"
    exit 1
fi
if [ "$STRICT" = 1 ] && [ "$MISSED" -gt 0 ]; then
    log "compare.sh: $MISSED target(s) missed (STRICT=1)"
    exit 1
fi
exit 0
