#!/usr/bin/env bash
# scripts/test.sh: the one test command for the whole ofi workspace.
#
# Usage:
#   scripts/test.sh            # from any directory; CI runs it through .ci/run
#   FAIL_FAST=1 scripts/test.sh
#
# Stages, in order (each under a timeout; the script goes on after a failed
# stage unless FAIL_FAST=1, so one run reports every failure):
#   deps       install missing Debian packages (libfabric-bin: fi_info and
#              fi_pingpong, used by comparison tests and run on ofi's
#              libfabric.so.1; libfabric-dev: the C headers the C ABI tests
#              and the C example compile against; openmpi-bin and
#              libopenmpi-dev: mpirun and mpicc for the Open MPI client
#              tests; gcc; util-linux for taskset; qemu-utils, libnbd-bin,
#              fio and nbdkit: the NBD clients and reference server of the
#              storage tests) with apt-get, running
#              `apt-get update` once and only if something must be
#              installed; as root directly, otherwise through sudo; adds the
#              rustfmt and clippy components with rustup when they are
#              missing
#   sh         bash -n over every shell script (scripts/, bench/, .ci/): the
#              benchmarks do not run here, so a script that no longer
#              parses would otherwise go unnoticed
#   fmt        cargo fmt --all --check
#   clippy     cargo clippy --workspace --all-targets -- -D warnings (and
#              clippy::incompatible_msrv: no std item newer than rust-version)
#   doc        cargo doc --workspace --no-deps --lib, RUSTDOCFLAGS=-D warnings
#              (broken intra-doc links and the like fail)
#   msrv       cargo +VERSION check --workspace --all-targets with the
#              workspace's declared rust-version (rustup installs that
#              toolchain when missing, bounded; SKIP when it cannot)
#   build      cargo build --release --workspace
#   test       cargo test --workspace --release --no-fail-fast (every test
#              binary runs, so one run lists every failing test), less
#              ofi-capi, which has its own stage
#   conformance:hybrid-tcp  the conformance suite again with
#              FI_HYBRID_NODE=@endpoint: every hybrid endpoint is a node of
#              its own, so the hybrid offer runs on its tcp path (the test
#              stage runs it on the shm path); the other offers run as in
#              the test stage
#   conformance:hybrid-udp  the same with FI_HYBRID_NET=udp: the hybrid
#              offer's network path over ofi's udp provider instead of tcp
#   constrained-shm  the shm and hybrid provider tests, the conformance suite
#              and the storage tests again with FI_SHM_DISABLE_CMA=1 (no
#              cross-process copies: large messages and RMA data go through
#              the rings, as under Yama's ptrace_scope=1) and
#              FI_SHM_RING_SLOTS=4 (the provider pushes back with FI_EAGAIN
#              on almost every burst). It runs the release test binaries the
#              test stage built, listed by the same cargo command (which
#              then builds nothing: `cargo test -p` of these packages alone
#              would resolve ofi's features without the other members'
#              and rebuild ofi and every test on it), each binary from its
#              package's directory under a 300 s timeout, the stage under
#              CONSTRAINED_TIMEOUT. All ~40 test binaries of the four
#              packages run (unit and integration tests; doctests are not
#              rerun): 60 to 85 s in all on 2 busy cores, the longest
#              conformance's multiprocess at 16 s, so none is left out
#   loom       the loom models of the shm ring, the cooperative-copy claims
#              and the sleep/doorbell handshake (cfg loom, own target dir)
#   fuzz       every cargo-fuzz target in fuzz/ (its own workspace and target
#              dir) for FUZZ_TIME seconds each, on the saved corpus plus
#              fuzz/seeds (and fuzz/artifacts, so a saved crash is retried
#              first); fails on any crash, hang (>10 s per input) or leak.
#              Installs cargo-fuzz (cargo install --locked) when missing and
#              sets RUSTC_BOOTSTRAP=1 for it: cargo-fuzz passes -Z flags
#              (sanitizer, sancov) and only a stable toolchain is assumed
#   asan:ofi   the safe and async layers' tests (ofi's lib tests, tests/aio.rs,
#              tests/safe_rma.rs) under the address sanitizer, leak check on:
#              buffers handed to providers, dropped futures and handles
#              (RUSTC_BOOTSTRAP=1 -Zsanitizer=address on the stable
#              toolchain, own target dir; std itself is not instrumented)
#   miri:ofi   ofi's lib tests that need no provider (the slot table, the
#              buffer kinds' contract across moves, typed hints) under Miri
#              (cargo +nightly miri); SKIP when no nightly toolchain with
#              miri is installed. Provider-backed tests cannot
#              run in Miri (shared memory, level-triggered epoll)
#   example:*  cargo run --release -p ofi --features tokio,bytes --example
#              NAME, for every example in crates/ofi/examples (the async
#              ones declare required-features = ["tokio"]), and
#              cargo run --release -p ofi-storage --example NAME for every
#              example in crates/ofi-storage/examples
#   capi       the C ABI: cargo build --release -p ofi-capi (libfabric.so,
#              SONAME libfabric.so.1), then its tests, among them the real
#              clients on it: Debian's fi_info and fi_pingpong, Open MPI's
#              ofi MTL and ofi BTL (crates/ofi-capi/tests/clients.rs)
#   capi:example  builds examples/c/hello_fabric.c against the system's
#              <rdma/*.h> and links it to ofi's libfabric.so.1, then runs it
#              on shm, tcp and udp
#   capi:udp   Debian's fi_pingpong -p udp -e dgram and -e rdm (server and
#              client, data checked, loopback, two sizes each) on ofi's
#              libfabric.so.1, each side under a 20 s timeout
#   instructions  the instruction-count regression guard: bench/instructions.sh
#              --check bench/instructions.baseline (callgrind, deterministic,
#              not timed) fails when an operation costs more than 3 % over
#              its committed baseline; built with thin LTO in target/bench
#   e2e:pingpong  target/release/ofi pingpong --local -p shm -S all -I 50 -c,
#              and -p udp -e dgram / -e rdm (sizes up to 32 KiB: one
#              datagram carries a DGRAM message)
#   e2e:info      target/release/ofi info -p shm prints "provider: shm"
#
# Prints a summary (PASS, FAIL or SKIP per stage: a stage that could not run
# here says SKIP, never PASS) and, as its last line, "N passed, M failed"
# (read by CI), after a line counting the skipped stages when there are any.
# Exits 0 only when every stage passed.
#
# Environment: FAIL_FAST=1 stops at the first failed stage; STAGE_TIMEOUT
# (seconds, default 1200) bounds each cargo stage, TEST_TIMEOUT (default
# 2400) the test stage, CONSTRAINED_TIMEOUT (default 600) the
# constrained-shm stage; the end-to-end stages get
# 120 s; deps has no timeout (sudo may ask for a password); FUZZ_TIME
# (seconds per fuzz target, default 15; 0 skips the runs but still builds).
# Inherited FI_* variables are unset (the tests set the ones they need).
# shellcheck disable=SC2317 # functions are called indirectly (trap, stage)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

