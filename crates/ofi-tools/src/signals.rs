//! SIGINT and SIGTERM as a flag the long-running tools poll (the storage
//! target and gateway shut down cleanly on either).

use std::sync::atomic::{AtomicBool, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    STOP.store(true, Ordering::Relaxed);
}

/// Installs the handler for SIGINT and SIGTERM.
#[allow(unsafe_code)]
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: a zeroed sigaction is a valid value (empty mask, no
        // flags); the handler only stores to an atomic, which is
        // async-signal-safe; sigaction is given valid pointers.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// True once SIGINT or SIGTERM arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}
