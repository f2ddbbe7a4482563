#!/usr/bin/env bash
# scripts/sanitize.sh: the core's and the tcp provider's tests under
# AddressSanitizer and ThreadSanitizer.
#
#   scripts/sanitize.sh                 # both, ofi-core and ofi-prov-tcp
#   scripts/sanitize.sh asan            # one of them
#   CRATES="ofi-core" scripts/sanitize.sh tsan
#   BUILD_STD=1 scripts/sanitize.sh tsan   # std instrumented too (nightly)
#   CRATES=ofi-prov-tcp scripts/sanitize.sh tsan --test flood   # one binary
#                                       (arguments after the mode go to cargo)
#
# How it works, and its limits:
# - The stable toolchain with RUSTC_BOOTSTRAP=1 accepts -Zsanitizer=...;
#   --target is given explicitly so the flags reach only the target's
#   crates, not build scripts or proc macros. Each sanitizer has its own
#   target directory (target/sanitize-asan, target/sanitize-tsan).
# - AddressSanitizer needs nothing more: std is not instrumented (its own
#   accesses go unchecked), every crate of ours and every dependency is,
#   and allocations are checked through the interposed malloc/free.
#   LeakSanitizer is off (detect_leaks=0): the test children leave through
#   process::exit with threads and objects alive on purpose.
# - ThreadSanitizer changes the ABI, and rustc refuses to link crates built
#   with it against the prebuilt std unless told
#   -Cunsafe-allow-abi-mismatch=sanitizer. That build runs, but std was
#   compiled without the sanitizer and TSan misses some of its
#   synchronisation, which gives two known false positives (seen on
#   2026-11-25 on the tcp tests auto_progress, flood, survivors):
#   libtest's result channel (std::sync::mpmc, suppressed below) and the
#   last drop of an Arc (alloc's Arc::drop uses an acquire *fence*, which
#   TSan does not model; std built with the sanitizer uses an acquire load
#   instead): reports ending in `Arc::drop` / `drop_slow` -> `dealloc`
#   are that, not ours. BUILD_STD=1 removes both: it builds std with the
#   sanitizer (cargo +nightly -Zbuild-std, which needs the nightly
#   toolchain's rust-src component; slow, minutes per crate on 2 cores).
# - Tests run in release mode with debug info; timeouts in the tests are
#   bounds, not speed checks, but a loaded machine under TSan (5-15x
#   slower) can come close to them: TSAN_OPTIONS sets no extra delay.
# Exit status: non-zero if any test fails or a sanitizer reports.
set -euo pipefail
cd "$(dirname "$0")/.."

which="${1:-all}"
shift || true
crates="${CRATES:-ofi-core ofi-prov-tcp}"
host="$(rustc -vV | sed -n 's/^host: //p')"

run() { # run SANITIZER EXTRA_RUSTFLAGS [CARGO_ARGS...] (default --tests)
    local san="$1" extra="$2" args=() tc=() std=()
    shift 2
    for c in $crates; do args+=(-p "$c"); done
    if [ "${BUILD_STD:-0}" = 1 ]; then
        tc=(+nightly)
        std=(-Zbuild-std)
        extra=""
    fi
    echo "+ $san: ${crates} (target/sanitize-$san)"
    # libtest's channel between test threads and the harness (std, not
    # instrumented without BUILD_STD=1).
    local supp rc=0
    supp="$(mktemp)"
    printf 'race:std::sync::mpmc\nrace:test::run_test\nrace:test::event\n' >"$supp"
    env RUSTC_BOOTSTRAP=1 \
        RUSTFLAGS="-Zsanitizer=$san $extra" \
        CARGO_TARGET_DIR="target/sanitize-$san" \
        ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" \
        TSAN_OPTIONS="halt_on_error=1:report_signal_unsafe=0:suppressions=$supp" \
        cargo "${tc[@]}" test "${std[@]}" --release --target "$host" "${args[@]}" \
        --no-fail-fast "${@:---tests}" || rc=$?
    rm -f "$supp"
    return "${rc:-0}"
}

case "$which" in
    asan) run address "" "$@" ;;
    tsan) run thread "-Cunsafe-allow-abi-mismatch=sanitizer" "$@" ;;
    all)
        run address "" "$@"
        run thread "-Cunsafe-allow-abi-mismatch=sanitizer" "$@"
        ;;
    *)
        echo "usage: $0 [asan|tsan|all]" >&2
        exit 2
        ;;
esac