FAIL_FAST="${FAIL_FAST:-0}"
STAGE_TIMEOUT="${STAGE_TIMEOUT:-1200}"
# The test stage compiles every test binary in release mode before it runs
# them (most of the stage's time): its own bound.
TEST_TIMEOUT="${TEST_TIMEOUT:-2400}"
SHORT_TIMEOUT=120
# The constrained-shm stage only runs binaries the test stage built.
CONSTRAINED_TIMEOUT="${CONSTRAINED_TIMEOUT:-600}"

PASSED=0
FAILED=0
SKIPPED=0
SUMMARY=()
# The exit code a stage function returns when it could not run here (a
# missing toolchain, say): reported as SKIP, never as PASS.
SKIP_RC=77
START_ALL=$SECONDS

# stage NAME TIMEOUT CMD...: runs CMD (a command or a shell function) under
# `timeout` (which signals CMD's whole process group; TIMEOUT 0: none) and
# records the result.
stage() {
    local name="$1" limit="$2"
    export SKIP_RC
    shift 2
    local t0=$SECONDS rc=0
    printf '\n==> %s: %s\n' "$name" "$*"
    local cmd=("$@")
    if declare -F "$1" >/dev/null; then
        # A shell function runs in a child bash (timeout cannot exec a
        # function, and errexit would be off inside `fn || rc=$?`).
        cmd=(bash -c "set -euo pipefail; $(declare -f); \"\$@\"" "$name" "$@")
    fi
    if [ "$limit" = 0 ]; then
        # No timeout: stays in the foreground (sudo may need the terminal).
        "${cmd[@]}" || rc=$?
    else
        timeout --kill-after=10 "$limit" "${cmd[@]}" || rc=$?
    fi
    local dt=$((SECONDS - t0))
    if [ "$rc" -eq "$SKIP_RC" ]; then
        SKIPPED=$((SKIPPED + 1))
        SUMMARY+=("$(printf 'SKIP  %-24s %5ss' "$name" "$dt")")
        printf '<== SKIP %s (%ss)\n' "$name" "$dt"
    elif [ "$rc" -eq 0 ]; then
        PASSED=$((PASSED + 1))
        SUMMARY+=("$(printf 'PASS  %-24s %5ss' "$name" "$dt")")
        printf '<== PASS %s (%ss)\n' "$name" "$dt"
    else
        FAILED=$((FAILED + 1))
        local why="exit $rc"
        [ "$rc" -ne 124 ] || why="timed out after ${limit}s"
        SUMMARY+=("$(printf 'FAIL  %-24s %5ss  (%s)' "$name" "$dt" "$why")")
        printf '<== FAIL %s (%s, %ss)\n' "$name" "$why" "$dt"
        if [ "$FAIL_FAST" = 1 ]; then
            finish
        fi
    fi
}

