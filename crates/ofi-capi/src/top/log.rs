//! Logging: `fi_log`, `fi_log_enabled` and `fi_log_ready`, filtered by
//! FI_LOG_LEVEL, FI_LOG_PROV and FI_LOG_SUBSYS.

use super::names::{name, LOG_LEVEL, LOG_SUBSYS};
use super::params::provider_name;
use super::tostr::s_or_null;
use crate::abi::*;
use crate::guard::ffi;
use std::ptr;
use std::sync::OnceLock;

/// FI_LOG_LEVEL, FI_LOG_PROV and FI_LOG_SUBSYS, read once.
struct LogConfig {
    /// Highest enabled level (`FI_LOG_*`), `None`: logging off.
    level: Option<fi_log_level>,
    /// Provider filter (`prov1,prov2` or `^prov`).
    prov: Option<ofi_core::hints::ProviderFilter>,
    /// Subsystem filter (`cq,eq` or `^ep_data`), same syntax as FI_LOG_PROV.
    subsys: Option<ofi_core::hints::ProviderFilter>,
}

fn log_config() -> &'static LogConfig {
    static CFG: OnceLock<LogConfig> = OnceLock::new();
    CFG.get_or_init(|| {
        let level = std::env::var("FI_LOG_LEVEL").ok().and_then(|v| {
            let v = v.trim().to_ascii_lowercase();
            LOG_LEVEL
                .iter()
                .position(|n| *n == v)
                .map(|p| p as fi_log_level)
        });
        let prov = std::env::var("FI_LOG_PROV")
            .ok()
            .and_then(|v| ofi_core::hints::ProviderFilter::parse(&v).ok());
        let subsys = std::env::var("FI_LOG_SUBSYS")
            .ok()
            .and_then(|v| ofi_core::hints::ProviderFilter::parse(&v).ok());
        LogConfig {
            level,
            prov,
            subsys,
        }
    })
}

fn log_enabled(prov: &str, level: fi_log_level, subsys: fi_log_subsys) -> bool {
    log_config().allows(prov, level, subsys)
}

impl LogConfig {
    /// Whether a message of this provider, level and subsystem is printed.
    fn allows(&self, prov: &str, level: fi_log_level, subsys: fi_log_subsys) -> bool {
        self.level.is_some_and(|l| level <= l)
            && self.prov.as_ref().is_none_or(|f| f.allows(prov))
            && self
                .subsys
                .as_ref()
                .is_none_or(|f| f.allows(name(LOG_SUBSYS, subsys)))
    }
}

/// `fi_log_enabled`: whether a message of this provider, level and
/// subsystem would be printed (FI_LOG_LEVEL, FI_LOG_PROV, FI_LOG_SUBSYS).
///
/// # Safety
/// `prov` is NULL or a valid `struct fi_provider`.
pub unsafe extern "C" fn fi_log_enabled(
    prov: *const fi_provider,
    level: fi_log_level,
    subsys: fi_log_subsys,
) -> c_int {
    ffi(0, || {
        // SAFETY: the caller's contract.
        let name = unsafe { provider_name(prov) };
        c_int::from(log_enabled(&name, level, subsys))
    })
}

