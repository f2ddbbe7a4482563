//! Discovery: `fi_getinfo`, `fi_freeinfo` and `fi_dupinfo`.

use super::names::{MODE, MR_MODE};
use super::PANIC;
use crate::abi::*;
use crate::guard::{self, ffi};
use crate::info;
use ofi_core::error::errno::*;
use std::ffi::CStr;
use std::ptr;

/// A C string argument as `&str`: `Ok(None)` for NULL, `Err` for invalid UTF-8.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn arg_str<'a>(p: *const c_char) -> Result<Option<&'a str>, c_int> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller's contract.
    match unsafe { CStr::from_ptr(p) }.to_str() {
        Ok(s) => Ok(Some(s)),
        Err(_) => Err(guard::neg(FI_EINVAL)),
    }
}

/// `fi_getinfo` (FABRIC_1.3): the offers matching `hints`, best first, as a
/// list the caller frees with `fi_freeinfo`. `-FI_ENODATA` when nothing
/// matches; `-FI_EINVAL` for a NULL `info` or malformed hints.
///
/// # Safety
/// `node`, `service` are NULL or C strings; `hints` is NULL or a valid
/// `fi_info`; `info` is NULL or writable.
pub unsafe extern "C" fn fi_getinfo(
    version: u32,
    node: *const c_char,
    service: *const c_char,
    flags: u64,
    hints: *const fi_info,
    info: *mut *mut fi_info,
) -> c_int {
    ffi(PANIC, || {
        if info.is_null() {
            return guard::neg(FI_EINVAL);
        }
        // SAFETY: `info` is non-NULL and writable (caller's contract).
        unsafe { *info = ptr::null_mut() };
        // SAFETY: the caller's contract on node and service.
        let (node, service) = match unsafe { (arg_str(node), arg_str(service)) } {
            (Ok(n), Ok(s)) => (n, s),
            (Err(e), _) | (_, Err(e)) => return e,
        };
        let hints_c = hints;
        let hints = if hints.is_null() {
            None
        } else {
            // SAFETY: non-NULL hints are a valid fi_info (caller's contract).
            match unsafe { info::info_from_c(hints) } {
                Ok(mut h) => {
                    relax_hints(&mut h);
                    Some(h)
                }
                Err(e) => return e,
            }
        };
        let result = if flags & ofi_core::consts::FI_PROV_ATTR_ONLY != 0 {
            provider_list(hints.as_ref())
        } else {
            ofi::getinfo(version, node, service, flags, hints.as_ref())
        };
        let offers = match result {
            Ok(o) => o,
            Err(e) => {
                tracing::info!("fi_getinfo: {}", e.message());
                return guard::err(&e);
            }
        };
        if offers.is_empty() {
            return guard::neg(FI_ENODATA);
        }
        match info::list_to_c(&offers) {
            Ok(list) => {
                // fi_getinfo(3): a passive endpoint in hints->handle is
                // copied to each info->handle (fi_endpoint then gives its
                // address to the active endpoint).
                let hinted = if hints_c.is_null() {
                    ptr::null_mut()
                } else {
                    // SAFETY: non-NULL hints are a valid fi_info (caller's contract).
                    unsafe { (*hints_c).handle }
                };
                // SAFETY: a hinted handle is NULL or a fid of the application.
                if unsafe { crate::obj::pep::pep(hinted) }.is_some() {
                    let h = hinted;
                    let mut i = list;
                    while !i.is_null() {
                        // SAFETY: `i` is a node of the list just built.
                        unsafe {
                            (*i).handle = h;
                            i = (*i).next;
                        }
                    }
                }
                // SAFETY: `info` is non-NULL (checked on entry) and writable (caller's contract).
                unsafe { *info = list };
                0
            }
            Err(e) => e,
        }
    })
}

/// Hints say in `mode` and `mr_mode` what the application supports; bits no
/// provider can require mean nothing there (Debian's `fi_info` passes all
/// ones), so they are dropped before ofi's strict hint validation.
fn relax_hints(h: &mut ofi_core::Info) {
    let modes = MODE.iter().fold(0, |m, (bit, _)| m | bit);
    let mr_modes = MR_MODE.iter().fold(0, |m, (bit, _)| m | bit) as u32;
    h.mode &= modes;
    h.tx_attr.mode &= modes;
    h.rx_attr.mode &= modes;
    h.domain_attr.mode &= modes;
    h.domain_attr.mr_mode &= mr_modes;
}

/// `FI_PROV_ATTR_ONLY`: one offer per provider that FI_PROVIDER and the
/// hinted provider names allow, with only the provider's name and version
/// filled in (usable or not).
fn provider_list(hints: Option<&ofi_core::Info>) -> ofi_core::Result<Vec<ofi_core::Info>> {
    use ofi_core::hints::ProviderFilter;
    ofi::init();
    let env = ofi_core::config::provider_filter()?;
    let hinted = match hints.and_then(|h| h.fabric_attr.prov_name.as_deref()) {
        Some(p) => Some(ProviderFilter::parse(p)?),
        None => None,
    };
    let mut out: Vec<ofi_core::Info> = Vec::new();
    for (name, version, _) in ofi_core::registry::providers() {
        let allowed = |f: &Option<ProviderFilter>| f.as_ref().is_none_or(|f| f.allows(&name));
        if !allowed(&env) || !allowed(&hinted) || out.iter().any(|o| o.provider() == name) {
            continue;
        }
        let mut i = ofi_core::Info::default();
        i.fabric_attr.prov_name = Some(name);
        i.fabric_attr.prov_version = version;
        i.fabric_attr.api_version = ofi_core::consts::FI_VERSION_CURRENT;
        out.push(i);
    }
    Ok(out)
}

/// `fi_freeinfo` (FABRIC_1.3): frees a whole `fi_info` list (NULL is a no-op).
///
/// # Safety
/// `info` is NULL or a list from `fi_getinfo`/`fi_dupinfo` (fields the
/// application replaced allocated with `malloc`), not used afterwards.
pub unsafe extern "C" fn fi_freeinfo(info: *mut fi_info) {
    // SAFETY: the caller's contract.
    ffi((), || unsafe { info::free_info(info) })
}

/// `fi_dupinfo` (FABRIC_1.3): a deep copy of one `fi_info` (not its `next`);
/// for NULL, a zeroed info with all five attribute structs (`fi_allocinfo`).
/// NULL when out of memory.
///
/// # Safety
/// `info` is NULL or a valid `fi_info`.
pub unsafe extern "C" fn fi_dupinfo(info: *const fi_info) -> *mut fi_info {
    ffi(ptr::null_mut(), || {
        let r = if info.is_null() {
            info::alloc_info()
        } else {
            // SAFETY: the caller's contract.
            unsafe { info::dup_info(info) }
        };
        r.unwrap_or(ptr::null_mut())
    })
}