finish() {
    printf '\n==== summary (%ss)\n' "$((SECONDS - START_ALL))"
    printf '%s\n' "${SUMMARY[@]}"
    [ "$SKIPPED" -eq 0 ] || printf '%d skipped (did not run here: see their SKIP lines above)\n' "$SKIPPED"
    printf '%d passed, %d failed\n' "$PASSED" "$FAILED"
    if [ "$FAILED" -eq 0 ]; then exit 0; else exit 1; fi
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        echo "need root or sudo to run: $*" >&2
        return 1
    fi
}

# --- stages -------------------------------------------------------------------

deps() {
    # command -> Debian package providing it
    local need=() pair cmd pkg
    for pair in fi_pingpong:libfabric-bin fi_info:libfabric-bin cc:gcc taskset:util-linux timeout:coreutils \
        valgrind:valgrind \
        mpirun:openmpi-bin mpicc:libopenmpi-dev \
        qemu-img:qemu-utils qemu-io:qemu-utils nbdinfo:libnbd-bin nbdcopy:libnbd-bin fio:fio nbdkit:nbdkit; do
        cmd="${pair%%:*}"
        pkg="${pair#*:}"
        if ! command -v "$cmd" >/dev/null 2>&1; then
            case " ${need[*]:-} " in *" $pkg "*) ;; *) need+=("$pkg") ;; esac
        fi
    done
    # C headers for the programs tests compile (the long double reference
    # of the atomics matrix): gcc only recommends libc6-dev.
    [ -f /usr/include/stdio.h ] || need+=(libc6-dev)
    # libfabric's headers, the layout reference of the C ABI.
    [ -f /usr/include/rdma/fabric.h ] || need+=(libfabric-dev)
    if [ "${#need[@]}" -gt 0 ]; then
        command -v apt-get >/dev/null 2>&1 || { echo "missing ${need[*]} and no apt-get" >&2; return 1; }
        echo "installing: ${need[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
    else
        echo "Debian packages: all present (libfabric-bin, libfabric-dev, openmpi-bin, libopenmpi-dev, gcc, libc6-dev, util-linux, coreutils, valgrind, qemu-utils, libnbd-bin, fio, nbdkit)"
    fi

    command -v cargo >/dev/null 2>&1 || { echo "cargo not found: install Rust (rustup, toolchain >= 1.88)" >&2; return 1; }
    local comp=()
    cargo fmt --version >/dev/null 2>&1 || comp+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || comp+=(clippy)
    if [ "${#comp[@]}" -gt 0 ]; then
        command -v rustup >/dev/null 2>&1 || { echo "missing ${comp[*]} and no rustup" >&2; return 1; }
        rustup component add "${comp[@]}"
    fi
    cargo --version
    cargo fmt --version
    cargo clippy --version
    fi_info --version | head -1
    mpirun --version | head -1
}