/// `fi_log_ready` (FABRIC_1.6): like [`fi_log_enabled`], but at most once
/// per second per `showtime` (sparse logging).
///
/// # Safety
/// `prov` is NULL or a valid `struct fi_provider`; `showtime` is NULL or
/// points to the caller's timestamp.
pub unsafe extern "C" fn fi_log_ready(
    prov: *const fi_provider,
    level: fi_log_level,
    subsys: fi_log_subsys,
    showtime: *mut u64,
) -> c_int {
    ffi(0, || {
        // SAFETY: the caller's contract.
        let name = unsafe { provider_name(prov) };
        if !log_enabled(&name, level, subsys) {
            return 0;
        }
        // SAFETY: showtime is NULL or writable (caller's contract).
        let Some(t) = (unsafe { showtime.as_mut() }) else {
            return 1;
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        if now < *t {
            return 0;
        }
        *t = now + 1000;
        1
    })
}

extern "C" {
    /// C's `vsnprintf`; on x86-64 a `va_list` is passed as a pointer.
    fn vsnprintf(s: *mut c_char, n: size_t, fmt: *const c_char, ap: *mut c_void) -> c_int;
}

/// Expands a printf format with a C `va_list`.
///
/// # Safety
/// `fmt` is a C format string whose arguments `ap` holds; `ap` points to a
/// 24-byte x86-64 `va_list` that is not used afterwards.
pub(super) unsafe fn format_va(fmt: *const c_char, ap: *mut c_void) -> Option<String> {
    if fmt.is_null() {
        return None;
    }
    let mut copy = [0u8; 24];
    // SAFETY: ap is a 24-byte va_list; the copy is a va_copy on x86-64.
    unsafe { ptr::copy_nonoverlapping(ap.cast::<u8>(), copy.as_mut_ptr(), 24) };
    // SAFETY: sizing call: NULL buffer of size 0.
    let n = unsafe { vsnprintf(ptr::null_mut(), 0, fmt, ap) };
    let n = usize::try_from(n).ok()?;
    let mut buf = vec![0u8; n + 1];
    // SAFETY: buf holds n + 1 bytes; `copy` is an unused va_list.
    unsafe {
        vsnprintf(
            buf.as_mut_ptr().cast(),
            n + 1,
            fmt,
            copy.as_mut_ptr().cast(),
        )
    };
    buf.truncate(n);
    Some(String::from_utf8_lossy(&buf).into_owned())
}

/// The body of `fi_log`: `regs` holds the six integer argument registers
/// (prov, level, subsys, func, line, fmt), `ap` the variadic arguments.
///
/// # Safety
/// Called only by the `fi_log` entry in `compat` with the caller's
/// arguments.
pub(crate) unsafe extern "C" fn fi_log_va(regs: *const u64, ap: *mut c_void) {
    ffi((), || {
        // SAFETY: regs holds six saved registers (the entry's contract).
        let r = unsafe { std::slice::from_raw_parts(regs, 6) };
        let prov = r[0] as *const fi_provider;
        let (level, subsys) = (r[1] as u32, r[2] as u32);
        let func = r[3] as *const c_char;
        let line = r[4] as u32 as c_int;
        let fmt = r[5] as *const c_char;
        // SAFETY: the arguments of fi_log as the provider passed them.
        let (prov, func, msg) =
            unsafe { (provider_name(prov), s_or_null(func), format_va(fmt, ap)) };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let text = format!(
            "libfabric:{}:{}::{}:{}:{}():{}<{}> {}",
            std::process::id(),
            now,
            prov,
            name(LOG_SUBSYS, subsys),
            func,
            line,
            name(LOG_LEVEL, level),
            msg.unwrap_or_default()
        );
        let text = if text.ends_with('\n') {
            text
        } else {
            text + "\n"
        };
        use std::io::Write as _;
        let _ = std::io::stderr().write_all(text.as_bytes());
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_filters() {
        use ofi_core::hints::ProviderFilter;
        let off = LogConfig {
            level: None,
            prov: None,
            subsys: None,
        };
        assert!(!off.allows("tcp", log_level::FI_LOG_WARN, 0));
        let info = LogConfig {
            level: Some(log_level::FI_LOG_INFO),
            prov: ProviderFilter::parse("^shm").ok(),
            subsys: ProviderFilter::parse("cq,eq").ok(),
        };
        assert!(info.allows("tcp", log_level::FI_LOG_WARN, log_subsys::FI_LOG_CQ));
        assert!(!info.allows("tcp", log_level::FI_LOG_DEBUG, log_subsys::FI_LOG_CQ));
        assert!(!info.allows("shm", log_level::FI_LOG_WARN, log_subsys::FI_LOG_CQ));
        assert!(!info.allows("tcp", log_level::FI_LOG_WARN, log_subsys::FI_LOG_MR));
    }
}
