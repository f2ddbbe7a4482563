//! The panic boundary every exported function and ops-table slot runs in,
//! and the mapping of ofi errors to libfabric's negative return codes.

use libc::{c_int, ssize_t};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;

static LOG_INIT: Once = Once::new();

/// Installs the C application's log output (once per process): the library
/// crates only emit events, and libfabric's C programs expect FI_LOG_LEVEL
/// to print them on stderr. A subscriber already installed in the process
/// (a Rust host of this library) is kept.
fn init_logging() {
    LOG_INIT.call_once(|| {
        let _ = tracing_subscriber::fmt()
            .with_max_level(ofi_core::config::log_level())
            .with_writer(std::io::stderr)
            .with_target(true)
            .try_init();
    });
}

/// Runs `f`; if it panics, logs the panic and returns `on_panic` instead of
/// unwinding into C. The first call installs the log output.
pub(crate) fn ffi<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    init_logging();
    hot(on_panic, f)
}

/// [`ffi`] for the data path (sends, receives, RMA, atomics, CQ and
/// counter reads): the same panic boundary, inlined into the slot, without
/// the log set-up, which the calls that open the objects these act on have
/// done already.
#[inline(always)]
pub(crate) fn hot<R>(on_panic: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => caught(payload, on_panic),
    }
}

/// Logs a caught panic and returns the slot's fallback value.
#[cold]
#[inline(never)]
fn caught<R>(payload: Box<dyn std::any::Any + Send>, on_panic: R) -> R {
    let msg = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    tracing::error!("ofi C ABI: panic caught at the library boundary: {msg}");
    on_panic
}

/// The `int` return value of an error: `-FI_E*`.
pub(crate) fn err(e: &ofi_core::Error) -> c_int {
    -e.code()
}

/// The `ssize_t` return value of an error: `-FI_E*`.
pub(crate) fn err_isize(e: &ofi_core::Error) -> ssize_t {
    -(e.code() as ssize_t)
}

/// `-code` for an `FI_E*` number, as an `int` return value.
pub(crate) const fn neg(code: i32) -> c_int {
    -code
}

/// `-code` for an `FI_E*` number, as an `ssize_t` return value.
pub(crate) const fn neg_isize(code: i32) -> ssize_t {
    -(code as ssize_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ofi_core::error::errno::*;

    #[test]
    fn panic_becomes_the_fallback_value() {
        let r = ffi(neg(FI_EOTHER), || -> c_int { panic!("boom") });
        assert_eq!(r, -FI_EOTHER);
        assert_eq!(ffi(-1, || 7), 7);
    }

    #[test]
    fn errors_are_negated() {
        let e = ofi_core::Error::inval("x");
        assert_eq!(err(&e), -FI_EINVAL);
        assert_eq!(err_isize(&e), -(FI_EINVAL as ssize_t));
        assert_eq!(neg_isize(FI_EAGAIN), -11);
    }
}