# Every shell script parses (bash -n).
sh_syntax() {
    local f rc=0
    for f in scripts/*.sh bench/*.sh .ci/run; do
        [ -e "$f" ] || continue
        bash -n "$f" || { echo "$f does not parse" >&2; rc=1; }
    done
    return "$rc"
}

# Each fuzz target for FUZZ_TIME seconds (built with cargo-fuzz: ASan,
# debug assertions, libFuzzer). Crash inputs land in fuzz/artifacts/TARGET;
# new coverage in fuzz/corpus/TARGET (both ignored by git).
fuzz_run() {
    local t time="${FUZZ_TIME:-15}"
    if ! cargo fuzz --version >/dev/null 2>&1; then
        echo "installing cargo-fuzz"
        cargo install cargo-fuzz --locked
    fi
    cargo fuzz --version
    # fuzz/ is its own workspace with its own target dir (never the root's).
    unset CARGO_TARGET_DIR
    export RUSTC_BOOTSTRAP=1
    cd fuzz
    cargo fuzz build
    for t in $(cargo fuzz list); do
        [ "$time" -gt 0 ] || continue
        mkdir -p "corpus/$t" "artifacts/$t"
        echo "+ cargo fuzz run $t corpus/$t seeds/$t artifacts/$t -- -max_total_time=$time -timeout=10"
        local rc=0 log="target/fuzz-$t.log"
        cargo fuzz run "$t" "corpus/$t" "seeds/$t" "artifacts/$t" -- \
            -max_total_time="$time" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
            >"$log" 2>&1 || rc=$?
        # Progress lines (NEW, REDUCE, pulse) and the recommended dictionary
        # are many and say little.
        grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse)|^"|dictionary' "$log" || true
        if [ "$rc" -ne 0 ]; then
            echo "fuzz target $t failed (exit $rc): input saved under fuzz/artifacts/$t; full log: fuzz/$log" >&2
            return 1
        fi
    done
}

# The test binaries of the shm and hybrid providers, the conformance suite
# and ofi-storage, as the test stage built them, run
# with FI_SHM_DISABLE_CMA=1 FI_SHM_RING_SLOTS=4; every binary runs, the
# failed ones are listed at the end.
constrained_shm() {
    local json line exe dir pkg rel t0 rc failed=() ran=0 root
    local pkgs="crates/providers/shm crates/providers/hybrid tests/conformance crates/ofi-storage"
    root="$(pwd)"
    # The same cargo command as the test stage (packages, features,
    # profile): nothing to build, and its artifacts name every test binary
    # with its manifest.
    json="$(cargo test --workspace --release --exclude ofi-capi --no-run --message-format=json)"
    while IFS= read -r line; do
        # A test harness: its profile (not only its target) says test.
        case "$line" in *'"reason":"compiler-artifact"'*'"profile":{'*'"test":true}'*'"executable":"/'*) ;; *) continue ;; esac
        exe="$(sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' <<<"$line")"
        dir="$(sed -n 's/.*"manifest_path":"\([^"]*\)\/Cargo.toml".*/\1/p' <<<"$line")"
        rel="${dir#"$root"/}"
        for pkg in $pkgs; do
            [ "$rel" = "$pkg" ] || continue
            echo "+ (cd $rel && FI_SHM_DISABLE_CMA=1 FI_SHM_RING_SLOTS=4 ${exe#"$root"/})"
            t0=$SECONDS
            rc=0
            (cd "$dir" && FI_SHM_DISABLE_CMA=1 FI_SHM_RING_SLOTS=4 timeout --kill-after=10 300 "$exe") || rc=$?
            echo "  ($((SECONDS - t0))s, exit $rc)"
            ran=$((ran + 1))
            [ "$rc" -eq 0 ] || failed+=("$rel: $(basename "$exe") (exit $rc)")
        done
    done <<<"$json"
    if [ "$ran" -eq 0 ]; then
        echo "no test binary of $pkgs found" >&2
        return 1
    fi
    echo "$ran test binaries ran"
    if [ "${#failed[@]}" -gt 0 ]; then
        printf 'failed: %s\n' "${failed[@]}" >&2
        return 1
    fi
}

# The C ABI crate: the shared object first (its tests run clients on it).
# The safe and async layers under the address sanitizer.
asan_ofi() {
    local host
    host="$(rustc -vV | sed -n 's/^host: //p')"
    env RUSTC_BOOTSTRAP=1 RUSTFLAGS="-Zsanitizer=address" ASAN_OPTIONS=detect_leaks=1 \
        CARGO_TARGET_DIR=target/asan \
        cargo test -p ofi --target "$host" --lib --test aio --test safe_rma
}

# ofi's provider-free tests under Miri, when a nightly toolchain has it.
miri_ofi() {
    if ! cargo +nightly miri --version >/dev/null 2>&1; then
        echo "miri: no nightly toolchain with the miri component: SKIP"
        return "$SKIP_RC"
    fi
    cargo +nightly miri --version
    CARGO_TARGET_DIR=target/miri cargo +nightly miri test -p ofi --lib --features bytes
}

# The declared rust-version (the workspace's `rust-version`) builds the
# workspace: with that toolchain when rustup has it or can fetch it (bounded),
# else SKIP. clippy's incompatible_msrv lint (in the clippy stage) checks the
# standard library items used against the same version either way.
msrv() {
    local v
    v="$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml | head -1)"
    [ -n "$v" ] || { echo "no rust-version in Cargo.toml" >&2; return 1; }
    echo "declared rust-version: $v"
    if ! cargo "+$v" --version >/dev/null 2>&1; then
        if ! command -v rustup >/dev/null 2>&1 ||
            ! RUSTUP_AUTO_INSTALL=1 timeout 300 rustup toolchain install "$v" --profile minimal; then
            echo "msrv: toolchain $v is not installed and could not be fetched: SKIP"
            return "$SKIP_RC"
        fi
    fi
    CARGO_TARGET_DIR=target/msrv cargo "+$v" check --workspace --all-targets
}

capi() {
    cargo build --release -p ofi-capi
    cargo test --release -p ofi-capi --no-fail-fast
}

# The C example, built as any libfabric program is, linked to ofi's library
# (a libfabric.so.1 link beside libfabric.so, found through the rpath).
capi_example() {
    local lib exe prov provs deps cmd
    lib="$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)"
    exe="$lib/hello_fabric"
    ln -sf libfabric.so "$lib/libfabric.so.1"
    # The caller's LD_LIBRARY_PATH could name the system's libfabric.so.1 and
    # would come before a RUNPATH: the example runs without it, and is linked
    # with an RPATH, which the loader searches before LD_LIBRARY_PATH.
    unset LD_LIBRARY_PATH
    # (-Xlinker: a comma in the path would split a -Wl, argument.)
    cmd=(cc -O2 -Wall -Wextra -Werror -o "$exe" examples/c/hello_fabric.c -L"$lib" -lfabric
        -Xlinker -rpath -Xlinker "$lib" -Xlinker --disable-new-dtags)
    echo "+ ${cmd[*]}"
    "${cmd[@]}"
    # It must load ofi's library, not the system's. (ldd's output is read
    # whole first: `ldd | grep -q` under pipefail fails when grep leaves early.)
    deps="$(ldd "$exe")"
    printf '%s\n' "$deps"
    if ! grep -qF "libfabric.so.1 => $lib/libfabric.so.1 " <<<"$deps"; then
        echo "hello_fabric does not load $lib/libfabric.so.1" >&2
        return 1
    fi
    # On every provider the build registers (the example asks for an RDM
    # endpoint with FI_MSG, which each of them offers); udp on loopback (the
    # example names no node for it).
    provs="$("$OFI_BIN" info --list-providers)"
    if [ -z "$provs" ]; then
        echo "$OFI_BIN info --list-providers listed no provider" >&2
        return 1
    fi
    for prov in $provs; do
        echo "+ $exe $prov"
        FI_UDP_IFACE=lo timeout 60 "$exe" "$prov"
    done
}

# Debian's fi_pingpong on ofi's libfabric.so.1 over udp: DGRAM (64 B and
# 32 KiB, one datagram each) and RDM (64 B, and 1 MiB: segmented and
# reassembled), a server and a client on loopback (FI_UDP_IFACE=lo), data
# checked, each side bounded. The server's control port is a random one
# below the ephemeral range (32768 up) that nothing listens on.
capi_udp() {
    local lib ep size port srv rc
    lib="$(cd "${CARGO_TARGET_DIR:-target}/release" && pwd)"
    ln -sf libfabric.so "$lib/libfabric.so.1"
    for run in dgram:64 dgram:32768 rdm:64 rdm:1048576; do
        ep="${run%:*}"
        size="${run#*:}"
        port="$(shuf -i 20000-32000 -n 1)"
        while ss -Htln "sport = :$port" | grep -q .; do port="$(shuf -i 20000-32000 -n 1)"; done
        echo "+ fi_pingpong -p udp -e $ep -c -S $size -I 20 (control port $port) on $lib/libfabric.so.1"
        LD_LIBRARY_PATH="$lib" FI_UDP_IFACE=lo timeout 20 \
            fi_pingpong -p udp -e "$ep" -c -S "$size" -I 20 -B "$port" &
        srv=$!
        # The client connects once: wait (bounded) for the server to listen.
        for _ in $(seq 100); do
            ss -Htln "sport = :$port" | grep -q . && break
            sleep 0.1
        done
        rc=0
        LD_LIBRARY_PATH="$lib" FI_UDP_IFACE=lo timeout 20 \
            fi_pingpong -p udp -e "$ep" -c -S "$size" -I 20 -P "$port" 127.0.0.1 || rc=$?
        wait "$srv" || rc=$?
        [ "$rc" -eq 0 ] || return "$rc"
    done
}

e2e_pingpong() {
    echo "+ $OFI_BIN pingpong --local -p shm -S all -I 50 -c"
    "$OFI_BIN" pingpong --local -p shm -S all -I 50 -c
    for ep in dgram rdm; do
        echo "+ $OFI_BIN pingpong --local -p udp -e $ep -S 64,4k,32k -I 50 -c"
        FI_UDP_IFACE=lo timeout 60 "$OFI_BIN" pingpong --local -p udp -e "$ep" -S 64,4k,32k -I 50 -c
    done
}

e2e_info() {
    local out
    echo "+ $OFI_BIN info -p shm"
    out="$("$OFI_BIN" info -p shm)"
    printf '%s\n' "$out"
    if ! grep -q "provider: shm" <<<"$out"; then
        echo "'provider: shm' missing from 'ofi info -p shm'" >&2
        return 1
    fi
}

# The suite sets the libfabric variables its tests need: ones inherited from
# the caller's environment (FI_PROVIDER, FI_TCP_IFACE, FI_LOG_LEVEL …) would
# change what getinfo offers and what the clients print.
for var in $(compgen -e); do
    case "$var" in
        FI_*)
            echo "unsetting $var=${!var} for the test suite"
            unset "$var"
            ;;
    esac
done

# The suite builds the release profile without link-time optimisation. The
# tests check behaviour, which LTO does not change, and thin LTO re-optimises
# the whole crate graph at every link: about 17 s of CPU for each of the ~75
# release test binaries, against about 1.5 s without it (measured on one tcp
# test binary). Benchmarks (bench/, `cargo bench`) keep the profile's LTO.
# A caller's own CARGO_PROFILE_RELEASE_LTO wins.
export CARGO_PROFILE_RELEASE_LTO="${CARGO_PROFILE_RELEASE_LTO:-false}"

# The binary the build stage makes (target/release/ofi unless CARGO_TARGET_DIR
# says otherwise); exported for the stage functions, which run in a child bash.
export OFI_BIN="${CARGO_TARGET_DIR:-target}/release/ofi"

echo "ofi test suite in $ROOT ($(nproc) cpus)"

stage deps 0 deps
stage sh "$SHORT_TIMEOUT" sh_syntax
stage fmt "$STAGE_TIMEOUT" cargo fmt --all --check
stage clippy "$STAGE_TIMEOUT" cargo clippy --workspace --all-targets -- -D warnings -W clippy::incompatible_msrv
stage doc "$STAGE_TIMEOUT" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --lib
stage msrv "$STAGE_TIMEOUT" msrv
stage build "$STAGE_TIMEOUT" cargo build --release --workspace
stage test "$TEST_TIMEOUT" cargo test --workspace --release --no-fail-fast --exclude ofi-capi
stage conformance:hybrid-tcp "$STAGE_TIMEOUT" env FI_HYBRID_NODE=@endpoint \
    cargo test --release --no-fail-fast -p ofi-conformance
stage conformance:hybrid-udp "$STAGE_TIMEOUT" env FI_HYBRID_NODE=@endpoint FI_HYBRID_NET=udp \
    cargo test --release --no-fail-fast -p ofi-conformance
stage constrained-shm "$CONSTRAINED_TIMEOUT" constrained_shm
stage loom "$STAGE_TIMEOUT" env LOOM_MAX_PREEMPTIONS=3 RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p ofi-shmem --test loom_ring --test loom_xfer --test loom_wake --release
stage fuzz "$STAGE_TIMEOUT" fuzz_run
stage asan:ofi "$STAGE_TIMEOUT" asan_ofi
stage miri:ofi "$STAGE_TIMEOUT" miri_ofi

for ex in crates/ofi/examples/*.rs crates/ofi/examples/*/main.rs; do
    [ -e "$ex" ] || continue
    case "$ex" in
        */main.rs) name="$(basename "$(dirname "$ex")")" ;;
        *) name="$(basename "$ex" .rs)" ;;
    esac
    stage "example:$name" "$STAGE_TIMEOUT" cargo run --release -p ofi --features tokio,bytes --example "$name"
done

for ex in crates/ofi-storage/examples/*.rs; do
    [ -e "$ex" ] || continue
    name="$(basename "$ex" .rs)"
    stage "example:storage:$name" "$STAGE_TIMEOUT" cargo run --release -p ofi-storage --example "$name"
done

stage capi "$STAGE_TIMEOUT" capi
stage capi:example "$SHORT_TIMEOUT" capi_example
stage capi:udp "$SHORT_TIMEOUT" capi_udp
# The instruction-count guard measures the shipped build (thin LTO, its own
# target dir: the suite's other builds skip LTO).
stage instructions "$STAGE_TIMEOUT" env CARGO_PROFILE_RELEASE_LTO=thin CARGO_TARGET_DIR=target/bench \
    bench/instructions.sh --check bench/instructions.baseline
stage e2e:pingpong "$SHORT_TIMEOUT" e2e_pingpong
stage e2e:info "$SHORT_TIMEOUT" e2e_info

finish
